"""One test per problem code: a small config folder with exactly one thing wrong."""

from __future__ import annotations

from pathlib import Path

import pytest
from config_projects import ABSENT, flowgroup, project_dir

from quarantine_assets.config.loader import load_project
from quarantine_assets.errors import ConfigError, Problem


def problems_of(config_dir: Path) -> list[Problem]:
    with pytest.raises(ConfigError) as raised:
        load_project(config_dir, env="dev", warehouse=config_dir / "warehouse")
    return raised.value.problems


def assert_has(problems: list[Problem], code: str, file: Path, field: str | None) -> Problem:
    for problem in problems:
        if (problem.code, problem.file, problem.field) == (code, file, field):
            return problem
    listing = "\n".join(str(problem) for problem in problems)
    raise AssertionError(f"no {code} at {file}: {field} among:\n{listing}")


def test_yaml_that_does_not_parse_is_qa_cfg_001(tmp_path):
    config = project_dir(tmp_path, {"orders.yaml": "pipeline: demo\nactions: [unclosed\n"})
    problem = assert_has(problems_of(config), "QA-CFG-001", config / "pipelines/orders.yaml", None)
    assert "line" in problem.message


def test_flowgroup_whose_top_level_is_not_a_mapping_is_qa_cfg_001(tmp_path):
    config = project_dir(tmp_path, {"orders.yaml": "- just\n- a list\n"})
    assert_has(problems_of(config), "QA-CFG-001", config / "pipelines/orders.yaml", None)


def test_flowgroup_without_pipeline_key_is_qa_cfg_002(tmp_path):
    broken = flowgroup()
    del broken["pipeline"]
    config = project_dir(tmp_path, {"orders.yaml": broken})
    assert_has(problems_of(config), "QA-CFG-002", config / "pipelines/orders.yaml", "pipeline")


def test_action_without_type_is_qa_cfg_002(tmp_path):
    broken = flowgroup()
    del broken["actions"][2]["type"]
    config = project_dir(tmp_path, {"orders.yaml": broken})
    assert_has(problems_of(config), "QA-CFG-002", config / "pipelines/orders.yaml", "actions[2].type")


def test_data_quality_source_not_produced_by_a_load_is_qa_cfg_002(tmp_path):
    config = project_dir(tmp_path, {"orders.yaml": flowgroup(source="v_nobody_makes_this")})
    assert_has(problems_of(config), "QA-CFG-002", config / "pipelines/orders.yaml", "actions[1].source")


def test_data_quality_target_no_write_consumes_is_qa_cfg_002(tmp_path):
    config = project_dir(tmp_path, {"orders.yaml": flowgroup(target="v_written_nowhere")})
    assert_has(problems_of(config), "QA-CFG-002", config / "pipelines/orders.yaml", "actions[1].target")


def test_unsupported_load_source_type_is_qa_cfg_002(tmp_path):
    broken = flowgroup()
    broken["actions"][0]["source"] = {"type": "jdbc", "url": "jdbc:postgresql://db/orders"}
    config = project_dir(tmp_path, {"orders.yaml": broken})
    assert_has(problems_of(config), "QA-CFG-002", config / "pipelines/orders.yaml", "actions[0].source.type")


def test_unknown_token_is_qa_cfg_003(tmp_path):
    config = project_dir(tmp_path, {"orders.yaml": flowgroup(description="for ${team_name}")})
    assert_has(problems_of(config), "QA-CFG-003", config / "pipelines/orders.yaml", "actions[1].description")


def test_unset_secret_is_qa_cfg_004(tmp_path, monkeypatch):
    monkeypatch.delenv("QUARANTINE_SECRET_VAULT_LANDING_SAS", raising=False)
    broken = flowgroup()
    broken["actions"][0]["source"]["options"] = {"sas": "${secret:vault/landing-sas}"}
    config = project_dir(tmp_path, {"orders.yaml": broken})
    problem = assert_has(
        problems_of(config), "QA-CFG-004", config / "pipelines/orders.yaml", "actions[0].source.options.sas"
    )
    assert "QUARANTINE_SECRET_VAULT_LANDING_SAS" in problem.message


