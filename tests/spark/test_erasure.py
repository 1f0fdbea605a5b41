"""Erasure: a subject's rows leave the DLQ and every file of its tables, as an operator runs `forget` and
`purge --physically`; rows of other subjects, the validated table and the recycle keep working."""

from __future__ import annotations

import json
from pathlib import Path

from file_scan import files_holding_text, row_numbers_in_files
from graph_driver import Loop
from pyspark.sql import functions as F
from typer.testing import CliRunner

from quarantine_assets.cli import app
from quarantine_assets.defs.erasure_job import FORGET_JOB
from quarantine_assets.defs.retention_job import PURGE_JOB
from quarantine_assets.engine.lake.alerts import CHANGES_REMOVED, first_cursor, inbox_alerts
from quarantine_assets.engine.lake.dlq_schema import FREE_TEXT_COLUMNS
from quarantine_assets.engine.spark.erasure import forget_subject
from quarantine_assets.engine.spark.operator import discard_rows
from quarantine_assets.errors import OperatorError
from quarantine_assets.settings import REPO_ROOT

SUBJECT = "row_no IN (1, 3, 5)"
SOURCE = "demo.bronze.orders"
MARKER = "ZQX"  # the currency of the subject's row that is never fixed: text that no file may keep
ROWS = [(1, None, 1.0, "EUR"), (2, None, 2.0, "EUR"), (3, None, 3.0, "EUR")]
ROWS += [(4, None, 4.0, "EUR"), (5, None, 5.0, MARKER), (6, None, 6.0, "USD")]
WIDE = {"COLUMNS": "250"}


def test_forget_erases_a_subject_from_the_dlq_and_its_files_and_nothing_else(spark, warehouse, tmp_path):
    loop = Loop(spark, warehouse, tmp_path)
    loop.ingest(ROWS)
    loop.fix(1, order_id=1)
    loop.fix(2, order_id=2)
    loop.run_recycle()  # rows 1 and 2 land: in the validated table, resolved in the inbox, sent in the outbox
    loop.fix(3, order_id=3)  # fixed, not yet sent
    inbox_folder = Path(warehouse.path(loop.action.quarantine.inbox_table))
    outbox_folder = Path(warehouse.path(loop.action.quarantine.outbox_table))
    assert row_numbers_in_files(inbox_folder) == {1, 2, 3, 4, 5, 6}
    assert row_numbers_in_files(outbox_folder) == {1, 2}

    # A row on its way to the validated table would land after its erasure: refused, nothing deleted.
    try:
        forget_subject(spark, warehouse, loop.action, SUBJECT, dry_run=False, by="test")
        raise AssertionError("a fixed row of the subject was not refused")
    except OperatorError as refused:
        assert refused.code == "QA-OPS-023" and "1 row(s)" in str(refused)
    assert loop.inbox().count() == 6
    loop.run_recycle()
    validated = loop.validated()
    assert [row[0] for row in validated] == [1, 2, 3]

    def forget(dry_run: bool = False):
        return forget_subject(spark, warehouse, loop.action, SUBJECT, dry_run=dry_run, by="test")

    dry = forget(dry_run=True)
    assert (dry.inbox_rows_by_status, dry.outbox_rows) == ({"quarantined": 1, "recycled": 2}, 2)
    assert dry.files_removed > 0  # the rows' earlier images, before their fixes, and their change data
    assert loop.inbox().count() == 6 and row_numbers_in_files(inbox_folder) == {1, 2, 3, 4, 5, 6}

    before_erasure = first_cursor(warehouse.delta_table(loop.action.quarantine.inbox_table), None)
    first = forget()
    assert (first.inbox_rows_by_status, first.outbox_rows) == ({"quarantined": 1, "recycled": 2}, 2)
    # The outbox stream has yet to read the erasure's change data: those files wait. The recycled stream read the
    # outbox's files when they were appended; the erasure's DELETE names them again, hidden rows and all, as no news.
    assert set(first.files_pending) == {"dq_orders/outbox"}, first
    remaining = loop.inbox().select(F.variant_get("_row_data", "$.row_no", "int").alias("row_no")).collect()
    assert sorted(row["row_no"] for row in remaining) == [2, 4, 6]
    outbox = spark.read.format("delta").load(str(outbox_folder))
    sent = outbox.select(F.variant_get("_row_data", "$.row_no", "int").alias("row_no")).collect()
    assert [row["row_no"] for row in sent] == [2]

    # The recycle reads past the erasure (the outbox's DELETE is skipped, nothing lands again), then the same
    # erasure again removes what waited for it.
    loop.run_recycle()
    assert loop.validated() == validated
    # The second pass from the UI's job, as an operator launches it.
    second = observed(loop, FORGET_JOB, {"forget_subject": {"config": {"source_table": SOURCE, "where": SUBJECT}}})
    assert (second["inbox_rows_erased_by_status"], second["outbox_rows_erased"]) == ({}, 0)
    assert second["files_removed"] > 0 and second["files_pending_by_stream"] == {}, second

    # An alert sensor that had not read the erasure's changes says once that they are gone, and goes on.
    inbox_table = warehouse.delta_table(loop.action.quarantine.inbox_table)
    alerts, after = inbox_alerts(inbox_table, loop.action.quarantine.inbox_table, before_erasure)
    assert [alert.kind for alert in alerts] == [CHANGES_REMOVED] and after.version == inbox_table.version()
    assert inbox_alerts(inbox_table, loop.action.quarantine.inbox_table, after)[0] == []
    assert row_numbers_in_files(inbox_folder) == {2, 4, 6}
    assert row_numbers_in_files(outbox_folder) == {2}
    assert files_holding_text(inbox_folder, MARKER) == [] and files_holding_text(outbox_folder, MARKER) == []
    # Other subjects' rows go on as before: one is fixed and lands, exactly once.
    loop.fix(4, order_id=4)
    loop.run_recycle()
    assert [row[0] for row in loop.validated()] == [1, 2, 3, 4]
    assert loop.validated()[:3] == validated


