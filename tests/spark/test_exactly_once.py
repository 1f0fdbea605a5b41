"""The windows between two commits of the recycle path, and the identity of an action's writes: each one
opened by a fault injected at that point (a raise, as a kill would stop the step), then the step re-run."""

from __future__ import annotations

import shutil
from datetime import timedelta

import pytest
from builders import ORDER_RULES, ORDERS_SCHEMA, orders_action
from dlq_template import dlq_tables_from_template
from faults import Killed, kill_once
from graph_driver import Loop
from pyspark.sql import functions as F

from quarantine_assets.config.models import Rule
from quarantine_assets.engine.spark import outbox, recycled, split, streams
from quarantine_assets.engine.spark.operator import fix_rows
from quarantine_assets.engine.spark.recycled import run_recycled
from quarantine_assets.engine.spark.retention import purge_resolved
from quarantine_assets.engine.spark.split import SPLIT_STREAM, run_split, split_batch
from quarantine_assets.engine.spark.streams import BatchCommit, StageRun
from quarantine_assets.errors import DataQualityFailure


def recycle(loop) -> None:
    """The recycle path's two steps, as the engine runs them, so that a kill surfaces as itself."""
    outbox.run_outbox(loop.spark, loop.action, loop.warehouse, "killed run")
    run_recycled(loop.spark, loop.action, loop.warehouse, "killed run")


@pytest.fixture
def loop(spark, warehouse, tmp_path):
    return Loop(spark, warehouse, tmp_path)


def test_a_kill_before_the_landing_append_then_a_purge_loses_no_fixed_row(loop, spark, warehouse, monkeypatch):
    """The row is stamped landed only once it has landed: a purge in between finds nothing to delete."""
    loop.ingest([(1, None, 1.0, "EUR")])
    loop.fix(1, order_id=1)
    kill_once(monkeypatch, recycled, "append_once")
    with pytest.raises(Killed):
        recycle(loop)
    purged = purge_resolved(spark, warehouse, loop.action, timedelta(0), dry_run=False, by="test")
    loop.run_recycle()

    assert purged.rows == 0
    assert loop.validated() == [(1, 1, 1.0, "EUR")]
    assert loop.inbox_row(1)["_dlq_resolved_at"] is not None


def test_a_kill_between_the_landing_append_and_its_stamp_then_a_reset_checkpoint_lands_once(
    loop, warehouse, monkeypatch
):
    """The validated table's log says the landing committed: the row is stamped, not appended again."""
    loop.ingest([(1, None, 1.0, "EUR")])
    loop.fix(1, order_id=1)
    kill_once(monkeypatch, recycled, "_stamp_landed")
    with pytest.raises(Killed):
        recycle(loop)
    shutil.rmtree(warehouse.checkpoint(loop.action.key, "recycled"))
    loop.run_recycle()

    assert loop.validated() == [(1, 1, 1.0, "EUR")]
    row = loop.inbox_row(1)
    assert row["_dlq_resolved_at"] is not None and row["_dlq_reason"].startswith("landed on attempt 1")


def test_a_rerun_after_a_kill_before_the_stamp_keeps_the_first_verdict_of_a_rule_that_draws_at_random(
    spark, warehouse, monkeypatch
):
    """The re-run of the recycled batch judges it again; what the first run settled and landed stays so."""
    action = orders_action(rules=ORDER_RULES + (Rule(name="coin", expression="rand() < 0.5"),))
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)
    rows = [(n, None, 1.0, "EUR") for n in range(40)]  # each fails valid_order_id
    spark.createDataFrame(rows, ORDERS_SCHEMA).write.format("delta").save(str(warehouse.path(action.source.table)))
    run_split(spark, action, warehouse, "run")
    inbox = spark.read.format("delta").load(str(warehouse.path(action.quarantine.inbox_table)))
    fix_rows(spark, warehouse, action, [row["_dlq_sk"] for row in inbox.collect()], set_fields={"order_id": 1}, by="op")
    outbox.run_outbox(spark, action, warehouse, "run")
    kill_once(monkeypatch, recycled, "_stamp_landed")
    with pytest.raises(Killed):
        run_recycled(spark, action, warehouse, "killed")
    report = run_recycled(spark, action, warehouse, "rerun")

    validated = spark.read.format("delta").load(str(warehouse.path(action.target_table))).select("row_no").collect()
    inbox = spark.read.format("delta").load(str(warehouse.path(action.quarantine.inbox_table)))
    still_open = inbox.where(F.col("_dlq_resolved_at").isNull()).select(F.variant_get("_row_data", "$.row_no", "int"))
    landed, waiting = [row[0] for row in validated], [row[0] for row in still_open.collect()]
    assert sorted(landed + waiting) == list(range(40))
    assert report.rows_appended == report.rows_landed == len(landed)
    assert inbox.where(F.col("_dlq_resolved_at").isNotNull() & (F.col("_dlq_status") == "recycled")).count() == len(
        landed
    )


