"""The demo project in configs/ and the loader's defaults, end to end from YAML to typed models."""

from __future__ import annotations

import shutil

import pytest
import yaml

from quarantine_assets.config.loader import load_project
from quarantine_assets.config.models import DeltaSource, FileSource
from quarantine_assets.errors import ConfigError
from quarantine_assets.settings import REPO_ROOT, default_config_dir, default_env, default_warehouse

DEMO = REPO_ROOT / "configs"


@pytest.fixture
def demo(tmp_path):
    return load_project(DEMO, env="dev", warehouse=tmp_path / "warehouse")


def test_demo_project_has_orders_and_customers_actions(demo):
    assert sorted(action.key for action in demo.actions) == ["dq_customers", "dq_orders"]
    assert demo.env == "dev"


def test_demo_orders_resolve_to_a_csv_file_source_and_bronze_table(demo, tmp_path):
    orders = demo.action("dq_orders")
    assert orders.source == FileSource(
        path=f"{tmp_path}/warehouse/_landing/orders",
        format="csv",
        options={"header": "true"},
        schema_ddl="order_id INT, customer_id STRING, amount DOUBLE, currency STRING, order_ts TIMESTAMP",
    )
    assert orders.target_table == "demo.bronze.orders"
    assert (orders.pipeline, orders.flowgroup, orders.config_file) == (
        "demo",
        "orders",
        DEMO / "pipelines/demo/orders.yaml",
    )
    assert orders.expectations_file == DEMO / "expectations/orders.yaml"


def test_demo_customers_write_target_uses_database_form(demo, tmp_path):
    customers = demo.action("dq_customers")
    assert customers.target_table == "demo.bronze.customers"
    assert customers.source.format == "json"
    assert customers.source.path == f"{tmp_path}/warehouse/_landing/customers"


def test_demo_actions_share_one_dlq_with_distinct_source_tables(demo):
    specs = {action.key: action.quarantine for action in demo.actions}
    assert {spec.inbox_table for spec in specs.values()} == {"demo.ops.dlq"}
    assert specs["dq_orders"].outbox_table == "demo.ops.dlq_outbox"
    assert specs["dq_orders"].source_table == "demo.bronze.orders"
    assert specs["dq_customers"].source_table == "demo.bronze.customers"


def test_demo_warn_and_fail_rules_are_coerced_to_drop_with_warnings(demo):
    assert all(rule.failure_action == "drop" for action in demo.actions for rule in action.rules)
    coerced = sorted((warning.code, warning.file.name) for warning in demo.warnings)
    assert coerced == [("QA-CFG-019", "customers.yaml"), ("QA-CFG-019", "orders.yaml")]


def test_demo_rules_keep_their_names_and_order(demo):
    assert [rule.name for rule in demo.action("dq_orders").rules] == [
        "valid_order_id",
        "non_negative_amount",
        "known_currency",
        "no_rescued_data",
    ]
    assert [rule.name for rule in demo.action("dq_customers").rules] == [
        "valid_email",
        "known_country",
        "no_rescued_data",
    ]


def test_config_version_is_short_hash_that_follows_the_expectations_file(tmp_path):
    config = tmp_path / "configs"
    shutil.copytree(DEMO, config)
    before = load_project(config, env="dev", warehouse=tmp_path).action("dq_orders").config_version
    rules = config / "expectations/orders.yaml"
    rules.write_text(rules.read_text() + '"amount < 1000000":\n  action: drop\n  name: plausible_amount\n')
    after = load_project(config, env="dev", warehouse=tmp_path).action("dq_orders").config_version
    assert len(before) == 12 and int(before, 16) >= 0
    assert before != after


def test_delta_load_source_and_nested_yml_flowgroups_are_read(tmp_path):
    flowgroup = {
        "pipeline": "silver",
        "flowgroup": "payments",
        "actions": [
            {
                "name": "load_payments",
                "type": "load",
                "source": {"type": "delta", "database": "main.raw", "table": "payments"},
                "target": "v_raw",
            },
            {
                "name": "tidy",
                "type": "transform",
                "transform_type": "sql",
                "source": "v_raw",
                "target": "v_unused",
                "sql": "SELECT 1",
            },
            {
                "name": "dq_payments",
                "type": "transform",
                "transform_type": "data_quality",
                "source": "v_raw",
                "target": "v_ok",
                "expectations_file": "rules.yaml",
            },
            {
                "name": "write_payments",
                "type": "write",
                "source": "v_ok",
                "write_target": {"database": "main.silver", "table": "payments"},
            },
        ],
    }
    (tmp_path / "pipelines/silver/deep").mkdir(parents=True)
    (tmp_path / "pipelines/silver/deep/payments.yml").write_text(yaml.safe_dump(flowgroup))
    (tmp_path / "rules.yaml").write_text('"amount > 0": {action: drop, name: positive}\n')
    project = load_project(tmp_path, env="dev", warehouse=tmp_path / "warehouse")
    (payments,) = project.actions
    assert payments.source == DeltaSource(table="main.raw.payments")
    assert (payments.mode, payments.quarantine, payments.target_table) == ("dqe", None, "main.silver.payments")


def test_defaults_come_from_environment_variables(tmp_path, monkeypatch):
    monkeypatch.setenv("QUARANTINE_CONFIG_DIR", str(DEMO))
    monkeypatch.setenv("QUARANTINE_ENV", "dev")
    monkeypatch.setenv("QUARANTINE_WAREHOUSE", str(tmp_path / "wh"))
    project = load_project()
    assert project.config_dir == DEMO
    assert project.action("dq_orders").source.path == f"{tmp_path}/wh/_landing/orders"


def test_defaults_without_environment_variables_sit_in_the_repo(monkeypatch):
    for variable in ("QUARANTINE_CONFIG_DIR", "QUARANTINE_ENV", "QUARANTINE_WAREHOUSE"):
        monkeypatch.delenv(variable, raising=False)
    assert (default_config_dir(), default_env(), default_warehouse()) == (
        REPO_ROOT / "configs",
        "dev",
        str(REPO_ROOT / "warehouse"),
    )
    assert (REPO_ROOT / "quarantine_assets").is_dir()


def test_missing_pipelines_folder_is_reported(tmp_path):
    with pytest.raises(ConfigError) as raised:
        load_project(tmp_path, env="dev", warehouse=tmp_path)
    assert [(p.code, p.file) for p in raised.value.problems] == [("QA-CFG-002", tmp_path / "pipelines")]