def test_mode_other_than_dqe_or_quarantine_is_qa_cfg_010(tmp_path):
    config = project_dir(tmp_path, {"orders.yaml": flowgroup(mode="strict")})
    assert_has(problems_of(config), "QA-CFG-010", config / "pipelines/orders.yaml", "actions[1].mode")


def test_quarantine_mode_without_quarantine_block_is_qa_cfg_011(tmp_path):
    config = project_dir(tmp_path, {"orders.yaml": flowgroup(quarantine=ABSENT)})
    assert_has(problems_of(config), "QA-CFG-011", config / "pipelines/orders.yaml", "actions[1].quarantine")


@pytest.mark.parametrize("mode", ["dqe", ABSENT], ids=["mode dqe", "mode omitted"])
def test_quarantine_block_outside_quarantine_mode_is_qa_cfg_012(tmp_path, mode):
    config = project_dir(tmp_path, {"orders.yaml": flowgroup(mode=mode, readMode=ABSENT)})
    assert_has(problems_of(config), "QA-CFG-012", config / "pipelines/orders.yaml", "actions[1].quarantine")


@pytest.mark.parametrize(
    "inbox_table", ["ops.dlq", "main.ops.dlq.extra", None], ids=["two parts", "four parts", "missing"]
)
def test_dlq_table_not_fully_qualified_is_qa_cfg_013(tmp_path, inbox_table):
    quarantine = {"source_table": "main.bronze.orders"} | ({"dlq_table": inbox_table} if inbox_table else {})
    config = project_dir(tmp_path, {"orders.yaml": flowgroup(quarantine=quarantine)})
    assert_has(problems_of(config), "QA-CFG-013", config / "pipelines/orders.yaml", "actions[1].quarantine.dlq_table")


@pytest.mark.parametrize(
    "source_table",
    ["orders", "main.bronze.orders'; DROP TABLE main.ops.dlq; --", "main.bronze.`orders`", "main.bronze.orders\n"],
    ids=["one part", "sql", "backticks", "trailing newline"],
)
def test_source_table_that_is_not_a_plain_qualified_identifier_is_qa_cfg_014(tmp_path, source_table):
    """Table names reach SQL text, so only plain identifiers pass: nothing else can be interpolated."""
    quarantine = {"dlq_table": "main.ops.dlq", "source_table": source_table}
    config = project_dir(tmp_path, {"orders.yaml": flowgroup(quarantine=quarantine)})
    assert_has(
        problems_of(config), "QA-CFG-014", config / "pipelines/orders.yaml", "actions[1].quarantine.source_table"
    )


def test_quarantine_mode_with_batch_read_mode_is_qa_cfg_015(tmp_path):
    config = project_dir(tmp_path, {"orders.yaml": flowgroup(readMode="batch")})
    assert_has(problems_of(config), "QA-CFG-015", config / "pipelines/orders.yaml", "actions[1].readMode")


def test_expectations_file_not_found_is_qa_cfg_016_on_the_citing_field(tmp_path):
    config = project_dir(tmp_path, {"orders.yaml": flowgroup(expectations_file="expectations/missing.yaml")})
    problem = assert_has(
        problems_of(config), "QA-CFG-016", config / "pipelines/orders.yaml", "actions[1].expectations_file"
    )
    assert "missing.yaml" in problem.message


def test_expectations_file_without_rules_is_qa_cfg_017(tmp_path):
    config = project_dir(tmp_path, {"orders.yaml": flowgroup()}, rules={"expectations": []})
    assert_has(problems_of(config), "QA-CFG-017", config / "expectations/rules.yaml", None)


def test_rule_without_name_is_qa_cfg_018(tmp_path):
    config = project_dir(tmp_path, {"orders.yaml": flowgroup()}, rules={"order_id IS NOT NULL": {"action": "drop"}})
    assert_has(problems_of(config), "QA-CFG-018", config / "expectations/rules.yaml", "['order_id IS NOT NULL'].name")


