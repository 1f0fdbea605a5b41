"""Retention: resolved rows past an action's retention_days are deleted, open rows never; nothing downstream notices."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from dagster import SensorResult
from graph_driver import Loop
from pyspark.sql import functions as F
from typer.testing import CliRunner

from quarantine_assets.cli import app
from quarantine_assets.defs.keys import INBOX
from quarantine_assets.defs.retention_job import PURGE_JOB, PURGE_SCHEDULE
from quarantine_assets.engine.spark.operator import discard_rows
from quarantine_assets.engine.spark.outbox import duplicate_outbox_keys, run_outbox
from quarantine_assets.engine.spark.retention import purge_resolved
from quarantine_assets.settings import REPO_ROOT

ROWS = [(1, None, 1.0, "EUR"), (2, None, 2.0, "EUR"), (3, None, 3.0, "EUR")]
ROWS += [(4, None, 4.0, "EUR"), (5, None, 5.0, "EUR"), (6, 6, -6.0, "EUR")]
RESOLVED = {"recycled": 1, "discarded": 1, "exhausted": 1}


def statuses(loop: Loop) -> dict[int, str]:
    rows = loop.inbox().select(F.variant_get("_row_data", "$.row_no", "int").alias("row_no"), "_dlq_status")
    return {row["row_no"]: row["_dlq_status"] for row in rows.collect()}


def every_status(spark, warehouse, tmp_path, retention_days: int) -> Loop:
    """Rows 1..6: landed, discarded, recycled on its way, fixed, quarantined, exhausted."""
    loop = Loop(spark, warehouse, tmp_path, max_attempts=1, retention_days=retention_days)
    loop.ingest(ROWS)
    loop.fix(1, order_id=1)
    loop.fix(6, amount=-7.0)  # still wrong: exhausted at the cap of 1
    loop.run_recycle()
    discard_rows(spark, warehouse, loop.action, [loop.key_of(2)], reason="duplicate order", by="test")
    loop.fix(3, order_id=3)
    run_outbox(spark, loop.action, warehouse, "outbox-only")  # sent, not yet landed
    loop.fix(4, order_id=4)
    assert statuses(loop) == {
        1: "recycled",
        2: "discarded",
        3: "recycled",
        4: "fixed",
        5: "quarantined",
        6: "exhausted",
    }
    return loop


def resolutions(loop: Loop) -> dict[int, tuple[bool, str | None]]:
    """Per row: whether it has a resolution time, and who resolved it."""
    rows = loop.inbox().select(
        F.variant_get("_row_data", "$.row_no", "int").alias("row_no"), "_dlq_resolved_at", "_dlq_resolved_by"
    )
    return {row["row_no"]: (row["_dlq_resolved_at"] is not None, row["_dlq_resolved_by"]) for row in rows.collect()}


def test_purge_deletes_resolved_rows_past_retention_and_never_an_open_one(spark, warehouse, tmp_path):
    """The engine's purge with its clock moved, then the Dagster job and the CLI as an operator runs them."""
    loop = every_status(spark, warehouse, tmp_path, retention_days=0)
    # Every resolved row says when and by whom; a fixed row names its fixer, who resolves it once it lands.
    assert resolutions(loop) == {
        1: (True, "test"),
        2: (True, "test"),
        3: (False, "test"),
        4: (False, "test"),
        5: (False, None),
        6: (True, "recycled"),
    }
    assert isinstance(loop.tick(), SensorResult)  # the cursor moves past the fixes
    inbox = warehouse.path(loop.action.quarantine.inbox_table)
    now = datetime.now(timezone.utc)

    def purge(older_than: timedelta, at: datetime, dry_run: bool = False):
        return purge_resolved(spark, warehouse, loop.action, older_than, dry_run=dry_run, by="test", now=at)

    assert purge(timedelta(days=30), now + timedelta(days=29)).rows == 0  # resolved today: kept for 30 days
    dry = purge(timedelta(days=30), now + timedelta(days=31), dry_run=True)
    assert (dry.rows_by_status, dry.dry_run, dry.warnings, len(statuses(loop))) == (RESOLVED, True, [], 6)

    assert loop.defs.resolve_schedule_def(PURGE_SCHEDULE).job_name == PURGE_JOB
    job_dry = run_purge_job(loop, dry_run=True)
    assert (job_dry["rows_purged"], job_dry["rows_purged_by_status"], job_dry["dry_run"]) == (3, RESOLVED, True)
    # The demo's configs own the same slice (demo.bronze.orders in demo.ops.dlq) as the test's action.
    options = ["--config-dir", str(REPO_ROOT / "configs"), "--warehouse", warehouse.root]
    cli = CliRunner().invoke(
        app,
        [*options, "purge", "--source", "demo.bronze.orders", "--older-than-days", "0", "--dry-run"],
        env={"COLUMNS": "250"},
    )
    assert cli.exit_code == 0, cli.output
    assert "would delete 3" in cli.output and len(statuses(loop)) == 6

    version_before = spark.sql(f"DESCRIBE HISTORY delta.`{inbox}`").first()["version"]
    done = run_purge_job(loop, dry_run=False)  # retention_days: 0
    assert (done["rows_purged"], done["rows_purged_by_status"], done["dry_run"]) == (3, RESOLVED, False)
    assert statuses(loop) == {3: "recycled", 4: "fixed", 5: "quarantined"}
    # Open rows survive any age.
    assert purge(timedelta(0), datetime(9999, 1, 1, tzinfo=timezone.utc)).rows == 0
    assert statuses(loop) == {3: "recycled", 4: "fixed", 5: "quarantined"}

    # One DELETE that rewrote no data file (whole files dropped or rows marked in deletion vectors),
    # whose change feed holds a delete image per purged row.
    history = spark.sql(f"DESCRIBE HISTORY delta.`{inbox}`").where(f"version > {version_before}").collect()
    assert [commit["operation"] for commit in history] == ["DELETE"]
    metrics = history[0]["operationMetrics"]
    assert (metrics["numDeletedRows"], metrics["numAddedFiles"]) == ("3", "0"), metrics
    changes = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", history[0]["version"])
        .load(inbox)
    )
    deleted = changes.select(F.variant_get("_row_data", "$.row_no", "int").alias("row_no"), "_change_type").collect()
    assert sorted((row["row_no"], row["_change_type"]) for row in deleted) == [
        (1, "delete"),
        (2, "delete"),
        (6, "delete"),
    ]

    # The sensor sees no fixed row in the purge, and the recycle lands the open rows once.
    tick = loop.tick()
    assert isinstance(tick, SensorResult) and not tick.run_requests
    loop.run_recycle()
    assert [row[0] for row in loop.validated()] == [1, 3, 4]
    assert statuses(loop) == {3: "recycled", 4: "recycled", 5: "quarantined"}
    assert duplicate_outbox_keys(spark, warehouse, loop.action) == 0


