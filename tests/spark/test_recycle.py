"""The recycle loop end to end on real Spark, Delta and Dagster: fix, sense, recycle, exactly once."""

from __future__ import annotations

import math
import shutil
import threading

import pytest
from builders import ORDERS_SCHEMA, orders_action
from dagster import SensorResult, SkipReason
from dlq_template import dlq_tables_from_template
from graph_driver import Loop

from quarantine_assets.config.models import Rule
from quarantine_assets.engine.spark.operator import discard_rows, fix_rows
from quarantine_assets.engine.spark.outbox import run_outbox
from quarantine_assets.engine.spark.recycled import run_recycled
from quarantine_assets.engine.spark.split import run_split
from quarantine_assets.errors import OperatorError


@pytest.fixture
def loop(spark, warehouse, tmp_path):
    return Loop(spark, warehouse, tmp_path)


def test_fixed_row_recycles_once_and_a_wrong_fix_comes_back_with_attempt_two(loop):
    loop.ingest([(1, 1, 10.0, "EUR"), (2, None, 5.0, "EUR"), (3, 3, -5.0, "USD")])
    first = loop.inbox_row(2)  # a rule without a message of its own says what was not true
    assert [error.asDict() for error in first["_dlq_errors"]] == [
        {"type": "expectation", "code": "valid_order_id", "message": "`order_id IS NOT NULL` is not true"}
    ]
    loop.fix(2, order_id=2)
    loop.fix(3, amount=-1.0)  # still wrong

    tick = loop.tick()
    assert isinstance(tick, SensorResult) and len(tick.run_requests) == 1
    loop.run_recycle()

    assert loop.validated() == [(1, 1, 10.0, "EUR"), (2, 2, 5.0, "EUR")]
    back = loop.inbox_row(3)
    assert (back["_dlq_status"], back["_dlq_attempt"]) == ("quarantined", 2)
    assert [failure["name"] for failure in back["_dlq_failed_rules"]] == ["non_negative_amount"]
    assert [error.asDict() for error in back["_dlq_errors"]] == [
        {"type": "expectation", "code": "non_negative_amount", "message": "an order amount is never negative"}
    ]
    landed = loop.inbox_row(2)  # fails no rule now; what failed before its fix is history, in the reason
    assert (landed["_dlq_status"], landed["_dlq_attempt"]) == ("recycled", 1)
    assert landed["_dlq_resolved_at"] is not None
    assert (landed["_dlq_failed_rules"], landed["_dlq_errors"]) == ([], [])
    assert landed["_dlq_reason"] == "landed on attempt 1; before its fix it failed: valid_order_id"

    loop.fix(3, amount=7.0)
    assert isinstance(loop.tick(), SensorResult)
    loop.run_recycle()
    assert loop.validated() == [(1, 1, 10.0, "EUR"), (2, 2, 5.0, "EUR"), (3, 3, 7.0, "USD")]

    # Retrying the recycle run changes nothing.
    inbox_version = loop.inbox().count(), sorted(r["_dlq_status"] for r in loop.inbox().collect())
    loop.run_recycle()
    assert loop.validated() == [(1, 1, 10.0, "EUR"), (2, 2, 5.0, "EUR"), (3, 3, 7.0, "USD")]
    assert (loop.inbox().count(), sorted(r["_dlq_status"] for r in loop.inbox().collect())) == inbox_version


def test_sensor_skips_with_a_reason_when_nothing_was_fixed(loop):
    loop.ingest([(1, None, 1.0, "EUR")])
    result = loop.tick()
    assert isinstance(result, SensorResult) and not result.run_requests
    assert "no row of demo.bronze.orders fixed" in result.skip_reason.skip_message
    assert isinstance(loop.tick(), SkipReason)


def test_two_identical_rows_both_fixed_give_two_validated_rows(loop):
    loop.ingest([(7, None, 1.0, "EUR"), (7, None, 1.0, "EUR")])
    keys = [row["_dlq_sk"] for row in loop.inbox().collect()]
    fix_rows(loop.spark, loop.warehouse, loop.action, keys, set_fields={"order_id": 70}, by="test")
    loop.run_recycle()
    assert loop.validated() == [(7, 70, 1.0, "EUR"), (7, 70, 1.0, "EUR")]


def test_row_fixed_twice_before_recycle_reaches_validated_once_with_the_last_fix(loop):
    loop.ingest([(1, None, 1.0, "EUR")])
    loop.fix(1, order_id=10)
    loop.fix(1, order_id=11)
    loop.run_recycle()
    loop.run_recycle()
    assert loop.validated() == [(1, 11, 1.0, "EUR")]


def recycled_counts(result) -> dict[str, int]:
    """The recycled asset's outcome counts, as its materialization shows them in the UI."""
    [recycled] = [
        event for event in result.get_asset_materialization_events() if event.asset_key.path[-1] == "recycled"
    ]
    shown = recycled.materialization.metadata
    return {name: shown[name].value for name in ("rows_landed", "rows_requarantined", "rows_exhausted")}


