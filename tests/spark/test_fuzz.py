"""Hostile values at every option of every operator command, every field of the operator job and every field of the
config YAML: each call succeeds or is refused with a `QA-` code, never with a traceback, and a refusal changes
no table."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from graph_driver import Loop

from quarantine_assets.cli import main
from quarantine_assets.config.loader import load_project
from quarantine_assets.errors import ConfigError
from quarantine_assets.settings import REPO_ROOT

SOURCE = "demo.bronze.orders"
ROWS = [(1, None, 1.0, "EUR"), (2, None, 2.0, "EUR"), (3, 3, -3.0, "EUR"), (4, 4, 4.0, "XXX")]
HOSTILE = [
    "",
    "ünï𝔠ødé ‮mark",
    "it's",
    'say "hi"',
    "back`tick",
    "x -- comment",
    "a; DROP TABLE t; --",
    "[/x] [link=https://example.com]y[/link]",
    "\x1b[31mred\x1b[0m\x07",
    "NaN",
    "-Infinity",
    "-1",
    "99999999999999999999999999",
    "x" * 1_000_000,
]
# Fewer for the operator job, whose every call is a Dagster run: one of each kind of hostility.
JOB_HOSTILE = ["it's", "a; DROP TABLE t; --", "[/x] \x1b[31m\u202e", "NaN", "x" * 100_000]
CODED = re.compile(r"QA-[A-Z]+-\d{3}")


def command_lines(key: str, landing: Path) -> dict[str, list[str]]:
    """Each command as an operator types it: every argument but the command and the option names takes each hostile
    value in turn."""
    return {
        "list": [
            "list",
            "--source",
            SOURCE,
            "--status",
            "quarantined",
            "--rule",
            "r",
            "--older-than-hours",
            "1",
            "--limit",
            "5",
            "--dlq",
            "demo.ops.dlq",
        ],
        "show": ["show", key, "--dlq", "demo.ops.dlq"],
        "stats": ["stats", "--source", SOURCE, "--dlq", "demo.ops.dlq"],
        "fix": [
            "fix",
            "--source",
            SOURCE,
            "--where",
            "row_no = 1",
            "--set",
            "order_id=1",
            "--set-expr",
            "amount = abs(amount)",
            "--limit",
            "5",
            "--by",
            "fuzz",
            "--dry-run",
        ],
        "fix_keys": ["fix", key, "--source", SOURCE, "--set", "order_id=1", "--by", "fuzz", "--dry-run"],
        "fix_payload": ["fix", key, "--source", SOURCE, "--payload", '{"row_no": 1}', "--dry-run"],
        "redrive": [
            "redrive",
            "--source",
            SOURCE,
            "--rule",
            "valid_order_id",
            "--run",
            "r",
            "--since",
            "2020-01-01T00:00:00",
            "--where",
            "row_no = 1",
            "--limit",
            "5",
            "--by",
            "fuzz",
            "--dry-run",
        ],
        "discard": ["discard", key, "--source", SOURCE, "--reason", "test", "--by", "fuzz"],
        "files": ["files", "--dlq", "demo.ops.dlq"],
        "redrive-file": ["redrive-file", str(landing / "a.csv"), "--by", "fuzz"],
        "forget": ["forget", "--source", SOURCE, "--where", "row_no = 99", "--by", "fuzz", "--dry-run"],
        "purge": ["purge", "--source", SOURCE, "--older-than-days", "30", "--by", "fuzz", "--dry-run"],
        "claims": ["claims", "--dlq", "demo.ops.dlq"],
        "transfer-claim": ["transfer-claim", SOURCE, "--to", "dq_orders", "--by", "fuzz", "--dlq", "demo.ops.dlq"],
        "release-claim": ["release-claim", "demo.bronze.nothing", "--dlq", "demo.ops.dlq"],
    }


def versions(warehouse) -> dict[str, int]:
    """Each table's commits, counted from its log on disk: what a refusal must leave as it was."""
    return {
        str(log.parent): len(list(log.glob("*.json")))
        for log in Path(warehouse.root).rglob("_delta_log")
        if "_checkpoints" not in log.parts
    }


