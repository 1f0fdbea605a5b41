"""A warehouse root given as a URL, with dagster-deltalake's storage options, as on an object store.

The loop runs on a `file://` root: the same URL code path an `s3://` or `abfss://` root takes
(delta-rs's object store for the log, checkpoints and sensor reads; Spark's Hadoop file system
for data), on local disk. What an object store adds, its connector and credentials, is checked
as the Spark settings a user gets from the same storage options.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dagster import SensorResult
from dagster._core.test_utils import instance_for_test
from dagster_deltalake import AzureConfig, GcsConfig, LocalConfig, S3Config
from dagster_graphql.test.utils import define_out_of_process_context, execute_dagster_graphql
from graph_driver import Loop
from typer.testing import CliRunner

from quarantine_assets.cli import app
from quarantine_assets.defs.definitions import TABLE_CHECKS_JOB, load_definitions
from quarantine_assets.defs.resources import default_resources, warehouse_resource
from quarantine_assets.engine.lake.tables import Warehouse
from quarantine_assets.engine.spark.object_store import hadoop_version
from quarantine_assets.engine.spark.session import DELTA_PACKAGE, spark_config
from quarantine_assets.errors import QuarantineError
from quarantine_assets.settings import REPO_ROOT, STORAGE_OPTIONS_VARIABLE


def test_a_warehouse_url_runs_split_fix_sensor_recycle_and_checks(spark, tmp_path, monkeypatch):
    monkeypatch.delenv(STORAGE_OPTIONS_VARIABLE, raising=False)
    folder = tmp_path / "warehouse"
    loop = Loop(spark, Warehouse(folder.as_uri()), tmp_path)
    loop.ingest([(1, 1, 10.0, "EUR"), (2, None, 5.0, "EUR"), (3, 3, -5.0, "USD")])
    loop.fix(2, order_id=2)

    tick = loop.tick()
    assert isinstance(tick, SensorResult) and tick.run_requests[0].tags["quarantine/rows_fixed"] == "1"
    loop.run_recycle()

    assert loop.validated() == [(1, 1, 10.0, "EUR"), (2, 2, 5.0, "EUR")]
    assert sorted((row["_dlq_status"], row["_dlq_attempt"]) for row in loop.inbox().collect()) == [
        ("quarantined", 1),
        ("recycled", 1),
    ]
    # The URL names the same folder a path would: tables, checkpoints and nothing beside them.
    assert {p.name for p in folder.iterdir()} == {"demo", "_checkpoints"}
    assert (folder / "demo" / "ops" / "dlq" / "_delta_log").is_dir()
    assert sorted(p.name for p in (folder / "_checkpoints" / loop.action.key).iterdir()) == [
        "outbox",
        "recycled",
        "split",
    ]
    checks = loop.defs.resolve_job_def(TABLE_CHECKS_JOB).execute_in_process(instance=loop.instance)
    evaluations = {(e.asset_key.path[-1], e.check_name): e for e in checks.get_asset_check_evaluations()}
    assert {"change_data_feed", "clustered_by_source_table", "schema", "outbox_exists", "single_source_owner"} <= {
        name for _, name in evaluations
    }
    assert all(evaluation.passed for evaluation in evaluations.values()), {
        key: evaluation.description for key, evaluation in evaluations.items() if not evaluation.passed
    }
    assert evaluations["inbox", "clustered_by_source_table"].metadata["clustering_columns"].value == [
        "_dlq_source_table"
    ]
    assert evaluations["inbox", "schema"].metadata["path"].value == f"{folder.as_uri()}/demo/ops/dlq"


def test_the_sensor_reads_the_inbox_through_dagster_deltalakes_resource(tmp_path):
    resource = warehouse_resource(tmp_path.as_uri(), S3Config(region="eu-west-1", access_key_id="AK"))
    table = resource.table("demo.ops.dlq")
    assert (table.url, table.storage_options) == (f"{tmp_path.as_uri()}/demo/ops/dlq", resource.storage_options)
    # The engine's reads and the resource's take the same options.
    assert resource.warehouse.storage_options == resource.storage_options.str_dict()


def test_one_storage_config_gives_delta_rs_and_spark_the_same_credentials():
    hadoop = hadoop_version()
    s3 = default_resources(
        "s3://lake/warehouse",
        S3Config(access_key_id="AK", secret_access_key="SK", region="eu-west-1", endpoint="http://minio:9000"),
    )
    settings = spark_config(warehouse=s3["warehouse"].warehouse)
    assert s3["warehouse"].warehouse.storage_options["secret_access_key"] == "SK"
    assert settings["spark.hadoop.fs.s3a.access.key"] == "AK"
    assert settings["spark.hadoop.fs.s3a.secret.key"] == "SK"
    assert settings["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-1"
    assert settings["spark.hadoop.fs.s3a.endpoint"] == "http://minio:9000"
    assert settings["spark.hadoop.fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert f"org.apache.hadoop:hadoop-aws:{hadoop}" in settings["spark.jars.packages"].split(",")
    # Delta's jars stay, whether Ivy resolves them this time or they come from the cache.
    assert DELTA_PACKAGE in settings.get("spark.jars.packages", "") or "delta-spark" in settings.get("spark.jars", "")

    azure = spark_config(
        warehouse=Warehouse(
            "abfss://lake@account.dfs.core.windows.net/warehouse",
            AzureConfig(account_name="account", account_key="KEY").str_dict(),
        )
    )
    assert azure["spark.hadoop.fs.azure.account.key.account.dfs.core.windows.net"] == "KEY"
    assert f"org.apache.hadoop:hadoop-azure:{hadoop}" in azure["spark.jars.packages"].split(",")

    gcs = spark_config(
        warehouse=Warehouse("gs://lake/warehouse", GcsConfig(service_account="/keys/sa.json").str_dict())
    )
    assert gcs["spark.hadoop.fs.gs.auth.service.account.json.keyfile"] == "/keys/sa.json"
    assert gcs["spark.hadoop.fs.gs.auth.type"] == "SERVICE_ACCOUNT_JSON_KEYFILE"

    local = spark_config(warehouse=Warehouse("/data/warehouse", LocalConfig().str_dict()))
    assert not [key for key in local if key.startswith("spark.hadoop.")]


def test_a_warehouse_url_spark_cannot_reach_is_refused_with_its_code():
    with pytest.raises(QuarantineError) as raised:
        spark_config(warehouse=Warehouse("ftp://files.example.com/warehouse"))
    assert raised.value.code == "QA-CFG-030" and "ftp://" in str(raised.value)


def test_storage_options_from_the_environment_configure_cli_and_code_location(tmp_path, monkeypatch):
    monkeypatch.setenv(STORAGE_OPTIONS_VARIABLE, json.dumps({"provider": "s3", "region": "eu-west-1"}))
    resource = warehouse_resource("s3://lake/warehouse")
    assert isinstance(resource.storage_options, S3Config) and resource.storage_options.region == "eu-west-1"

    monkeypatch.setenv(STORAGE_OPTIONS_VARIABLE, json.dumps({"provider": "s4", "region": "eu-west-1"}))
    refused = CliRunner().invoke(app, ["--warehouse", str(tmp_path), "stats"])
    assert isinstance(refused.exception, QuarantineError) and refused.exception.code == "QA-CFG-031"
    assert "provider" in str(refused.exception)
    with pytest.raises(Exception, match="QA-CFG-031"):
        load_definitions(warehouse_root=str(tmp_path))


def test_the_demo_refuses_a_warehouse_it_cannot_write_its_input_to(tmp_path, monkeypatch):
    monkeypatch.delenv(STORAGE_OPTIONS_VARIABLE, raising=False)
    result = CliRunner().invoke(app, ["--warehouse", "s3://lake/warehouse", "demo"])
    assert isinstance(result.exception, QuarantineError) and result.exception.code == "QA-CFG-032"
    assert not Path("s3:").exists()


RESOURCE_CONFIG_QUERY = """
query ($selector: ResourceSelector!) {
  topLevelResourceDetailsOrError(resourceSelector: $selector) {
    ... on ResourceDetails { configuredValues { key value type } }
  }
}"""


def shown_resource_config(resource: str) -> str:
    """The resource's config as the Dagster UI asks for it, over GraphQL, from a code server of `definitions.py`."""
    with instance_for_test() as instance:
        with define_out_of_process_context(str(REPO_ROOT / "definitions.py"), "defs", instance) as context:
            (location,) = context.get_code_location_entries()
            selector = {
                "repositoryLocationName": location,
                "repositoryName": "__repository__",
                "resourceName": resource,
            }
            result = execute_dagster_graphql(context, RESOURCE_CONFIG_QUERY, {"selector": selector})
    return json.dumps(result.data["topLevelResourceDetailsOrError"]["configuredValues"])


