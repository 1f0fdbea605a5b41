"""The promise as a property, over seeded random draws: rule sets (some read the clock, some draw at random),
batches with NULLs, and a fault in the split and one in the recycle path. After each draw, every input row
is in exactly one of the validated table and the open inbox, and each fixed row that landed, landed once,
with the payload of its last fix."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest
from builders import ORDERS_SCHEMA, orders_action
from dlq_template import dlq_tables_from_template
from faults import Killed, kill_once
from pyspark.sql import functions as F

from quarantine_assets.config.models import Rule
from quarantine_assets.engine.lake.tables import Warehouse
from quarantine_assets.engine.spark import outbox, recycled, split
from quarantine_assets.engine.spark.operator import fix_rows

RULE_POOL = (
    Rule(name="valid_order_id", expression="order_id IS NOT NULL"),
    Rule(name="non_negative_amount", expression="amount >= 0"),
    Rule(name="known_currency", expression="currency IN ('EUR', 'USD')"),
    Rule(name="coin", expression="rand() < 0.6"),
    Rule(name="uuid_half", expression="uuid() < 'b'"),
    # Its verdict on a row flips every 100 ms: two queries judging one batch disagree on about half of it.
    Rule(name="clock_parity", expression="(unix_millis(current_timestamp()) DIV 100 + row_no) % 2 = 0"),
)
# Where the split is stopped: (module, the function its next step calls), and whether the source's data
# files are deleted before the re-run (a vacuum, or a landing folder emptied).
SPLIT_FAULTS = (
    None,
    ("_append_validated", False),
    ("append_to_dlq_table", False),
    ("append_to_dlq_table", True),
    ("_refuse_unaccounted", False),
)
RECYCLE_FAULTS = (
    None,
    "fixed again during the outbox",
    (outbox, "append_to_dlq_table"),
    (recycled, "append_once"),
    (recycled, "_stamp_landed"),
)
FIX = {"order_id": 7, "amount": 1.0, "currency": "EUR"}
FIX_AGAIN = {"order_id": 8}
DRAWS = 5


@pytest.mark.parametrize("draw", range(DRAWS))
def test_every_row_is_validated_once_or_open_in_the_inbox_whatever_the_rules_and_faults(
    spark, tmp_path, monkeypatch, draw
):
    rng = random.Random(f"partition/{draw}")
    warehouse = Warehouse(tmp_path)
    rules = tuple(rng.sample(RULE_POOL, rng.randint(1, 4)))
    action = orders_action(rules=rules)
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)
    sent = [
        (
            n,
            rng.choice([None, rng.randint(1, 5)]),
            rng.choice([None, -1.0, 0.0, 12.5]),
            rng.choice([None, "EUR", "USD", "XXX"]),
        )
        for n in range(rng.randint(30, 80))
    ]
    source = warehouse.path(action.source.table)
    spark.createDataFrame(sent, ORDERS_SCHEMA).write.format("delta").save(str(source))

    with monkeypatch.context() as patched:
        fault = SPLIT_FAULTS[draw % len(SPLIT_FAULTS)]
        if fault:
            kill_once(patched, split, fault[0])
        try:
            split.run_split(spark, action, warehouse, "faulted")
        except Killed:
            if fault[1]:
                for data_file in Path(source).glob("*.parquet"):
                    data_file.unlink()
    split.run_split(spark, action, warehouse, "rerun")
    assert_partition(spark, warehouse, action, sent)

    open_now = open_rows(spark, warehouse, action)
    fixed = {row_no: dict(FIX) for row_no in rng.sample(open_now, min(3, len(open_now)))}
    keys = {row_no: key_of(spark, warehouse, action, row_no) for row_no in fixed}
    fix_rows(spark, warehouse, action, list(keys.values()), set_fields=FIX, by="operator")
    with monkeypatch.context() as patched:
        fault = RECYCLE_FAULTS[draw % len(RECYCLE_FAULTS)]
        if fault == "fixed again during the outbox" and keys:
            again = next(iter(keys))
            fixed[again] |= FIX_AGAIN
            fix_again_before(
                patched, lambda: fix_rows(spark, warehouse, action, [keys[again]], set_fields=FIX_AGAIN, by="op")
            )
        elif fault and fault != "fixed again during the outbox":
            kill_once(patched, *fault)
        try:
            recycle(spark, warehouse, action)
        except Killed:
            pass
    recycle(spark, warehouse, action)
    recycle(spark, warehouse, action)

    validated = assert_partition(spark, warehouse, action, sent)
    for row_no, fields in fixed.items():
        if row_no in validated:
            assert validated[row_no] == (row_no, fields["order_id"], fields["amount"], fields["currency"])


def fix_again_before(patched, fix_again) -> None:
    """The operator's second fix lands between the outbox's read of the change feed and its MERGE."""
    mark = outbox._mark_recycled
    done = []

    def fixed_again_first(*args, **kwargs):
        if not done:
            done.append(fix_again())
        return mark(*args, **kwargs)

    patched.setattr(outbox, "_mark_recycled", fixed_again_first)


def recycle(spark, warehouse, action) -> None:
    outbox.run_outbox(spark, action, warehouse, "recycle")
    recycled.run_recycled(spark, action, warehouse, "recycle")


def assert_partition(spark, warehouse, action, sent) -> dict[int, tuple]:
    """Every sent row is validated once or open in the inbox, never both; returns the validated rows by number."""
    rows = spark.read.format("delta").load(str(warehouse.path(action.target_table))).collect()
    validated = Counter(row["row_no"] for row in rows)
    open_now = Counter(open_rows(spark, warehouse, action))
    assert validated + open_now == Counter(row[0] for row in sent)
    return {row["row_no"]: tuple(row) for row in rows}


def inbox(spark, warehouse, action):
    return spark.read.format("delta").load(str(warehouse.path(action.quarantine.inbox_table)))


def open_rows(spark, warehouse, action) -> list[int]:
    row_no = F.variant_get("_row_data", "$.row_no", "int")
    still_open = F.col("_dlq_resolved_at").isNull() & (F.col("_dlq_status") != "discarded")
    return sorted(row[0] for row in inbox(spark, warehouse, action).where(still_open).select(row_no).collect())


def key_of(spark, warehouse, action, row_no: int) -> str:
    row = inbox(spark, warehouse, action).where(F.variant_get("_row_data", "$.row_no", "int") == row_no).first()
    return row["_dlq_sk"]