def run_purge_job(loop: Loop, dry_run: bool) -> dict:
    """The purge job's run, and the observation it records on the inbox asset."""
    result = loop.defs.resolve_job_def(PURGE_JOB).execute_in_process(
        run_config={"ops": {f"{loop.action.key}_purge": {"config": {"dry_run": dry_run}}}}, instance=loop.instance
    )
    assert result.success
    (observation,) = [
        event.event_specific_data.asset_observation
        for event in result.all_events
        if event.event_type_value == "ASSET_OBSERVATION"
    ]
    assert observation.asset_key.path == [loop.action.key, INBOX]
    return {key: value.value for key, value in observation.metadata.items()}


def test_a_warehouse_folder_named_with_a_backtick_and_a_quote_runs_the_whole_loop(spark, tmp_path):
    """Table paths reach SQL text (MERGE, DELETE, DDL) quoted, whatever the folder is called."""
    from quarantine_assets.engine.lake.tables import Warehouse

    warehouse = Warehouse(tmp_path / "ware`house's")
    loop = Loop(spark, warehouse, tmp_path)
    loop.ingest([(1, None, 1.0, "EUR")])
    loop.fix(1, order_id=1)
    loop.run_recycle()
    assert loop.validated() == [(1, 1, 1.0, "EUR")]

    purged = purge_resolved(spark, warehouse, loop.action, timedelta(0), dry_run=False, by="test")

    assert purged.rows == 1 and loop.inbox().count() == 0