def test_rule_without_expression_is_qa_cfg_018(tmp_path):
    rules = [{"name": "valid_order_id", "failureAction": "drop"}]
    config = project_dir(tmp_path, {"orders.yaml": flowgroup()}, rules=rules)
    assert_has(problems_of(config), "QA-CFG-018", config / "expectations/rules.yaml", "[0].expression")


def test_rule_with_unknown_action_is_qa_cfg_018(tmp_path):
    rules = {
        "expectations": [{"name": "valid_order_id", "expression": "order_id IS NOT NULL", "failureAction": "explode"}]
    }
    config = project_dir(tmp_path, {"orders.yaml": flowgroup()}, rules=rules)
    assert_has(problems_of(config), "QA-CFG-018", config / "expectations/rules.yaml", "expectations[0].failureAction")


def test_warn_rule_in_quarantine_mode_acts_as_drop_with_warning_qa_cfg_019(tmp_path):
    rules = {"currency IN ('EUR')": {"action": "warn", "name": "known_currency"}}
    config = project_dir(tmp_path, {"orders.yaml": flowgroup()}, rules=rules)
    project = load_project(config, env="dev", warehouse=tmp_path / "warehouse")
    assert project.actions[0].rules[0].failure_action == "drop"
    warning = assert_has(
        list(project.warnings), "QA-CFG-019", config / "expectations/rules.yaml", "[\"currency IN ('EUR')\"].action"
    )
    assert warning.severity == "warning"


@pytest.mark.parametrize("max_attempts", [0, -1, "three", True])
def test_max_attempts_that_is_not_a_positive_whole_number_is_qa_cfg_024(tmp_path, max_attempts):
    quarantine = {"dlq_table": "main.ops.dlq", "source_table": "main.bronze.orders", "max_attempts": max_attempts}
    config_dir = project_dir(tmp_path, {"orders.yaml": flowgroup(quarantine=quarantine)})
    assert_has(
        problems_of(config_dir),
        "QA-CFG-024",
        config_dir / "pipelines/orders.yaml",
        "actions[1].quarantine.max_attempts",
    )


def test_max_attempts_reaches_the_quarantine_spec(tmp_path):
    quarantine = {"dlq_table": "main.ops.dlq", "source_table": "main.bronze.orders", "max_attempts": 5}
    config_dir = project_dir(tmp_path, {"orders.yaml": flowgroup(quarantine=quarantine)})
    project = load_project(config_dir, env="dev", warehouse=tmp_path / "warehouse")
    assert project.actions[0].quarantine.max_attempts == 5


def test_two_quarantine_actions_sharing_dlq_and_source_table_is_qa_cfg_020_naming_both(tmp_path):
    first = flowgroup("orders", name="dq_orders")
    second = flowgroup("returns", name="dq_returns")
    second["actions"][1]["quarantine"]["source_table"] = "${catalog}.${bronze_schema}.orders"
    config = project_dir(tmp_path, {"a_orders.yaml": first, "b_returns.yaml": second})
    problem = assert_has(
        problems_of(config), "QA-CFG-020", config / "pipelines/b_returns.yaml", "actions[1].quarantine.source_table"
    )
    for mention in ("a_orders.yaml", "b_returns.yaml", "'dq_orders'", "'dq_returns'", "LHP-VAL-069"):
        assert mention in problem.message


def test_shared_dlq_with_distinct_source_tables_is_accepted(tmp_path):
    config = project_dir(tmp_path, {"orders.yaml": flowgroup("orders"), "returns.yaml": flowgroup("returns")})
    project = load_project(config, env="dev", warehouse=tmp_path / "warehouse")
    assert {action.quarantine.inbox_table for action in project.actions} == {"main.ops.dlq"}


