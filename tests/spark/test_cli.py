"""The commands a newcomer and an operator type, run in-process against the session's Spark."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

import yaml
from file_scan import files_holding_text
from typer.testing import CliRunner

from quarantine_assets.cli import app
from quarantine_assets.display import CELL_CHARACTERS
from quarantine_assets.errors import OperatorError
from quarantine_assets.settings import REPO_ROOT

runner = CliRunner()


def test_dagster_loads_the_definitions_from_the_workspace():
    dagster = Path(sys.executable).parent / "dagster"
    completed = subprocess.run(
        [str(dagster), "definitions", "validate", "-w", "workspace.yaml"],
        cwd=REPO_ROOT,
        env={k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"},  # a temporary instance
        capture_output=True,
        text=True,
    )
    assert completed.returncode == 0, completed.stderr
    assert "All code locations passed validation" in completed.stderr + completed.stdout


def test_demo_runs_end_to_end_and_prints_locations_and_counts(spark, tmp_path):
    result = runner.invoke(app, ["--warehouse", str(tmp_path), "demo"], env={"COLUMNS": "250"}, catch_exceptions=False)

    assert result.exit_code == 0, result.output
    counts = dict(re.findall(r"│ (dq_\w+/\w+)\s*│.*?│\s*(\d+)\s*│", result.output))
    assert set(counts) == {"dq_orders/validated", "dq_orders/inbox", "dq_customers/validated", "dq_customers/inbox"}
    assert int(counts["dq_orders/inbox"]) >= 2  # the generator always writes one bad row twice
    assert int(counts["dq_orders/validated"]) + int(counts["dq_orders/inbox"]) == 42
    assert (tmp_path / "demo" / "ops" / "dlq" / "_delta_log").is_dir()


def test_ddl_prints_inbox_and_outbox_statements():
    result = runner.invoke(app, ["--warehouse", "/wh", "ddl"])

    assert result.exit_code == 0
    assert "CREATE TABLE IF NOT EXISTS delta.`/wh/demo/ops/dlq`" in result.output
    assert "CREATE TABLE IF NOT EXISTS delta.`/wh/demo/ops/dlq_outbox`" in result.output
    assert "CLUSTER BY (_dlq_source_table)" in result.output


def test_validate_prints_every_problem_and_exits_non_zero(tmp_path):
    for relative in ("pipelines", "expectations", "substitutions"):
        (tmp_path / relative).mkdir()
    (tmp_path / "substitutions" / "dev.yaml").write_text(yaml.safe_dump({"dev": {}}))
    (tmp_path / "pipelines" / "broken.yaml").write_text("pipeline: p\nflowgroup: f\nactions: [{name: a}]\n")
    (tmp_path / "pipelines" / "unparseable.yaml").write_text("pipeline: [\n")

    cli = Path(sys.executable).parent / "quarantine-assets"
    completed = subprocess.run(
        [str(cli), "--config-dir", str(tmp_path), "validate", "--no-parse-rules"], capture_output=True, text=True
    )

    assert completed.returncode == 1
    assert "Traceback" not in completed.stderr
    assert "QA-CFG-001" in completed.stderr and "QA-CFG-002" in completed.stderr
    assert "unparseable.yaml" in completed.stderr and "broken.yaml" in completed.stderr


def test_operator_commands_list_fix_and_refuse_with_a_code(spark, tmp_path):
    wide = {"COLUMNS": "250"}
    assert runner.invoke(app, ["--warehouse", str(tmp_path), "demo"], env=wide).exit_code == 0
    listed = runner.invoke(
        app,
        ["--warehouse", str(tmp_path), "list", "--source", "demo.bronze.orders", "--rule", "valid_order_id"],
        env=wide,
    )
    assert listed.exit_code == 0
    key = re.search(r"│ ([0-9a-f]{24}-\d+) │", listed.output).group(1)
    assert "Row(" not in listed.output and "valid_order_id: order_id IS NOT NULL" in listed.output
    narrow = runner.invoke(app, ["--warehouse", str(tmp_path), "list"], env={"COLUMNS": "80"})
    assert narrow.exit_code == 0 and max(len(line) for line in narrow.output.splitlines()) <= 80

    fixed = runner.invoke(
        app,
        ["--warehouse", str(tmp_path), "fix", key, "--source", "demo.bronze.orders", "--set", "order_id=77"],
        env=wide,
    )
    assert fixed.exit_code == 0 and "1 row(s) of demo.bronze.orders marked fixed" in fixed.output
    shown = runner.invoke(app, ["--warehouse", str(tmp_path), "show", key], env=wide)
    assert shown.exit_code == 0, shown.output
    url, line, offset, text = re.search(r"source line: (\S+):(\d+) \(byte (\d+)\)\n(.*)\n", shown.output).groups()
    source_file = Path(unquote(urlparse(url).path))
    assert source_file.read_text().splitlines()[int(line) - 1] == text
    assert source_file.read_bytes()[int(offset) :].startswith(text.encode())
    assert re.search(rf"_dlq_source_file: {re.escape(url)}\n", shown.output)
    stats = runner.invoke(app, ["--warehouse", str(tmp_path), "stats"], env=wide)
    assert stats.exit_code == 0 and "fixed" in stats.output and "oldest quarantined row" in stats.output

    refused = runner.invoke(
        app, ["--warehouse", str(tmp_path), "discard", key, "--source", "demo.bronze.customers", "--reason", "x"]
    )
    assert isinstance(refused.exception, OperatorError) and refused.exception.code == "QA-OPS-002"
    for command, code in (
        (["fix", key, key, "--source", "demo.bronze.orders", "--set", "order_id=78"], "QA-OPS-014"),
        (["fix", key, "--source", "demo.bronze.orders", "--set", "amount=NaN"], "QA-OPS-015"),
        (["fix", key, "--source", "demo.bronze.orders", "--set", "amount=-Infinity"], "QA-OPS-015"),
        (["purge", "--older-than-days", "-1"], "QA-OPS-016"),
        (["purge", "--older-than-days", "nan"], "QA-OPS-016"),
        (["fix", key, "--source", "demo.bronze.orders", "--where", "true", "--set", "order_id=1"], "QA-OPS-020"),
        (["fix", "--source", "demo.bronze.orders", "--set", "order_id=1"], "QA-OPS-020"),
        (["fix", key, "--source", "demo.bronze.orders", "--set-expr", "order_id = 1"], "QA-OPS-020"),
        (["fix", "--source", "demo.bronze.orders", "--where", "true", "--set-expr", "order_id"], "QA-OPS-010"),
    ):
        refused = runner.invoke(app, ["--warehouse", str(tmp_path), *command])
        assert isinstance(refused.exception, OperatorError) and refused.exception.code == code, refused.output


def test_values_that_look_like_markup_or_control_the_terminal_are_printed_as_text(spark, tmp_path):
    from pyspark.sql import functions as F

    from quarantine_assets.engine.lake.tables import Warehouse

    wide = {"COLUMNS": "250"}
    assert runner.invoke(app, ["--warehouse", str(tmp_path), "demo"], env=wide).exit_code == 0
    inbox = Warehouse(tmp_path).path("demo.ops.dlq")
    hostile = "[/x] [link=https://example.invalid]click[/link] \x1b[31mred\x1b[0m \r\x08 \u202eexe.txt \u200f"
    huge = "A" * 10_000_000
    first = spark.read.format("delta").load(inbox).where(F.col("_dlq_source_table") == "demo.bronze.orders").limit(1)
    first.select(
        *[F.col(column) for column in first.columns if column not in ("_dlq_sk", "_row_data", "_dlq_reason")],
        F.explode(F.array(F.lit("hostile-1"), F.lit("hostile-2"))).alias("_dlq_sk"),
    ).select(
        "*",
        F.when(F.col("_dlq_sk") == "hostile-1", F.lit(hostile)).otherwise(F.lit(huge)).alias("_dlq_reason"),
        F.to_variant_object(
            F.struct(F.when(F.col("_dlq_sk") == "hostile-1", F.lit(hostile)).otherwise(F.lit(huge)).alias("note"))
        ).alias("_row_data"),
    ).write.format("delta").mode("append").save(inbox)

    listed = runner.invoke(app, ["--warehouse", str(tmp_path), "list", "--limit", "1000"], env=wide)
    shown = runner.invoke(app, ["--warehouse", str(tmp_path), "show", "hostile-1"], env=wide)
    shown_huge = runner.invoke(app, ["--warehouse", str(tmp_path), "show", "hostile-2"], env=wide)
    stats = runner.invoke(app, ["--warehouse", str(tmp_path), "stats"], env=wide)

    for result in (listed, shown, shown_huge, stats):
        assert result.exit_code == 0, result.output
        assert not any(character in result.output for character in "\x1b\r\x08\u202e\u200f")
    for result in (listed, shown):
        assert "[/x]" in result.output and "[link=https://example.invalid]" in result.output
        assert "\\x1b[31mred" in result.output and "\\u202eexe.txt" in result.output
    # The table folds a long cell over several lines; read it without the folds.
    cells = re.sub(r"[\s│]", "", listed.output)
    payload = f'{{"note":"{huge}"}}'
    assert len(listed.output) < 1_000_000 and f"({len(payload) - CELL_CHARACTERS}morecharacters)" in cells
    assert huge in shown_huge.output.replace("\n", "")  # whole, wrapped at the terminal's width


def test_no_help_text_or_check_description_speaks_of_what_a_user_does_not_know():
    """Users know the reference as Lakehouse Plumber's quarantine mode, not by the project's internal names."""
    from quarantine_assets.defs.table_checks import _DESCRIPTIONS

    commands = [command.name or command.callback.__name__.replace("_", "-") for command in app.registered_commands]
    texts = [
        CliRunner().invoke(app, [*([command] if command else []), "--help"]).output for command in [None, *commands]
    ]
    texts += list(_DESCRIPTIONS.values())
    assert len(texts) > 10 and not [text for text in texts if "seed" in text.lower()]


def test_show_withholds_the_source_record_of_an_action_that_redacts(spark, tmp_path):
    """The source file holds the record as it was, sensitive values and all: `show` says where it is, not what."""
    configs = tmp_path / "configs"
    shutil.copytree(REPO_ROOT / "configs", configs)
    orders = configs / "pipelines" / "demo" / "orders.yaml"
    declared = '      source_table: "${catalog}.${bronze_schema}.orders"\n'
    orders.write_text(orders.read_text().replace(declared, declared + "      sensitive_columns: [currency]\n"))
    shared = ["--config-dir", str(configs), "--warehouse", str(tmp_path / "warehouse")]
    wide = {"COLUMNS": "250"}
    assert runner.invoke(app, [*shared, "demo"], env=wide).exit_code == 0
    listed = runner.invoke(
        app, [*shared, "list", "--source", "demo.bronze.orders", "--rule", "valid_order_id"], env=wide
    )
    key = re.search(r"│ ([0-9a-f]{24}-\d+) │", listed.output).group(1)

    shown = runner.invoke(app, [*shared, "show", key], env=wide)

    assert shown.exit_code == 0, shown.output
    url, line = re.search(r"source line: (\S+):(\d+) \(byte \d+\)\n", shown.output).groups()
    record = Path(unquote(urlparse(url).path)).read_text().splitlines()[int(line) - 1]
    assert record not in shown.output
    assert "its text is not shown: dq_orders redacts currency" in shown.output


def test_fix_by_predicate_dry_runs_as_json_then_fixes_the_rows_it_counted(spark, tmp_path):
    wide = {"COLUMNS": "250"}
    shared = ["--warehouse", str(tmp_path)]
    assert runner.invoke(app, [*shared, "demo"], env=wide).exit_code == 0
    listed = runner.invoke(
        app, [*shared, "list", "--source", "demo.bronze.orders", "--status", "quarantined", "--limit", "1000"], env=wide
    )
    quarantined = len(re.findall(r"│ ([0-9a-f]{24}-\d+) │", listed.output))
    selection = ["--source", "demo.bronze.orders", "--where", "_dlq_status = 'quarantined'"]
    change = ["--set-expr", "order_id = coalesce(order_id, 1)"]

    dry = runner.invoke(app, [*shared, "fix", *selection, *change, "--dry-run", "--json"], env=wide)
    assert dry.exit_code == 0, dry.output
    report = json.loads(dry.output)
    assert report["rows_matched"] == report["rows_to_fix"] == quarantined > 0
    assert report["rows_landing"] + report["rows_failing_again"] == quarantined

    # Sent back as they are, under the same rules, every row would fail again.
    redriven = runner.invoke(app, [*shared, "redrive", "--source", "demo.bronze.orders", "--dry-run", "--json"])
    assert redriven.exit_code == 0, redriven.output
    assert json.loads(redriven.output) | {"failures_per_rule": None, "examples": None} == {
        "rows_matched": quarantined,
        "rows_to_fix": quarantined,
        "rows_landing": 0,
        "rows_failing_again": quarantined,
        "failures_per_rule": None,
        "examples": None,
    }

    fixed = runner.invoke(app, [*shared, "fix", *selection, *change], env=wide)
    assert fixed.exit_code == 0 and f"{quarantined} row(s) of demo.bronze.orders marked fixed" in fixed.output

    as_lines = runner.invoke(app, [*shared, "list", "--source", "demo.bronze.orders", "--limit", "1000", "--json"])
    rows = [json.loads(line) for line in as_lines.output.splitlines()]
    assert len(rows) == quarantined and {row["_dlq_status"] for row in rows} == {"fixed"}
    assert all(row["payload"]["order_id"] is not None for row in rows)
    one = json.loads(runner.invoke(app, [*shared, "show", rows[0]["_dlq_sk"], "--json"]).output)
    assert one["_dlq_sk"] == rows[0]["_dlq_sk"] and one["_row_data"] == rows[0]["payload"]
    assert one["_dlq_failed_rules"] == rows[0]["_dlq_failed_rules"] and one["source_record"]
    summary = json.loads(runner.invoke(app, [*shared, "stats", "--source", "demo.bronze.orders", "--json"]).output)
    assert sum(count["count"] for count in summary["counts"] if count["_dlq_status"] == "fixed") >= quarantined


def test_forget_dry_runs_then_erases_a_subject_from_the_dlq_and_its_files(spark, tmp_path):
    wide = {"COLUMNS": "250"}
    shared = ["--warehouse", str(tmp_path)]
    assert runner.invoke(app, [*shared, "demo"], env=wide).exit_code == 0
    subject = ["--source", "demo.bronze.customers", "--where", "customer_id = 'c5'"]
    dlq = tmp_path / "demo" / "ops" / "dlq"
    email = "user5.example.com"  # the subject's value that no file of the DLQ may keep
    assert files_holding_text(dlq, email)

    dry = runner.invoke(app, [*shared, "forget", *subject, "--dry-run"], env=wide)
    assert dry.exit_code == 0, dry.output
    assert "would erase 1 inbox row(s) of demo.bronze.customers (1 quarantined) and 0 outbox row(s)" in dry.output
    assert files_holding_text(dlq, email)

    erased = runner.invoke(app, [*shared, "forget", *subject], env=wide)
    assert erased.exit_code == 0, erased.output
    assert "erased 1 inbox row(s)" in erased.output and "pending" not in erased.output
    assert files_holding_text(dlq, email) == []
    listed = runner.invoke(app, [*shared, "list", "--source", "demo.bronze.customers", "--json"])
    rows = [json.loads(line) for line in listed.output.splitlines()]
    assert rows and all(row["payload"]["customer_id"] != "c5" for row in rows)

    unknown = runner.invoke(app, [*shared, "forget", "--source", "demo.bronze.customers", "--where", "nickname = 1"])
    assert isinstance(unknown.exception, OperatorError) and unknown.exception.code == "QA-OPS-017"
