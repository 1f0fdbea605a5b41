"""Tokens in pipeline YAML: `${token}`, legacy `{token}`, built-ins and secrets from the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from quarantine_assets.config.substitutions import apply_variables, load_substitutions, secret_env_var

FLOWGROUP = Path("pipelines/orders.yaml")


@pytest.fixture
def config_dir(tmp_path: Path) -> Path:
    (tmp_path / "substitutions").mkdir()
    (tmp_path / "substitutions/dev.yaml").write_text(
        "global:\n  catalog: shared\n  owner: data-team\n"
        "dev:\n  catalog: demo\n  ops_schema: ops\n  landing_path: '${warehouse}/_landing'\n  strict: true\n"
    )
    return tmp_path


def substitute(config_dir: Path, data, warehouse: Path = Path("/wh")):
    substitutions, problems = load_substitutions(config_dir, "dev", warehouse)
    assert problems == []
    return substitutions.apply(data, file=FLOWGROUP)


def test_dollar_tokens_are_replaced_in_nested_values(config_dir):
    data = {"quarantine": {"dlq_table": "${catalog}.${ops_schema}.dlq"}, "tags": ["${owner}", 3]}
    assert substitute(config_dir, data) == ({"quarantine": {"dlq_table": "demo.ops.dlq"}, "tags": ["data-team", 3]}, [])


def test_environment_block_overrides_global_block(config_dir):
    assert substitute(config_dir, "${catalog}") == ("demo", [])


def test_legacy_brace_tokens_replace_only_known_tokens(config_dir):
    text = "{catalog}.{ops_schema}.dlq WHERE code RLIKE '^[A-Z]{2}$' AND note = '{unknown}'"
    assert substitute(config_dir, text) == ("demo.ops.dlq WHERE code RLIKE '^[A-Z]{2}$' AND note = '{unknown}'", [])


def test_tokens_may_refer_to_the_built_in_warehouse(config_dir):
    assert substitute(config_dir, "${landing_path}/orders", warehouse=Path("/data/wh")) == (
        "/data/wh/_landing/orders",
        [],
    )


def test_yaml_booleans_become_lowercase_text(config_dir):
    assert substitute(config_dir, "${strict}") == ("true", [])


def test_secret_is_read_from_its_environment_variable(config_dir, monkeypatch):
    monkeypatch.setenv("QUARANTINE_SECRET_LANDING_SAS_TOKEN", "s3cr3t")
    assert substitute(config_dir, {"sas": "${secret:landing/sas-token}"}) == ({"sas": "s3cr3t"}, [])


def test_secret_environment_variable_name_is_uppercased_with_underscores():
    assert secret_env_var("my-scope", "api.key") == "QUARANTINE_SECRET_MY_SCOPE_API_KEY"


def test_unknown_dollar_token_is_located_by_field(config_dir):
    data, problems = substitute(config_dir, {"actions": [{"path": "${nowhere}/x"}]})
    assert data == {"actions": [{"path": "${nowhere}/x"}]}
    assert [(p.code, p.file, p.field) for p in problems] == [("QA-CFG-003", FLOWGROUP, "actions[0].path")]


def test_secret_without_scope_is_rejected(config_dir):
    _, problems = substitute(config_dir, "${secret:just-a-key}")
    assert [p.code for p in problems] == ["QA-CFG-004"]


def test_secrets_block_gives_the_default_scope_and_scope_aliases(config_dir, monkeypatch):
    with (config_dir / "substitutions/dev.yaml").open("a") as file:
        file.write("secrets:\n  default_scope: ops\n  scopes:\n    db: prod-database\n")
    monkeypatch.setenv("QUARANTINE_SECRET_OPS_API_KEY", "k1")
    monkeypatch.setenv("QUARANTINE_SECRET_PROD_DATABASE_PASSWORD", "k2")

    assert substitute(config_dir, ["${secret:api-key}", "${secret:db/password}"]) == (["k1", "k2"], [])


def test_flowgroup_variables_are_replaced_and_unknown_ones_located(tmp_path):
    flowgroup = {"variables": {"entity": "orders"}, "path": "/in/%{entity}", "other": ["%{missing}"]}
    replaced, problems = apply_variables(flowgroup, FLOWGROUP)

    assert replaced["path"] == "/in/orders"
    assert [(p.code, p.field) for p in problems] == [("QA-CFG-003", "other[0]")]


def test_tokens_referring_to_each_other_in_a_cycle_are_reported(tmp_path):
    (tmp_path / "substitutions").mkdir()
    (tmp_path / "substitutions/dev.yaml").write_text("dev:\n  a: '${b}'\n  b: '${a}'\n")
    _, problems = load_substitutions(tmp_path, "dev", Path("/wh"))
    assert [(p.code, p.field) for p in problems] == [("QA-CFG-003", "dev.a")]


def test_substitutions_file_cannot_override_the_built_in_warehouse(tmp_path):
    (tmp_path / "substitutions").mkdir()
    (tmp_path / "substitutions/dev.yaml").write_text("dev:\n  warehouse: /elsewhere\n")
    substitutions, problems = load_substitutions(tmp_path, "dev", Path("/wh"))
    assert substitutions.tokens["warehouse"] == "/wh"
    assert [(p.code, p.severity, p.field) for p in problems] == [("QA-CFG-005", "warning", "dev.warehouse")]


def test_missing_substitutions_file_leaves_only_built_ins(tmp_path):
    substitutions, problems = load_substitutions(tmp_path, "prod", Path("/wh"))
    assert (substitutions.tokens, problems) == ({"warehouse": "/wh"}, [])
