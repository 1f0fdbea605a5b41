"""A DLQ created from Lakehouse Plumber's DDL, verbatim, takes the whole loop; what needs a context column degrades
with a warning naming it, and `upgrade-tables` adds the columns in place."""

from __future__ import annotations

import re

from dagster import AssetCheckSeverity, SensorResult
from deltalake import DeltaTable
from graph_driver import Loop
from reference_ddl import REFERENCE_INBOX_DDL, REFERENCE_OUTBOX_DDL, create_reference_tables, path_name
from test_table_checks import run_checks
from typer.testing import CliRunner

from quarantine_assets.cli import app
from quarantine_assets.defs.keys import INBOX, asset_key
from quarantine_assets.engine.lake.dlq_schema import (
    INBOX_CONTEXT_COLUMNS,
    INBOX_CORE_COLUMNS,
    OUTBOX_CONTEXT_COLUMNS,
    OUTBOX_CORE_COLUMNS,
)
from quarantine_assets.engine.lake.tables import Warehouse
from quarantine_assets.engine.spark.dlq_tables import upgrade_dlq_tables
from quarantine_assets.engine.spark.operator import RowFilter, discard_rows, inbox_row, listing, queue_stats

runner = CliRunner()


def columns_of(path) -> list[str]:
    return DeltaTable(str(path)).schema().to_arrow().names


def test_reference_ddl_creates_the_reference_shape_in_our_session(spark, warehouse):
    create_reference_tables(spark, warehouse, "demo.ops.dlq")

    assert columns_of(warehouse.path("demo.ops.dlq")) == list(INBOX_CORE_COLUMNS)
    assert columns_of(warehouse.path("demo.ops.dlq_outbox")) == list(OUTBOX_CORE_COLUMNS)


def test_the_whole_loop_runs_on_reference_tables_and_says_what_is_lost(spark, warehouse, tmp_path):
    loop = Loop(spark, warehouse, tmp_path, create_tables=create_reference_tables)
    split = loop.ingest([(1, 1, 10.0, "EUR"), (2, None, 5.0, "EUR"), (3, 3, -5.0, "USD"), (4, None, 1.0, "XXX")])

    inbox_materialization = next(
        event.event_specific_data.materialization
        for event in split.all_events
        if event.is_step_materialization
        and event.event_specific_data.materialization.asset_key == asset_key(loop.action, INBOX)
    )
    warnings = inbox_materialization.metadata["dlq_warnings"].value
    assert "demo.ops.dlq has no _dlq_attempt" in warnings and "max_attempts cannot be enforced" in warnings
    assert "quarantine-assets upgrade-tables" in warnings
    dlq = loop.action.quarantine.inbox_table
    assert listing(spark, warehouse, dlq, RowFilter(source_table="demo.bronze.orders"), 10).count() == 3
    assert inbox_row(spark, warehouse, dlq, loop.key_of(2))["_dlq_status"] == "quarantined"
    per_rule = {row["rule"]: row["count"] for row in queue_stats(spark, warehouse, dlq, RowFilter()).counts}
    assert per_rule == {"valid_order_id": 2, "non_negative_amount": 1, "known_currency": 1}

    loop.fix(2, order_id=2)
    loop.fix(3, amount=-1.0)  # still wrong: back to quarantined, with no attempt to count
    discarded = discard_rows(spark, warehouse, loop.action, [loop.key_of(4)], reason="test order", by="test")
    assert discarded.rows_changed == 1
    assert any("_dlq_reason" in warning for warning in discarded.warnings)
    tick = loop.tick()
    assert isinstance(tick, SensorResult) and len(tick.run_requests) == 1
    recycle = loop.run_recycle()

    assert loop.validated() == [(1, 1, 10.0, "EUR"), (2, 2, 5.0, "EUR")]
    assert (loop.inbox_row(3)["_dlq_status"], loop.inbox_row(4)["_dlq_status"]) == ("quarantined", "discarded")
    checks = {evaluation.check_name: evaluation for evaluation in recycle.get_asset_check_evaluations()}
    assert checks["outbox_keys_unique"].passed and checks["recycled_lands_once"].passed

    schema = run_checks(warehouse, loop.action)[1][INBOX, "schema"]
    assert not schema.passed and schema.severity == AssetCheckSeverity.WARN
    assert set(schema.metadata["lost_without_context_columns"].value) == set(INBOX_CONTEXT_COLUMNS)
    assert "upgrade-tables" in schema.description


def test_upgrade_tables_adds_every_context_column_and_rewrites_no_data(spark, warehouse, tmp_path):
    loop = Loop(spark, warehouse, tmp_path, create_tables=create_reference_tables)
    loop.ingest([(1, None, 1.0, "EUR")])
    inbox = warehouse.path("demo.ops.dlq")
    files_before = set(DeltaTable(str(inbox)).file_uris())

    added = upgrade_dlq_tables(spark, warehouse, "demo.ops.dlq")

    assert added == {"demo.ops.dlq": list(INBOX_CONTEXT_COLUMNS), "demo.ops.dlq_outbox": list(OUTBOX_CONTEXT_COLUMNS)}
    assert set(DeltaTable(str(inbox)).file_uris()) == files_before
    assert columns_of(inbox) == list(INBOX_CORE_COLUMNS | INBOX_CONTEXT_COLUMNS)
    assert run_checks(warehouse, loop.action)[1][INBOX, "schema"].passed
    assert upgrade_dlq_tables(spark, warehouse, "demo.ops.dlq") == {"demo.ops.dlq": [], "demo.ops.dlq_outbox": []}
    loop.fix(1, order_id=1)
    loop.run_recycle()
    assert loop.validated() == [(1, 1, 1.0, "EUR")]


def test_ddl_core_prints_the_reference_statements(tmp_path):
    printed = runner.invoke(app, ["--warehouse", str(tmp_path), "ddl", "--core"], env={"COLUMNS": "250"})

    assert printed.exit_code == 0, printed.output
    statements = [part.strip() for part in re.split(r"^-- .*$", printed.output, flags=re.M) if part.strip()]
    warehouse = Warehouse(tmp_path)
    assert statements == [
        REFERENCE_INBOX_DDL.format(table=path_name(warehouse, "demo.ops.dlq")),
        REFERENCE_OUTBOX_DDL.format(table=path_name(warehouse, "demo.ops.dlq_outbox")),
    ]