def test_attempt_cap_closes_a_row_that_keeps_failing(spark, warehouse, tmp_path):
    loop = Loop(spark, warehouse, tmp_path, max_attempts=1)
    loop.ingest([(1, 1, -1.0, "EUR")])
    loop.fix(1, amount=-2.0)
    recycle = loop.run_recycle()
    assert recycled_counts(recycle) == {"rows_landed": 0, "rows_requarantined": 0, "rows_exhausted": 1}
    row = loop.inbox_row(1)
    assert row["_dlq_status"] == "exhausted" and "cap 1" in row["_dlq_reason"]
    # The attempt is the last one made, as the reason counts it.
    assert row["_dlq_attempt"] == 1 and "each of its 1 attempt(s)" in row["_dlq_reason"]
    with pytest.raises(OperatorError) as refused:
        loop.fix(1, amount=2.0)
    assert refused.value.code == "QA-OPS-003"


def test_a_cap_lowered_below_a_rows_attempts_closes_it_with_its_own_count(spark, warehouse, tmp_path):
    Loop(spark, warehouse, tmp_path, max_attempts=3).ingest([(1, 1, -1.0, "EUR")])
    first = Loop(spark, warehouse, tmp_path, max_attempts=3)
    first.fix(1, amount=-2.0)
    recycle = first.run_recycle()
    assert recycled_counts(recycle) == {"rows_landed": 0, "rows_requarantined": 1, "rows_exhausted": 0}
    assert first.inbox_row(1)["_dlq_attempt"] == 2
    lowered = Loop(spark, warehouse, tmp_path, max_attempts=1)
    lowered.fix(1, amount=-3.0)
    recycle = lowered.run_recycle()
    assert recycled_counts(recycle) == {"rows_landed": 0, "rows_requarantined": 0, "rows_exhausted": 1}
    row = lowered.inbox_row(1)
    assert row["_dlq_status"] == "exhausted" and row["_dlq_attempt"] == 2
    assert "each of its 2 attempt(s) (cap 1)" in row["_dlq_reason"]


def test_payload_value_of_the_wrong_type_fails_as_payload_type_not_null(loop):
    loop.ingest([(1, None, 1.0, "EUR")])
    loop.fix(1, order_id=1, amount="lots")
    loop.run_recycle()
    row = loop.inbox_row(1)
    assert row["_dlq_status"] == "quarantined"
    assert "payload_type" in [failure["name"] for failure in row["_dlq_failed_rules"]]
    assert loop.validated() == []


@pytest.mark.parametrize(
    ("change", "code"),
    [
        (
            lambda loop, key: fix_rows(
                loop.spark, loop.warehouse, loop.action, ["nope"], set_fields={"order_id": 1}, by="t"
            ),
            "QA-OPS-001",
        ),
        (
            lambda loop, key: fix_rows(
                loop.spark,
                loop.warehouse,
                orders_action(name="dq_returns", source_table="demo.bronze.returns"),
                [key],
                set_fields={"order_id": 1},
                by="t",
            ),
            "QA-OPS-002",
        ),
        (
            lambda loop, key: fix_rows(
                loop.spark, loop.warehouse, loop.action, [key], set_fields={"colour": 1}, by="t"
            ),
            "QA-OPS-004",
        ),
        (
            lambda loop, key: discard_rows(loop.spark, loop.warehouse, loop.action, [key], reason=" ", by="t"),
            "QA-OPS-006",
        ),
        (
            lambda loop, key: fix_rows(
                loop.spark, loop.warehouse, loop.action, [key, key], set_fields={"order_id": 1}, by="t"
            ),
            "QA-OPS-014",
        ),
        (
            lambda loop, key: discard_rows(loop.spark, loop.warehouse, loop.action, [key, key], reason="dup", by="t"),
            "QA-OPS-014",
        ),
        (
            lambda loop, key: fix_rows(
                loop.spark, loop.warehouse, loop.action, [key], set_fields={"order_id": 1, "amount": math.nan}, by="t"
            ),
            "QA-OPS-015",
        ),
        (
            lambda loop, key: fix_rows(
                loop.spark,
                loop.warehouse,
                loop.action,
                [key],
                payload={"row_no": 1, "order_id": 1, "amount": -math.inf, "currency": "EUR"},
                by="t",
            ),
            "QA-OPS-015",
        ),
    ],
    ids=[
        "unknown-key",
        "other-source",
        "unknown-field",
        "discard-without-reason",
        "fix-names-a-key-twice",
        "discard-names-a-key-twice",
        "nan",
        "infinity-in-a-payload",
    ],
)
def test_refused_operator_change_has_a_code_and_changes_nothing(loop, change, code):
    loop.ingest([(1, None, 1.0, "EUR")])
    key = loop.key_of(1)
    inbox = loop.warehouse.path(loop.action.quarantine.inbox_table)
    version = loop.spark.sql(f"DESCRIBE HISTORY delta.`{inbox}`").first()["version"]
    with pytest.raises(OperatorError) as refused:
        change(loop, key)
    assert refused.value.code == code
    assert loop.spark.sql(f"DESCRIBE HISTORY delta.`{inbox}`").first()["version"] == version