def test_a_storage_credential_is_shown_by_its_variable_and_refused_in_clear(tmp_path, monkeypatch):
    secret = "wJalrXUtnFEMI-K7MDENG-bPxRfiCY"
    monkeypatch.setenv("LAKE_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("QUARANTINE_WAREHOUSE", "s3://lake/warehouse")
    named = {"provider": "s3", "region": "eu-west-1", "secret_access_key": {"env": "LAKE_SECRET_ACCESS_KEY"}}
    monkeypatch.setenv(STORAGE_OPTIONS_VARIABLE, json.dumps(named))

    shown = shown_resource_config("warehouse")
    assert secret not in shown and "LAKE_SECRET_ACCESS_KEY" in shown and "eu-west-1" in shown
    # Commands, outside a Dagster run, read it from its variable.
    assert warehouse_resource().warehouse.storage_options["secret_access_key"] == secret

    monkeypatch.setenv(STORAGE_OPTIONS_VARIABLE, json.dumps(named | {"secret_access_key": secret}))
    refused = CliRunner().invoke(app, ["--warehouse", str(tmp_path), "stats"])
    assert isinstance(refused.exception, QuarantineError) and refused.exception.code == "QA-CFG-037"
    assert secret not in str(refused.exception)
    with pytest.raises(Exception, match="QA-CFG-037"):
        load_definitions(warehouse_root=str(tmp_path))