@pytest.mark.parametrize("named_fixes", [outbox._NAMED_FIXES, 0], ids=["update naming the fix", "merge"])
def test_a_row_fixed_again_while_the_outbox_runs_lands_once_with_its_last_fix(
    loop, spark, warehouse, monkeypatch, named_fixes
):
    """The outbox read the first fix; the operator fixed the row again before its mark, whether the mark names
    the batch's few fixes or joins the batch."""
    monkeypatch.setattr(outbox, "_NAMED_FIXES", named_fixes)
    loop.ingest([(1, None, 1.0, "EUR")])
    loop.fix(1, order_id=10)
    key = loop.key_of(1)
    mark = outbox._mark_recycled
    fixed_again = []

    def operator_fixes_again_first(*args, **kwargs):
        if not fixed_again:
            fixed_again.append(fix_rows(spark, warehouse, loop.action, [key], set_fields={"order_id": 11}, by="op"))
        return mark(*args, **kwargs)

    monkeypatch.setattr(outbox, "_mark_recycled", operator_fixes_again_first)
    loop.run_recycle()
    loop.run_recycle()

    assert loop.validated() == [(1, 11, 1.0, "EUR")]
    sent = spark.read.format("delta").load(str(warehouse.path(loop.action.quarantine.outbox_table)))
    assert sent.count() == 1


def test_a_kill_between_the_outbox_marking_and_its_append_sends_the_row_once(loop, spark, warehouse, monkeypatch):
    loop.ingest([(1, None, 1.0, "EUR")])
    loop.fix(1, order_id=1)
    kill_once(monkeypatch, outbox, "append_to_dlq_table")
    with pytest.raises(Killed):
        recycle(loop)
    loop.run_recycle()

    assert loop.validated() == [(1, 1, 1.0, "EUR")]
    sent = spark.read.format("delta").load(str(warehouse.path(loop.action.quarantine.outbox_table)))
    assert sent.count() == 1


def test_a_kill_between_the_outbox_marking_and_its_append_then_a_lost_checkpoint_sends_the_row_once(
    loop, spark, warehouse, monkeypatch
):
    """The batch that marked the row will not be replayed: the stream starts again from the inbox's snapshot,
    as after its change files were vacuumed, and the row is sent from there."""
    loop.ingest([(1, None, 1.0, "EUR")])
    loop.fix(1, order_id=1)
    kill_once(monkeypatch, outbox, "append_to_dlq_table")
    with pytest.raises(Killed):
        outbox.run_outbox(spark, loop.action, warehouse, "killed run")
    assert loop.inbox_row(1)["_dlq_status"] == "recycled"
    shutil.rmtree(warehouse.checkpoint(loop.action.key, "outbox"))

    loop.run_recycle()

    assert loop.validated() == [(1, 1, 1.0, "EUR")]
    assert spark.read.format("delta").load(warehouse.path(loop.action.quarantine.outbox_table)).count() == 1


def test_a_recycled_row_without_its_inbox_row_fails_the_batch_with_a_code(loop, spark, warehouse):
    """Unaccounted rows are retried, never committed past."""
    loop.ingest([(1, None, 1.0, "EUR")])
    loop.fix(1, order_id=1)
    outbox.run_outbox(spark, loop.action, warehouse, "run")
    spark.sql(f"DELETE FROM delta.`{warehouse.path(loop.action.quarantine.inbox_table)}`")

    with pytest.raises(DataQualityFailure) as refused:
        run_recycled(spark, loop.action, warehouse, "run")
    assert refused.value.code == "QA-DQ-003"
    assert "neither landed nor back in the inbox" in str(refused.value)
    with pytest.raises(DataQualityFailure):  # the checkpoint did not move past it
        run_recycled(spark, loop.action, warehouse, "again")
    assert loop.validated() == []


def test_a_reset_checkpoint_replays_rows_that_failed_again_since_without_failing(spark, warehouse, tmp_path):
    """The replayed outbox holds the row's first attempts; the inbox has it at its third."""
    loop = Loop(spark, warehouse, tmp_path, max_attempts=5)
    loop.ingest([(1, 1, -1.0, "EUR")])
    for amount in (-2.0, -3.0):
        loop.fix(1, amount=amount)
        loop.run_recycle()
    assert loop.inbox_row(1)["_dlq_attempt"] == 3
    shutil.rmtree(warehouse.checkpoint(loop.action.key, "recycled"))

    loop.run_recycle()

    row = loop.inbox_row(1)
    assert (row["_dlq_status"], row["_dlq_attempt"]) == ("quarantined", 3)
    assert loop.validated() == []


