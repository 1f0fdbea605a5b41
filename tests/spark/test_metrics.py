"""The DLQ's metrics table: a row per run, step and source, appended by the Dagster steps, once each."""

from __future__ import annotations

from graph_driver import Loop

from quarantine_assets.config.models import metrics_table
from quarantine_assets.defs.retention_job import PURGE_JOB
from quarantine_assets.engine.spark.metrics import record_step


def test_every_step_appends_what_it_did_and_the_backlog_after_it_once(spark, warehouse, tmp_path):
    loop = Loop(spark, warehouse, tmp_path, retention_days=0)
    split_run = loop.ingest([(1, 1, 10.0, "EUR"), (2, None, 5.0, "EUR"), (3, 3, -5.0, "XXX")]).run_id
    loop.fix(2, order_id=2)
    loop.run_recycle()
    purge = {"ops": {f"{loop.action.key}_purge": {"config": {"dry_run": False}}}}
    assert loop.defs.resolve_job_def(PURGE_JOB).execute_in_process(run_config=purge, instance=loop.instance).success

    table = warehouse.path(metrics_table(loop.action.quarantine.inbox_table))
    rows = spark.read.format("delta").load(table).orderBy("recorded_at").collect()
    assert [(row["step"], row["rows"], row["backlog"]) for row in rows] == [
        (
            "split",
            {"read": 3, "validated": 1, "quarantined": 2, "dropped": 0, "files_set_aside": 0},
            {"quarantined": 2},
        ),
        ("outbox", {"sent": 1}, {"quarantined": 1, "recycled": 1}),
        (
            "recycled",
            {"landed": 1, "requarantined": 0, "exhausted": 0, "already_landed": 0},
            {"quarantined": 1, "recycled": 1},
        ),
        ("purge", {"purged": 1, "purged_recycled": 1}, {"quarantined": 1}),
    ]
    split = rows[0]
    assert (split["run_id"], split["action"], split["source_table"]) == (
        split_run,
        loop.action.owner,
        loop.action.quarantine.source_table,
    )
    assert split["failures_by_rule"] == {"valid_order_id": 1, "non_negative_amount": 1, "known_currency": 1}
    assert split["failures_by_code"] == split["failures_by_rule"]
    assert all(row["oldest_quarantined_seconds"] >= 0 for row in rows)

    # A retried step appends nothing: its row is there already.
    record_step(spark, warehouse, loop.action, split_run, "split", {"read": 99})
    assert spark.read.format("delta").load(table).count() == len(rows)