def test_two_data_quality_actions_with_one_name_is_qa_cfg_021(tmp_path):
    config = project_dir(
        tmp_path,
        {
            "a_orders.yaml": flowgroup("orders", name="dq_bronze"),
            "b_returns.yaml": flowgroup("returns", name="dq_bronze"),
        },
    )
    problem = assert_has(problems_of(config), "QA-CFG-021", config / "pipelines/b_returns.yaml", "actions[1].name")
    assert "a_orders.yaml" in problem.message


def test_dlq_table_that_is_the_validated_table_is_qa_cfg_023(tmp_path):
    quarantine = {"dlq_table": "main.bronze.orders", "source_table": "main.bronze.orders"}
    config = project_dir(tmp_path, {"orders.yaml": flowgroup(quarantine=quarantine)})
    assert_has(problems_of(config), "QA-CFG-023", config / "pipelines/orders.yaml", "actions[1].quarantine.dlq_table")


def test_problems_from_every_file_are_reported_together(tmp_path):
    config = project_dir(
        tmp_path,
        {"orders.yaml": flowgroup("orders", mode="strict"), "returns.yaml": flowgroup("returns", readMode="batch")},
    )
    codes = {(problem.code, problem.file.name) for problem in problems_of(config)}
    assert {("QA-CFG-010", "orders.yaml"), ("QA-CFG-015", "returns.yaml")} <= codes


def test_secret_values_never_appear_in_problem_messages(tmp_path, monkeypatch):
    monkeypatch.setenv("QUARANTINE_SECRET_OPS_DLQ", "hunter2-not-a-table")
    quarantine = {"dlq_table": "${secret:ops/dlq}", "source_table": "main.bronze.orders"}
    config = project_dir(tmp_path, {"orders.yaml": flowgroup(quarantine=quarantine)})
    problem = assert_has(
        problems_of(config), "QA-CFG-013", config / "pipelines/orders.yaml", "actions[1].quarantine.dlq_table"
    )
    assert "hunter2" not in problem.message


def test_cross_file_rules_still_run_when_an_action_has_other_errors(tmp_path):
    first = flowgroup("orders", name="dq_orders", readMode="batch")
    second = flowgroup("returns", name="dq_orders")
    config = project_dir(tmp_path, {"a_orders.yaml": first, "b_returns.yaml": second})
    problems = problems_of(config)
    assert_has(problems, "QA-CFG-015", config / "pipelines/a_orders.yaml", "actions[1].readMode")
    assert_has(problems, "QA-CFG-021", config / "pipelines/b_returns.yaml", "actions[1].name")


@pytest.mark.parametrize(
    ("schema_file", "content"),
    [("schema.yaml", "columns: [name: x\n"), ("schema.yaml", b"\xff\xfe columns"), ("schema.ddl", b"\xff\xfe id INT")],
)
def test_a_schema_file_that_does_not_parse_or_is_not_text_is_qa_cfg_001(tmp_path, schema_file, content):
    fg = flowgroup()
    fg["actions"][0]["source"]["schema_file"] = f"schemas/{schema_file}"
    root = project_dir(tmp_path, {"orders.yaml": fg})
    target = root / "schemas" / schema_file
    target.parent.mkdir()
    target.write_bytes(content if isinstance(content, bytes) else content.encode())

    problems = [problem for problem in problems_of(root) if problem.code == "QA-CFG-001"]
    assert [problem for problem in problems if target == problem.file or str(target) in problem.message]


@pytest.mark.parametrize("content", [b"rules: [unclosed\n", b"\xff\xfe not text"])
def test_an_expectations_file_that_does_not_parse_or_is_not_text_is_qa_cfg_001(tmp_path, content):
    root = project_dir(tmp_path, {"orders.yaml": flowgroup()})
    (root / "expectations" / "rules.yaml").write_bytes(content)

    assert_has(problems_of(root), "QA-CFG-001", root / "expectations" / "rules.yaml", None)