def test_a_kill_after_the_stamp_then_a_purge_lets_the_replay_find_the_row_accounted_for(
    loop, spark, warehouse, monkeypatch
):
    """Stamped landed, then purged before the batch was committed in the checkpoint: nothing lands twice."""
    loop.ingest([(1, None, 1.0, "EUR")])
    loop.fix(1, order_id=1)
    outbox.run_outbox(spark, loop.action, warehouse, "run")
    kill_once(monkeypatch, streams, "_write_json")  # the batch's report: after every commit of the batch
    with pytest.raises(Killed):
        run_recycled(spark, loop.action, warehouse, "killed run")
    purged = purge_resolved(spark, warehouse, loop.action, timedelta(0), dry_run=False, by="test")
    assert purged.rows == 1

    report = run_recycled(spark, loop.action, warehouse, "rerun")

    # The replay reports what its batch did; Delta skips the append it had committed.
    assert report.rows_landed == 1 and report.rows_appended == 1
    assert loop.validated() == [(1, 1, 1.0, "EUR")]


def test_a_split_whose_inbox_commit_lost_a_row_fails_with_both_counts_and_stops_there(
    loop, spark, warehouse, monkeypatch
):
    """A fault that drops a rejected row on its way into the inbox commit: the promise is checked on Delta's
    own counts, before the checkpoint commits the batch."""
    original = split.append_to_dlq_table

    def losing_a_row(spark, rows, *args):
        return original(spark, rows.limit(rows.count() - 1), *args)

    monkeypatch.setattr(split, "append_to_dlq_table", losing_a_row)
    spark.createDataFrame([(1, 1, 1.0, "EUR"), (2, None, 1.0, "EUR"), (3, 3, -1.0, "EUR")], ORDERS_SCHEMA).write.format(
        "delta"
    ).save(str(warehouse.path(loop.action.source.table)))
    for _ in range(2):  # the checkpoint does not move past the batch
        with pytest.raises(DataQualityFailure) as refused:
            run_split(spark, loop.action, warehouse, "run")
        assert refused.value.code == "QA-DQ-002"
        assert "batch 0 of dq_orders read 3 row(s), but its validated commit wrote 1 and its inbox commit 1" in str(
            refused.value
        )


def test_a_landing_whose_append_lost_a_row_fails_the_batch_before_stamping_it(loop, spark, warehouse, monkeypatch):
    original = recycled.append_once

    def losing_every_row(rows, *args):
        return original(rows.limit(0), *args)

    loop.ingest([(1, None, 1.0, "EUR")])
    loop.fix(1, order_id=1)
    outbox.run_outbox(spark, loop.action, warehouse, "run")
    monkeypatch.setattr(recycled, "append_once", losing_every_row)
    with pytest.raises(DataQualityFailure) as refused:
        run_recycled(spark, loop.action, warehouse, "run")
    assert refused.value.code == "QA-DQ-003"
    assert "1 row(s) landed, but the validated commit wrote 0" in str(refused.value)
    assert loop.inbox_row(1)["_dlq_resolved_at"] is None


def test_an_action_moved_to_another_pipeline_replays_a_batch_under_the_same_identity(spark, warehouse):
    """A crash after both commits and before the checkpoint's; the action then moved (`transfer-claim`)."""
    from builders import orders_action
    from dlq_template import dlq_tables_from_template

    action = orders_action()
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)
    rows = [(1, 1, 1.0, "EUR"), (2, None, 1.0, "EUR")]
    spark.createDataFrame(rows, ORDERS_SCHEMA).write.format("delta").save(str(warehouse.path(action.source.table)))
    batch = spark.read.format("delta").load(str(warehouse.path(action.source.table)))
    split_batch(
        StageRun(spark, action, warehouse, "before the move"),
        batch,
        BatchCommit.of(action, SPLIT_STREAM, "stream-1", 0),
    )
    moved = action.model_copy(update={"pipeline": "elsewhere"})
    replay = split_batch(
        StageRun(spark, moved, warehouse, "after the move"), batch, BatchCommit.of(moved, SPLIT_STREAM, "stream-1", 0)
    )

    validated = spark.read.format("delta").load(str(warehouse.path(action.target_table)))
    inbox = spark.read.format("delta").load(str(warehouse.path(action.quarantine.inbox_table)))
    assert (validated.count(), inbox.count()) == (1, 1)
    assert (replay.rows_read, replay.rows_validated, replay.rows_held_in_inbox) == (2, 1, 1)