def test_hostile_values_at_every_command_option_are_accepted_or_refused_with_a_code(
    spark, warehouse, tmp_path, monkeypatch, capsys
):
    loop = Loop(spark, warehouse, tmp_path)
    loop.ingest(ROWS)
    key = loop.key_of(1)
    options = ["--config-dir", str(REPO_ROOT / "configs"), "--warehouse", warehouse.root]
    monkeypatch.setenv("COLUMNS", "100")
    problems = []

    def run(arguments: list[str]) -> None:
        shown = [argument[:60] for argument in arguments]
        before = versions(warehouse)
        monkeypatch.setattr(sys, "argv", ["quarantine-assets", *arguments])
        try:
            main()
            exit_code = 0
        except SystemExit as exit_:
            exit_code = exit_.code or 0
        except Exception as error:  # a traceback an operator would see
            problems.append((shown, f"{type(error).__name__}: {str(error)[:300]}"))
            return
        out = capsys.readouterr()
        if exit_code and not CODED.search(out.err):
            problems.append((shown, f"exit {exit_code} without a code: {out.err[-300:]!r}"))
        if exit_code and versions(warehouse) != before:
            problems.append((shown, "refused, but a table changed"))

    for name, line in command_lines(key, tmp_path / "landing").items():
        # Every argument but the command and the option names: one place at a time takes each hostile value.
        for place in [index for index in range(1, len(line)) if not line[index].startswith("--")]:
            for value in HOSTILE:
                arguments = [*line[:place], value, *line[place + 1 :]]
                if name == "discard" and place != 1:
                    arguments[1] = loop.key_of(2)  # row 1 may be discarded by then
                run([*options, *arguments])
    for place in (1, 3):  # the shared options' values: configs folder and warehouse
        for value in HOSTILE:
            run([*options[:place], value, *options[place + 1 :], "stats"])
    assert problems == []


# Besides the hostile strings, values of every other YAML kind, where a string or a number is expected.
HOSTILE_YAML = [*HOSTILE[:-1], "x" * 100_000, None, 0, -1, 1e309, float("nan"), True, [], ["a", 1], {}, {"a": [1]}]


def leaves(node, path=()):
    """The path of every scalar of a YAML document, and of every list and mapping too: each can be replaced."""
    yield path
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for name, child in children:
        yield from leaves(child, (*path, name))


def replaced(document, path, value):
    if not path:
        return value
    copy = dict(document) if isinstance(document, dict) else list(document)
    copy[path[0]] = replaced(document[path[0]], path[1:], value)
    return copy


@pytest.mark.parametrize(
    "relative",
    ["pipelines/demo/orders.yaml", "expectations/orders.yaml", "substitutions/dev.yaml", "lhp.yaml"],
)
def test_hostile_values_at_every_config_field_load_or_are_refused_with_a_code(tmp_path, relative):
    original = yaml.safe_load((REPO_ROOT / "configs" / relative).read_text())
    problems = []
    for path in leaves(original):
        for value in HOSTILE_YAML:
            config_dir = tmp_path / "configs"
            shutil.rmtree(config_dir, ignore_errors=True)
            shutil.copytree(REPO_ROOT / "configs", config_dir)
            (config_dir / relative).write_text(yaml.safe_dump(replaced(original, path, value), allow_unicode=True))
            try:
                load_project(config_dir, "dev", tmp_path / "warehouse")
            except ConfigError as error:
                if not all(CODED.fullmatch(problem.code) for problem in error.problems):
                    problems.append((path, repr(value)[:40], str(error)[:200]))
            except Exception as error:  # a traceback the user would see
                problems.append((path, repr(value)[:40], f"{type(error).__name__}: {str(error)[:200]}"))
    assert problems == []


def test_hostile_values_at_every_operator_job_field_run_or_fail_with_a_code(spark, warehouse, tmp_path):
    loop = Loop(spark, warehouse, tmp_path)
    loop.ingest(ROWS)
    job = loop.defs.resolve_job_def("dlq_operator")
    commands = {
        "fix": {"keys": [loop.key_of(1)], "set_fields": '{"order_id": 1}', "dry_run": True},
        "fix_where": {"where": "row_no = 1", "set_expressions": ["amount = abs(amount)"], "limit": 5, "dry_run": True},
        "fix_payload": {"keys": [loop.key_of(1)], "payload": '{"row_no": 1}', "dry_run": True},
        "redrive": {"where": "row_no = 1", "redrive": True, "dry_run": True},
        "discard": {"keys": [loop.key_of(2)], "discard_reason": "test"},
    }
    numbers = [-1, 0, 2**63 - 1]
    problems = []
    for name, command in commands.items():
        command = {"source_table": SOURCE, "by": "fuzz", **command}
        for field, value in command.items():
            if isinstance(value, bool):
                continue
            kinds = numbers if isinstance(value, int) else JOB_HOSTILE
            for hostile in kinds:
                config = command | {field: [hostile] if isinstance(value, list) else hostile}
                before = versions(warehouse)
                result = job.execute_in_process(
                    run_config={"ops": {"apply_dlq_command": {"config": config}}},
                    instance=loop.instance,
                    raise_on_error=False,
                )
                if result.success:
                    continue
                (failure,) = [event for event in result.all_events if event.event_type_value == "STEP_FAILURE"]
                # What the UI shows: Dagster's step error, then the error it wraps.
                error, shown = failure.event_specific_data.error, []
                while error is not None:
                    shown.append(f"{error.cls_name}: {error.message}")
                    error = error.cause
                if not CODED.search(shown[-1]):
                    problems.append((name, field, repr(hostile)[:40], shown[-1][:300]))
                if versions(warehouse) != before:
                    problems.append((name, field, repr(hostile)[:40], "failed, but a table changed"))
    assert problems == []
