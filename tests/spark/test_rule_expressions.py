"""Rule expressions are parsed by Spark before anything runs: one that does not parse is a config problem."""

from __future__ import annotations

from config_projects import flowgroup, project_dir

from quarantine_assets.config.loader import load_project
from quarantine_assets.config.validation import rule_expression_problems
from quarantine_assets.settings import REPO_ROOT


def test_rule_spark_cannot_parse_is_qa_cfg_022(tmp_path, spark):
    rules = {"amount >=": {"action": "drop", "name": "half_written"}, "amount >= 0": {"action": "drop", "name": "fine"}}
    config = project_dir(tmp_path, {"orders.yaml": flowgroup()}, rules=rules)
    project = load_project(config, env="dev", warehouse=tmp_path / "warehouse")
    problems = rule_expression_problems(project, spark)
    assert [(p.code, p.file, p.field) for p in problems] == [
        ("QA-CFG-022", config / "expectations/rules.yaml", "half_written")
    ]


def test_demo_rules_all_parse(spark, tmp_path):
    project = load_project(REPO_ROOT / "configs", env="dev", warehouse=tmp_path / "warehouse")
    assert rule_expression_problems(project, spark) == []
