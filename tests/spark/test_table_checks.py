"""DLQ table checks: real Spark makes tables right and wrong, real Dagster runs the checks on them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from builders import orders_action
from dagster import AssetSelection, AssetSpec, Definitions, define_asset_job

from quarantine_assets.defs.keys import INBOX, OUTBOX, asset_key
from quarantine_assets.defs.resources import WarehouseResource
from quarantine_assets.defs.table_checks import dlq_table_checks, source_owner_check
from quarantine_assets.engine.lake.dlq_schema import (
    INBOX_CONTEXT_COLUMNS,
    INBOX_CORE_COLUMNS,
    OUTBOX_CONTEXT_COLUMNS,
    OUTBOX_CORE_COLUMNS,
)
from quarantine_assets.engine.lake.table_health import LAYOUT, require_healthy_dlq
from quarantine_assets.engine.lake.tables import INBOX_PROPERTIES, OUTBOX_PROPERTIES, inbox_ddl, outbox_ddl
from quarantine_assets.engine.spark.dlq_tables import create_dlq_tables
from quarantine_assets.errors import MissingTableError, UnhealthyTableError

ACTION = orders_action()
DLQ = ACTION.quarantine.inbox_table
SOURCE_TABLE = ACTION.quarantine.source_table
OTHER_OWNER = "other_pipeline/orders/dq_orders"
CLUSTERED = "CLUSTER BY (_dlq_source_table)"
INBOX_COLUMNS = INBOX_CORE_COLUMNS | INBOX_CONTEXT_COLUMNS
OUTBOX_COLUMNS = OUTBOX_CORE_COLUMNS | OUTBOX_CONTEXT_COLUMNS
TABLE_CHECKS = {
    INBOX: {"change_data_feed", "row_tracking", "deletion_vectors", LAYOUT, "schema", "outbox_exists"},
    OUTBOX: {"row_tracking", "deletion_vectors", LAYOUT, "schema"},
}


def without(mapping: dict, *keys: str) -> dict:
    return {key: value for key, value in mapping.items() if key not in keys}


def create_table(spark, path, columns: dict, properties: dict, layout: str = CLUSTERED) -> None:
    """Hand-written DDL, so a test can get any part of it wrong."""
    column_list = ", ".join(f"{name} {sql_type}" for name, sql_type in columns.items())
    property_list = ", ".join(f"'{key}' = '{value}'" for key, value in properties.items())
    tblproperties = f"TBLPROPERTIES ({property_list})" if properties else ""
    spark.sql(f"CREATE TABLE delta.`{path}` ({column_list}) USING DELTA {layout} {tblproperties}")


def create_inbox(spark, warehouse, columns=INBOX_COLUMNS, properties=INBOX_PROPERTIES, layout=CLUSTERED) -> None:
    create_table(spark, warehouse.path(DLQ), columns, properties, layout)


def create_outbox(spark, warehouse, columns=OUTBOX_COLUMNS, properties=OUTBOX_PROPERTIES, layout=CLUSTERED) -> None:
    create_table(spark, warehouse.path(ACTION.quarantine.outbox_table), columns, properties, layout)


def insert_inbox_row(spark, warehouse, source_table: str, owner: str | None) -> None:
    columns = "_dlq_sk, _dlq_source_table, _dlq_status, _dlq_timestamp, _row_data"
    values = f"uuid(), '{source_table}', 'quarantined', current_timestamp(), parse_json('{{\"order_id\": 1}}')"
    if owner is not None:
        columns, values = f"{columns}, _dlq_action", f"{values}, '{owner}'"
    spark.sql(f"INSERT INTO delta.`{warehouse.path(DLQ)}` ({columns}) SELECT {values}")


def run_checks(warehouse, action=ACTION):
    """Every check of the action, run as a Dagster job; returns the run and evaluations by (role, check)."""
    checks = [*dlq_table_checks(action), source_owner_check(action)]
    defs = Definitions(
        assets=[AssetSpec(asset_key(action, INBOX)), AssetSpec(asset_key(action, OUTBOX))],
        asset_checks=checks,
        jobs=[define_asset_job("dlq_checks", selection=AssetSelection.checks(*checks))],
        resources={"warehouse": WarehouseResource(root=str(warehouse.root))},
    )
    # A blocking check that fails with ERROR fails its run by design; its evaluation is still recorded.
    result = defs.resolve_job_def("dlq_checks").execute_in_process(raise_on_error=False)
    evaluations = {(e.asset_key.path[-1], e.check_name): e for e in result.get_asset_check_evaluations()}
    return result, evaluations


def failures(evaluations) -> dict[tuple[str, str], str]:
    return {key: evaluation.severity.value for key, evaluation in evaluations.items() if not evaluation.passed}


def metadata(evaluation, key: str):
    return evaluation.metadata[key].value


def test_every_check_passes_on_tables_made_by_create_dlq_tables_and_says_how_long_it_took(spark, warehouse):
    create_dlq_tables(spark, warehouse, DLQ)
    insert_inbox_row(spark, warehouse, SOURCE_TABLE, ACTION.owner)

    result, evaluations = run_checks(warehouse)

    assert result.success
    expected = {(role, check) for role, checks in TABLE_CHECKS.items() for check in checks}
    assert set(evaluations) == expected | {(INBOX, "single_source_owner")}
    assert failures(evaluations) == {}
    assert all(metadata(evaluation, "elapsed_ms") >= 0.0 for evaluation in evaluations.values())
    assert metadata(evaluations[INBOX, LAYOUT], "clustering_columns") == ["_dlq_source_table"]
    assert metadata(evaluations[INBOX, "schema"], "columns")["_row_data"] == "variant not null"
    assert "changeDataFeed" in metadata(evaluations[INBOX, "change_data_feed"], "table_features")
    assert metadata(evaluations[INBOX, "single_source_owner"], "owners_seen") == [ACTION.owner]


def test_inbox_without_change_data_feed_fails_the_cdf_check_with_error(spark, warehouse):
    create_inbox(spark, warehouse, properties=without(INBOX_PROPERTIES, "delta.enableChangeDataFeed"))
    spark.sql(outbox_ddl(warehouse, DLQ))

    result, evaluations = run_checks(warehouse)

    assert not result.success
    assert failures(evaluations) == {(INBOX, "change_data_feed"): "ERROR", (INBOX, "single_source_owner"): "WARN"}
    assert metadata(evaluations[INBOX, "change_data_feed"], "delta.enableChangeDataFeed") == "unset"
    assert "change feed of demo.ops.dlq is off" in evaluations[INBOX, "single_source_owner"].description


def test_tables_without_row_tracking_fail_the_row_tracking_checks_with_error(spark, warehouse):
    create_inbox(spark, warehouse, properties=without(INBOX_PROPERTIES, "delta.enableRowTracking"))
    create_outbox(spark, warehouse, properties=without(OUTBOX_PROPERTIES, "delta.enableRowTracking"))

    _, evaluations = run_checks(warehouse)

    assert failures(evaluations) == {(INBOX, "row_tracking"): "ERROR", (OUTBOX, "row_tracking"): "ERROR"}
    assert "rowTracking" not in metadata(evaluations[INBOX, "row_tracking"], "table_features")


def test_tables_without_deletion_vectors_fail_the_deletion_vector_checks_with_error(spark, warehouse):
    create_inbox(spark, warehouse, properties=without(INBOX_PROPERTIES, "delta.enableDeletionVectors"))
    create_outbox(spark, warehouse, properties=OUTBOX_PROPERTIES | {"delta.enableDeletionVectors": "false"})

    _, evaluations = run_checks(warehouse)

    assert failures(evaluations) == {(INBOX, "deletion_vectors"): "ERROR", (OUTBOX, "deletion_vectors"): "ERROR"}
    assert metadata(evaluations[OUTBOX, "deletion_vectors"], "delta.enableDeletionVectors") == "false"


def test_a_core_column_with_the_wrong_type_or_nullability_fails_the_schema_check_with_error(spark, warehouse):
    create_inbox(spark, warehouse, columns=INBOX_COLUMNS | {"_row_data": "STRING NOT NULL", "_dlq_sk": "STRING"})
    spark.sql(outbox_ddl(warehouse, DLQ))

    _, evaluations = run_checks(warehouse)

    assert failures(evaluations) == {(INBOX, "schema"): "ERROR"}
    assert metadata(evaluations[INBOX, "schema"], "wrong_columns") == {
        "_dlq_sk": "string, expected string not null",
        "_row_data": "string not null, expected variant not null",
    }


def test_a_missing_core_column_fails_the_schema_check_with_error(spark, warehouse):
    spark.sql(inbox_ddl(warehouse, DLQ))
    create_outbox(spark, warehouse, columns=without(OUTBOX_COLUMNS, "_dlq_recycled_at"))

    _, evaluations = run_checks(warehouse)

    assert failures(evaluations) == {(OUTBOX, "schema"): "ERROR"}
    assert metadata(evaluations[OUTBOX, "schema"], "missing_core_columns") == ["_dlq_recycled_at"]


def test_a_missing_context_column_is_a_warning_that_blocks_nothing(spark, warehouse):
    create_inbox(spark, warehouse, columns=without(INBOX_COLUMNS, "_dlq_run_id"))
    spark.sql(outbox_ddl(warehouse, DLQ))

    result, evaluations = run_checks(warehouse)

    assert result.success
    assert failures(evaluations) == {(INBOX, "schema"): "WARN"}
    assert metadata(evaluations[INBOX, "schema"], "missing_context_columns") == ["_dlq_run_id"]
    description = evaluations[INBOX, "schema"].description
    assert "without _dlq_run_id, rows do not name the run" in description
    assert "quarantine-assets upgrade-tables" in description
    require_healthy_dlq(warehouse, ACTION)


@pytest.mark.parametrize("layout", ["", "CLUSTER BY (_dlq_sk)", "CLUSTER BY (_dlq_source_table, _dlq_sk)"])
def test_tables_not_laid_out_by_source_table_fail_the_layout_check_with_a_warning(spark, warehouse, layout):
    create_inbox(spark, warehouse, layout=layout)
    create_outbox(spark, warehouse, layout=layout)

    result, evaluations = run_checks(warehouse)

    assert result.success  # conflicting writers retry: slower, but no row is lost
    assert failures(evaluations) == {(INBOX, LAYOUT): "WARN", (OUTBOX, LAYOUT): "WARN"}
    assert metadata(evaluations[INBOX, LAYOUT], "partition_columns") == []


def test_tables_partitioned_by_source_table_pass_the_layout_check(spark, warehouse):
    create_inbox(spark, warehouse, layout="PARTITIONED BY (_dlq_source_table)")
    create_outbox(spark, warehouse, layout="PARTITIONED BY (_dlq_source_table)")

    _, evaluations = run_checks(warehouse)

    assert failures(evaluations) == {}
    assert metadata(evaluations[OUTBOX, LAYOUT], "partition_columns") == ["_dlq_source_table"]


def test_layout_check_reads_clustering_from_the_last_checkpoint_and_the_commits_after_it(spark, warehouse):
    create_dlq_tables(spark, warehouse, DLQ)
    inbox = warehouse.path(DLQ)
    spark.sql(f"ALTER TABLE delta.`{inbox}` SET TBLPROPERTIES ('delta.checkpointInterval' = '2')")
    insert_inbox_row(spark, warehouse, SOURCE_TABLE, ACTION.owner)  # version 2: a checkpoint
    assert (Path(inbox) / "_delta_log" / "00000000000000000002.checkpoint.parquet").exists()
    assert run_checks(warehouse)[1][INBOX, LAYOUT].passed

    spark.sql(f"ALTER TABLE delta.`{inbox}` CLUSTER BY NONE")  # version 3, after the checkpoint

    layout = run_checks(warehouse)[1][INBOX, LAYOUT]
    assert not layout.passed
    assert metadata(layout, "clustering_columns") == []


def test_missing_outbox_fails_outbox_exists_and_every_outbox_check_with_error(spark, warehouse):
    spark.sql(inbox_ddl(warehouse, DLQ))

    result, evaluations = run_checks(warehouse)

    assert not result.success
    assert failures(evaluations) == {(OUTBOX, check): "ERROR" for check in TABLE_CHECKS[OUTBOX]} | {
        (INBOX, "outbox_exists"): "ERROR"
    }
    description = evaluations[INBOX, "outbox_exists"].description
    assert "demo.ops.dlq_outbox" in description
    assert str(warehouse.path("demo.ops.dlq_outbox")) in description
    assert "quarantine-assets create-tables" in description


def test_owner_check_fails_when_another_owner_wrote_rows_for_the_same_source_table(spark, warehouse):
    create_dlq_tables(spark, warehouse, DLQ)
    insert_inbox_row(spark, warehouse, SOURCE_TABLE, ACTION.owner)
    insert_inbox_row(spark, warehouse, SOURCE_TABLE, OTHER_OWNER)

    result, evaluations = run_checks(warehouse)

    assert not result.success
    assert failures(evaluations) == {(INBOX, "single_source_owner"): "ERROR"}
    owner_check = evaluations[INBOX, "single_source_owner"]
    assert metadata(owner_check, "owners_seen") == sorted([ACTION.owner, OTHER_OWNER])
    assert OTHER_OWNER in owner_check.description


def test_owner_check_passes_when_other_owners_wrote_only_other_source_tables(spark, warehouse):
    create_dlq_tables(spark, warehouse, DLQ)
    insert_inbox_row(spark, warehouse, SOURCE_TABLE, ACTION.owner)
    insert_inbox_row(spark, warehouse, "demo.bronze.returns", OTHER_OWNER)
    insert_inbox_row(spark, warehouse, SOURCE_TABLE, None)  # a row that does not say who wrote it

    _, evaluations = run_checks(warehouse)

    assert failures(evaluations) == {}
    assert metadata(evaluations[INBOX, "single_source_owner"], "owners_seen") == [ACTION.owner]


def test_owner_check_reads_the_change_feed_from_when_it_was_turned_on(spark, warehouse):
    create_inbox(spark, warehouse, properties=without(INBOX_PROPERTIES, "delta.enableChangeDataFeed"))
    spark.sql(outbox_ddl(warehouse, DLQ))
    insert_inbox_row(spark, warehouse, SOURCE_TABLE, ACTION.owner)
    spark.sql(f"ALTER TABLE delta.`{warehouse.path(DLQ)}` SET TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')")
    insert_inbox_row(spark, warehouse, SOURCE_TABLE, OTHER_OWNER)

    _, evaluations = run_checks(warehouse)

    assert failures(evaluations) == {(INBOX, "single_source_owner"): "ERROR"}
    assert metadata(evaluations[INBOX, "single_source_owner"], "owners_seen") == [OTHER_OWNER]


def test_owner_check_warns_that_it_cannot_verify_an_inbox_without_an_owner_column(spark, warehouse):
    create_inbox(spark, warehouse, columns=without(INBOX_COLUMNS, "_dlq_action"))
    spark.sql(outbox_ddl(warehouse, DLQ))
    insert_inbox_row(spark, warehouse, SOURCE_TABLE, None)

    _, evaluations = run_checks(warehouse)

    assert failures(evaluations) == {(INBOX, "schema"): "WARN", (INBOX, "single_source_owner"): "WARN"}
    assert "has no _dlq_action column" in evaluations[INBOX, "single_source_owner"].description


def test_require_healthy_dlq_raises_qa_tbl_001_naming_a_missing_inbox_and_the_fix(warehouse):
    with pytest.raises(MissingTableError) as raised:
        require_healthy_dlq(warehouse, ACTION)

    assert raised.value.code == "QA-TBL-001"
    assert "demo.ops.dlq " in str(raised.value)
    assert "quarantine-assets create-tables" in str(raised.value)


def test_require_healthy_dlq_raises_qa_tbl_001_naming_a_missing_outbox(spark, warehouse):
    spark.sql(inbox_ddl(warehouse, DLQ))

    with pytest.raises(MissingTableError) as raised:
        require_healthy_dlq(warehouse, ACTION)

    assert raised.value.code == "QA-TBL-001"
    assert "demo.ops.dlq_outbox" in str(raised.value)
    assert "quarantine-assets create-tables" in str(raised.value)


def test_require_healthy_dlq_raises_qa_tbl_003_naming_every_data_losing_problem(spark, warehouse):
    create_inbox(spark, warehouse, properties=without(INBOX_PROPERTIES, "delta.enableChangeDataFeed"), layout="")
    create_outbox(spark, warehouse, properties=without(OUTBOX_PROPERTIES, "delta.enableDeletionVectors"))

    with pytest.raises(UnhealthyTableError) as raised:
        require_healthy_dlq(warehouse, ACTION)

    message = str(raised.value)
    assert raised.value.code == "QA-TBL-003"
    assert "[change_data_feed] demo.ops.dlq:" in message
    assert "[deletion_vectors] demo.ops.dlq_outbox:" in message
    assert LAYOUT not in message  # a warning, not a loss


def test_require_healthy_dlq_accepts_tables_made_by_create_dlq_tables(spark, warehouse):
    create_dlq_tables(spark, warehouse, DLQ)

    require_healthy_dlq(warehouse, ACTION)


def test_inspecting_tables_never_starts_a_jvm(spark, warehouse, tmp_path):
    create_dlq_tables(spark, warehouse, DLQ)
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from pyspark import SparkContext
        from builders import orders_action
        from quarantine_assets.engine.lake.ownership import source_owner
        from quarantine_assets.engine.lake.table_health import data_losing_problems
        from quarantine_assets.engine.lake.tables import Warehouse

        warehouse, action = Warehouse(Path({str(warehouse.root)!r})), orders_action()
        assert data_losing_problems(warehouse, action) == []
        assert source_owner(warehouse, action).passed
        assert SparkContext._gateway is None and SparkContext._active_spark_context is None
        """
    )
    tests_dir = os.path.dirname(os.path.dirname(__file__))
    env = os.environ | {"PYTHONPATH": tests_dir}

    subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path, check=True, timeout=120)