@pytest.mark.parametrize("retention_days", [-1, "30d", 1.5, True])
def test_retention_days_that_is_not_a_whole_number_of_days_is_qa_cfg_033(tmp_path, retention_days):
    quarantine = {"dlq_table": "main.ops.dlq", "source_table": "main.bronze.orders", "retention_days": retention_days}
    config_dir = project_dir(tmp_path, {"orders.yaml": flowgroup(quarantine=quarantine)})
    assert_has(
        problems_of(config_dir),
        "QA-CFG-033",
        config_dir / "pipelines/orders.yaml",
        "actions[1].quarantine.retention_days",
    )


def test_retention_days_reaches_the_quarantine_spec_and_defaults_to_keeping_rows(tmp_path):
    kept = {"dlq_table": "main.ops.dlq", "source_table": "main.bronze.orders"}
    purged = {"dlq_table": "main.ops.dlq", "source_table": "main.bronze.returns", "retention_days": 30}
    files = {"orders.yaml": flowgroup(quarantine=kept), "returns.yaml": flowgroup("returns", quarantine=purged)}
    project = load_project(project_dir(tmp_path, files), env="dev", warehouse=tmp_path / "warehouse")
    assert sorted((a.quarantine.source_table, a.quarantine.retention_days) for a in project.actions) == [
        ("main.bronze.orders", None),
        ("main.bronze.returns", 30),
    ]


@pytest.mark.parametrize(
    ("key", "value"),
    [("max_reject_ratio", 1.5), ("max_reject_ratio", "10%"), ("max_rejected_rows", -1), ("max_rejected_rows", 2.5)],
)
def test_a_reject_limit_that_is_not_a_ratio_or_a_count_is_qa_cfg_038(tmp_path, key, value):
    quarantine = {"dlq_table": "main.ops.dlq", "source_table": "main.bronze.orders", key: value}
    config_dir = project_dir(tmp_path, {"orders.yaml": flowgroup(quarantine=quarantine)})
    assert_has(
        problems_of(config_dir), "QA-CFG-038", config_dir / "pipelines/orders.yaml", f"actions[1].quarantine.{key}"
    )


def test_reject_limits_reach_the_quarantine_spec_and_default_to_none(tmp_path):
    limited = {"dlq_table": "main.ops.dlq", "source_table": "main.bronze.orders", "max_reject_ratio": 0.2}
    limited |= {"max_rejected_rows": 1000}
    free = {"dlq_table": "main.ops.dlq", "source_table": "main.bronze.returns"}
    files = {"orders.yaml": flowgroup(quarantine=limited), "returns.yaml": flowgroup("returns", quarantine=free)}
    project = load_project(project_dir(tmp_path, files), env="dev", warehouse=tmp_path / "warehouse")
    assert sorted(
        (a.quarantine.source_table, a.quarantine.max_reject_ratio, a.quarantine.max_rejected_rows)
        for a in project.actions
    ) == [("main.bronze.orders", 0.2, 1000), ("main.bronze.returns", None, None)]


@pytest.mark.parametrize(
    ("key", "value"), [("sensitive_columns", "email"), ("sensitive_columns", ["email", ""]), ("redaction", "rot13")]
)
def test_sensitive_columns_or_redaction_that_is_malformed_is_qa_cfg_034(tmp_path, key, value):
    quarantine = {"dlq_table": "main.ops.dlq", "source_table": "main.bronze.orders", key: value}
    config_dir = project_dir(tmp_path, {"orders.yaml": flowgroup(quarantine=quarantine)})
    assert_has(
        problems_of(config_dir), "QA-CFG-034", config_dir / "pipelines/orders.yaml", f"actions[1].quarantine.{key}"
    )


def test_sensitive_columns_and_redaction_reach_the_quarantine_spec(tmp_path):
    quarantine = {
        "dlq_table": "main.ops.dlq",
        "source_table": "main.bronze.orders",
        "sensitive_columns": ["email", "card"],
        "redaction": "sha256",
    }
    config_dir = project_dir(tmp_path, {"orders.yaml": flowgroup(quarantine=quarantine)})
    spec = load_project(config_dir, env="dev", warehouse=tmp_path / "warehouse").actions[0].quarantine
    assert (spec.sensitive_columns, spec.redaction) == (("email", "card"), "sha256")