def observed(loop: Loop, job: str, ops_config: dict) -> dict:
    """The job's run, and the observation it records on the inbox asset."""
    result = loop.defs.resolve_job_def(job).execute_in_process(run_config={"ops": ops_config}, instance=loop.instance)
    assert result.success
    (observation,) = [
        event.event_specific_data.asset_observation
        for event in result.all_events
        if event.event_type_value == "ASSET_OBSERVATION"
    ]
    return {key: value.value for key, value in observation.metadata.items()}


def test_purge_physically_removes_purged_rows_from_the_files(spark, warehouse, tmp_path):
    loop = Loop(spark, warehouse, tmp_path, retention_days=0)
    loop.ingest(ROWS)
    discard_rows(spark, warehouse, loop.action, [loop.key_of(5)], reason="test order", by="test")
    inbox_folder = Path(warehouse.path(loop.action.quarantine.inbox_table))
    options = ["--config-dir", str(REPO_ROOT / "configs"), "--warehouse", warehouse.root]
    purge = [*options, "purge", "--source", "demo.bronze.orders", "--older-than-days", "0", "--physically"]

    plain = CliRunner().invoke(app, [*options, "purge", "--source", "demo.bronze.orders", "--older-than-days", "0"])
    assert plain.exit_code == 0 and "deleted 1 resolved row(s)" in plain.output, plain.output
    assert 5 in row_numbers_in_files(inbox_folder)  # deleted, but still in the files

    first = CliRunner().invoke(app, purge, env=WIDE)
    assert first.exit_code == 0 and "deleted 0 resolved row(s)" in first.output, first.output
    loop.run_recycle()  # the outbox stream reads past the purge
    second = observed(loop, PURGE_JOB, {"dq_orders_purge": {"config": {"physically": True}}})
    assert second["rows_purged"] == 0 and second["files_pending_by_stream"] == {}, second

    assert row_numbers_in_files(inbox_folder) == {1, 2, 3, 4, 6}
    assert files_holding_text(inbox_folder, MARKER) == []
    assert loop.inbox().count() == 5


def test_a_dlq_table_that_maps_its_columns_is_refused_before_anything_is_deleted(spark, warehouse, tmp_path):
    loop = Loop(spark, warehouse, tmp_path)
    loop.ingest(ROWS)
    outbox = warehouse.path(loop.action.quarantine.outbox_table)
    spark.sql(f"ALTER TABLE delta.`{outbox}` SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name')")
    try:
        forget_subject(spark, warehouse, loop.action, SUBJECT, dry_run=False, by="test")
        raise AssertionError("a table whose files name columns by physical names was not refused")
    except OperatorError as refused:
        assert refused.code == "QA-OPS-022" and loop.action.quarantine.outbox_table in str(refused)
    assert loop.inbox().count() == 6


def test_the_delta_log_keeps_no_statistics_of_a_rows_free_text(spark, warehouse, tmp_path):
    """Erased from every data file, a row would live on in the log's per-file minimum and maximum values; the DLQ
    tables keep statistics only of their keys, statuses and times."""
    loop = Loop(spark, warehouse, tmp_path)
    loop.ingest(ROWS)
    discard_rows(spark, warehouse, loop.action, [loop.key_of(5)], reason="customer 5 asked", by="ops-person")
    loop.fix(1, order_id=1)
    loop.run_recycle()
    for table in (loop.action.quarantine.inbox_table, loop.action.quarantine.outbox_table):
        log = Path(warehouse.path(table)) / "_delta_log"
        stats = [
            json.loads(action["add"]["stats"])
            for commit in sorted(log.glob("*.json"))
            for action in map(json.loads, commit.read_text().splitlines())
            if "add" in action and action["add"].get("stats")
        ]
        described = {name for found in stats for part in ("minValues", "nullCount") for name in found.get(part, {})}
        assert described and not described & set(FREE_TEXT_COLUMNS), (table, described)
    inbox_log = Path(warehouse.path(loop.action.quarantine.inbox_table)) / "_delta_log"
    assert files_holding_text(inbox_log, "customer 5 asked") == files_holding_text(inbox_log, "ops-person") == []