def test_fixing_a_recycled_row_is_refused(loop):
    loop.ingest([(1, None, 1.0, "EUR")])
    loop.fix(1, order_id=1)
    loop.run_recycle()
    with pytest.raises(OperatorError) as refused:
        loop.fix(1, order_id=2)
    assert refused.value.code == "QA-OPS-003"
    assert loop.validated() == [(1, 1, 1.0, "EUR")]


def test_discarded_row_never_recycles(loop):
    loop.ingest([(1, None, 1.0, "EUR")])
    discard_rows(loop.spark, loop.warehouse, loop.action, [loop.key_of(1)], reason="duplicate order", by="test")
    loop.run_recycle()
    row = loop.inbox_row(1)
    assert (row["_dlq_status"], row["_dlq_reason"]) == ("discarded", "duplicate order")
    assert loop.validated() == []


def test_fix_racing_a_running_split_fails_neither_side(loop):
    loop.ingest([(n, None, 1.0, "EUR") for n in range(5)])
    keys = [row["_dlq_sk"] for row in loop.inbox().collect()]
    loop.spark.createDataFrame(
        [(100 + n, None if n % 2 else n, 1.0, "EUR") for n in range(400)], ORDERS_SCHEMA
    ).write.format("delta").mode("append").save(str(loop.warehouse.path(loop.action.source.table)))

    failures = []

    def split():
        try:
            run_split(loop.spark, loop.action, loop.warehouse, run_id="racing-split")
        except Exception as error:  # the assertion below reports it
            failures.append(error)

    racer = threading.Thread(target=split)
    racer.start()
    for amount in (2.0, 3.0, 4.0):
        fix_rows(
            loop.spark, loop.warehouse, loop.action, keys, set_fields={"order_id": 1, "amount": amount}, by="racer"
        )
    racer.join()

    assert failures == []
    statuses = [row["_dlq_status"] for row in loop.inbox().collect()]
    assert statuses.count("fixed") == 5 and statuses.count("quarantined") == 200
    assert len(loop.validated()) == 200


def test_odd_column_names_survive_the_round_trip_through_the_dlq(spark, warehouse):
    schema = "`row.no` INT, `unit.price` DOUBLE, `o'brien` STRING"
    rules = (Rule(name="non_negative_price", expression="`unit.price` >= 0"),)
    action = orders_action(name="dq_odd", source_table="demo.bronze.odd", rules=rules)
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)
    spark.createDataFrame([(1, -2.5, "x"), (2, 3.0, "y")], schema).write.format("delta").save(
        str(warehouse.path(action.source.table))
    )
    run_split(spark, action, warehouse, run_id="split")
    key = spark.read.format("delta").load(str(warehouse.path(action.quarantine.inbox_table))).first()["_dlq_sk"]
    fix_rows(spark, warehouse, action, [key], set_fields={"unit.price": 2.5}, by="test")
    run_outbox(spark, action, warehouse, run_id="recycle")
    run_recycled(spark, action, warehouse, run_id="recycle")

    validated = spark.read.format("delta").load(str(warehouse.path(action.target_table)))
    assert sorted(tuple(row) for row in validated.collect()) == [(1, 2.5, "x"), (2, 3.0, "y")]


def test_operator_job_fixes_rows_from_the_ui(loop):
    loop.ingest([(1, None, 1.0, "EUR")])
    command = {
        "source_table": loop.action.quarantine.source_table,
        "keys": [loop.key_of(1)],
        "set_fields": '{"order_id": 5}',
        "by": "ui-user",
    }
    job = loop.defs.resolve_job_def("dlq_operator")
    assert job.execute_in_process(run_config={"ops": {"apply_dlq_command": {"config": command}}}).success

    row = loop.inbox_row(1)
    assert (row["_dlq_status"], row["_dlq_updated_by"]) == ("fixed", "ui-user")
    loop.run_recycle()
    assert loop.validated() == [(1, 5, 1.0, "EUR")]


def test_replayed_outbox_after_a_checkpoint_reset_lands_no_row_twice(loop):
    loop.ingest([(1, None, 1.0, "EUR")])
    loop.fix(1, order_id=1)
    loop.run_recycle()
    shutil.rmtree(loop.warehouse.checkpoint(loop.action.key, "recycled"))

    replay = loop.run_recycle()

    assert loop.validated() == [(1, 1, 1.0, "EUR")]
    check = {e.check_name: e for e in replay.get_asset_check_evaluations()}["recycled_lands_once"]
    assert check.passed
    assert check.metadata["rows_already_landed"].value == 1 and check.metadata["rows_landed"].value == 0
    assert loop.inbox_row(1)["_dlq_resolved_at"] is not None
