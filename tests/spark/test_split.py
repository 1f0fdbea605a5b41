"""The split on real Spark and Delta: partition, exactly once, identical rows kept."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from urllib.parse import urlparse

import pytest
from builders import ORDERS_SCHEMA, orders_action
from dlq_template import dlq_tables_from_template
from graph_driver import Loop
from pyspark.sql import functions as F

from quarantine_assets.config.models import Rule
from quarantine_assets.defs.definitions import SPLIT_JOB
from quarantine_assets.engine.spark.split import SPLIT_STREAM, run_split, split_batch
from quarantine_assets.engine.spark.streams import BatchCommit, StageRun
from quarantine_assets.errors import DataQualityFailure, MissingTableError


def append_source(spark, warehouse, action, rows):
    spark.createDataFrame(rows, ORDERS_SCHEMA).write.format("delta").mode("append").save(
        str(warehouse.path(action.source.table))
    )


def source_batch(spark, warehouse, action, rows):
    """The rows as the split's stream reads them: from the source table's data files."""
    append_source(spark, warehouse, action, rows)
    return spark.read.format("delta").load(str(warehouse.path(action.source.table)))


def random_orders(rng: random.Random, first_row_no: int, count: int):
    return [
        (
            first_row_no + n,
            rng.choice([None, rng.randint(1, 5)]),
            rng.choice([None, -1.0, 0.0, 12.5]),
            rng.choice([None, "EUR", "USD", "XXX"]),
        )
        for n in range(count)
    ]


def validated_rows(spark, warehouse, action):
    rows = spark.read.format("delta").load(str(warehouse.path(action.target_table))).collect()
    return [tuple(row) for row in rows]


def inbox_slice(spark, warehouse, action):
    return (
        spark.read.format("delta")
        .load(str(warehouse.path(action.quarantine.inbox_table)))
        .where(F.col("_dlq_source_table") == action.quarantine.source_table)
    )


def inbox_payloads(spark, warehouse, action):
    """Turn `_row_data` back into tuples, by name and type, to compare with the input."""
    return [
        tuple(row)
        for row in inbox_slice(spark, warehouse, action)
        .select(
            F.variant_get("_row_data", "$.row_no", "int"),
            F.variant_get("_row_data", "$.order_id", "int"),
            F.variant_get("_row_data", "$.amount", "double"),
            F.variant_get("_row_data", "$.currency", "string"),
        )
        .collect()
    ]


def inbox_payload(record) -> tuple:
    payload = json.loads(record["_row_data"].toJson())
    return tuple(payload.get(name) for name in ("row_no", "order_id", "amount", "currency"))


def passes(row) -> bool:
    _, order_id, amount, currency = row
    return order_id is not None and amount is not None and amount >= 0 and currency in ("EUR", "USD")


def test_validated_and_inbox_partition_random_batches_including_nulls(spark, warehouse):
    action = orders_action()
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)
    rng = random.Random(7)
    sent = []
    for batch in range(3):
        rows = random_orders(rng, batch * 1000, rng.randint(20, 60))
        sent += rows
        append_source(spark, warehouse, action, rows)
        run_split(spark, action, warehouse, run_id=f"run-{batch}")

    validated = validated_rows(spark, warehouse, action)
    quarantined = inbox_payloads(spark, warehouse, action)
    assert Counter(validated) + Counter(quarantined) == Counter(sent)
    assert not {r[0] for r in validated} & {r[0] for r in quarantined}
    assert all(passes(row) for row in validated)
    assert not any(passes(row) for row in quarantined)


def test_null_rule_result_goes_to_inbox_and_is_named(spark, warehouse):
    action = orders_action()
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)
    append_source(spark, warehouse, action, [(1, 10, None, "EUR")])
    report = run_split(spark, action, warehouse, run_id="run")

    record = inbox_slice(spark, warehouse, action).first()
    assert report.rows_quarantined == 1 and report.failures_per_rule["non_negative_amount"] == 1
    assert [failure["name"] for failure in record["_dlq_failed_rules"]] == ["non_negative_amount"]
    assert record["_dlq_status"] == "quarantined"
    assert record["_dlq_attempt"] == 1 and record["_dlq_run_id"] == "run"
    assert record["_dlq_action"] == "demo/orders/dq_orders"
    # NULL survives the VARIANT round trip as NULL, and types are kept.
    assert (
        inbox_slice(spark, warehouse, action).select(F.schema_of_variant("_row_data")).first()[0]
        == "OBJECT<amount: VOID, currency: STRING, order_id: BIGINT, row_no: BIGINT>"
    )


def test_a_delta_sources_inbox_row_names_the_data_file_that_holds_it_and_when_it_arrived(spark, warehouse):
    action = orders_action()
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)
    append_source(spark, warehouse, action, [(1, 10, -1.0, "EUR"), (2, 20, 1.0, "EUR")])
    append_source(spark, warehouse, action, [(3, None, 3.0, "USD"), (4, 40, 4.0, "XXX")])
    run_split(spark, action, warehouse, run_id="run")

    records = inbox_slice(spark, warehouse, action).collect()
    assert len(records) == 3
    for record in records:
        data_file = Path(urlparse(record["_dlq_source_file"]).path)
        assert data_file.parent == Path(warehouse.path(action.source.table))
        original = [tuple(row) for row in spark.read.parquet(str(data_file)).collect()]
        assert inbox_payload(record) in original
        assert abs(record["_dlq_arrived_at"].timestamp() - data_file.stat().st_mtime) < 0.01
        assert record["_dlq_arrived_at"] <= record["_dlq_timestamp"]


def test_rerun_without_new_input_adds_nothing(spark, warehouse):
    action = orders_action()
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)
    append_source(spark, warehouse, action, random_orders(random.Random(1), 0, 30))
    first = run_split(spark, action, warehouse, run_id="first")
    second = run_split(spark, action, warehouse, run_id="second")

    assert first.rows_read == 30 and second.rows_read == 0
    assert len(validated_rows(spark, warehouse, action)) == first.rows_validated
    assert inbox_slice(spark, warehouse, action).count() == first.rows_quarantined


def test_replaying_a_batch_after_a_crash_adds_nothing(spark, warehouse):
    """A crash after the writes but before the checkpoint commit replays the same batch id."""
    action = orders_action()
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)
    batch = source_batch(spark, warehouse, action, random_orders(random.Random(2), 0, 40))
    first = split_batch(
        StageRun(spark, action, warehouse, "crashed"), batch, BatchCommit.of(action, SPLIT_STREAM, "stream-1", 0)
    )
    replay = split_batch(
        StageRun(spark, action, warehouse, "replay"), batch, BatchCommit.of(action, SPLIT_STREAM, "stream-1", 0)
    )

    assert len(validated_rows(spark, warehouse, action)) == first.rows_validated
    assert inbox_slice(spark, warehouse, action).count() == first.rows_quarantined
    assert first.rows_quarantined > 0
    # The replay reports what the first commits wrote, so its rows are still accounted for.
    assert (replay.rows_read, replay.rows_validated, replay.rows_held_in_inbox) == (
        40,
        first.rows_validated,
        first.rows_quarantined,
    )


def test_identical_bad_rows_in_two_batches_and_one_batch_are_all_kept(spark, warehouse):
    action = orders_action()
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)
    bad = (1, None, 5.0, "EUR")
    append_source(spark, warehouse, action, [bad, bad])
    run_split(spark, action, warehouse, run_id="one")
    append_source(spark, warehouse, action, [bad])
    run_split(spark, action, warehouse, run_id="two")

    keys = [row["_dlq_sk"] for row in inbox_slice(spark, warehouse, action).collect()]
    assert len(keys) == 3 and len(set(keys)) == 3


def test_two_sources_share_one_dlq_without_touching_each_other(spark, warehouse):
    orders = orders_action()
    returns = orders_action(name="dq_returns", source_table="demo.bronze.returns")
    dlq_tables_from_template(spark, warehouse, orders.quarantine.inbox_table)
    append_source(spark, warehouse, orders, [(1, None, 1.0, "EUR")])
    append_source(spark, warehouse, returns, [(1, None, 1.0, "EUR"), (2, None, 1.0, "EUR")])
    run_split(spark, orders, warehouse, run_id="o")
    run_split(spark, returns, warehouse, run_id="r")

    assert inbox_slice(spark, warehouse, orders).count() == 1
    assert inbox_slice(spark, warehouse, returns).count() == 2


def test_missing_inbox_fails_before_anything_is_written(spark, warehouse):
    action = orders_action()
    append_source(spark, warehouse, action, [(1, 1, 1.0, "EUR")])
    with pytest.raises(MissingTableError) as raised:
        run_split(spark, action, warehouse, run_id="run")

    assert raised.value.code == "QA-TBL-001"
    assert "demo.ops.dlq" in str(raised.value) and "quarantine-assets create-tables" in str(raised.value)
    assert not Path(warehouse.path(action.target_table)).exists()


def test_dqe_mode_drops_failing_rows_and_reports_them(spark, warehouse):
    action = orders_action(mode="dqe")
    append_source(spark, warehouse, action, [(1, 1, 1.0, "EUR"), (2, None, 1.0, "EUR")])
    report = run_split(spark, action, warehouse, run_id="run")

    assert (report.rows_read, report.rows_validated, report.rows_dropped, report.rows_quarantined) == (2, 1, 1, 0)
    assert [row[0] for row in validated_rows(spark, warehouse, action)] == [1]


def test_dqe_fail_rule_stops_the_batch_and_writes_nothing(spark, warehouse):
    from builders import ORDER_RULES

    rules = (ORDER_RULES[0].model_copy(update={"failure_action": "fail"}), *ORDER_RULES[1:])
    action = orders_action(mode="dqe", rules=rules)
    append_source(spark, warehouse, action, [(1, 1, 1.0, "EUR"), (2, None, 1.0, "EUR")])
    with pytest.raises(DataQualityFailure) as raised:
        run_split(spark, action, warehouse, run_id="run")

    assert raised.value.code == "QA-DQ-001" and "valid_order_id" in str(raised.value)
    assert not Path(warehouse.path(action.target_table)).exists()


def sent_and_kept(spark, warehouse, action):
    """The row numbers of the validated table and of the open inbox, as multisets."""
    validated = Counter(row[0] for row in validated_rows(spark, warehouse, action))
    inbox = Counter(
        row[0]
        for row in inbox_slice(spark, warehouse, action).select(F.variant_get("_row_data", "$.row_no", "int")).collect()
    )
    return validated, inbox


@pytest.mark.parametrize(
    "expression",
    ["order_ts <= current_timestamp()", "order_ts <= now()", "rand() < 0.5", "uuid() < '8'"],
)
def test_a_rule_that_reads_the_clock_or_draws_at_random_puts_each_row_in_exactly_one_table(
    spark, warehouse, expression
):
    """Judged twice, rows stamped over the next seconds (or drawn twice) land in both tables or neither."""
    action = orders_action(rules=(Rule(name="judged_now", expression=expression),))
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)
    rows = 4_000
    # Stamped from now over the next few seconds: the verdict changes while the batch is written.
    spark.range(rows).select(
        F.col("id").cast("int").alias("row_no"),
        (F.current_timestamp() + F.make_interval(secs=F.col("id") * 30.0 / rows)).alias("order_ts"),
    ).write.format("delta").save(str(warehouse.path(action.source.table)))
    report = run_split(spark, action, warehouse, run_id="run")

    validated, inbox = sent_and_kept(spark, warehouse, action)
    assert validated + inbox == Counter(range(rows))
    assert report.rows_read == rows
    assert (report.rows_validated, report.rows_quarantined) == (sum(validated.values()), sum(inbox.values()))
    assert report.failures_per_rule["judged_now"] == report.rows_quarantined


def test_a_rerun_after_a_crash_between_the_two_commits_writes_the_first_verdict(spark, warehouse, monkeypatch):
    """The inbox commit of a re-run, even with the clock moved on, holds the rows the first run rejected."""
    from quarantine_assets.engine.spark import split

    action = orders_action(rules=(Rule(name="judged_now", expression="rand() < 0.5"),))
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)
    batch = source_batch(spark, warehouse, action, random_orders(random.Random(4), 0, 200))

    def crash(*args, **kwargs):
        raise RuntimeError("killed between the validated and the inbox commit")

    with monkeypatch.context() as patched:
        patched.setattr(split, "append_to_dlq_table", crash)
        with pytest.raises(RuntimeError, match="killed"):
            split_batch(
                StageRun(spark, action, warehouse, "crashed"),
                batch,
                BatchCommit.of(action, SPLIT_STREAM, "stream-1", 0),
            )
    first_validated, _ = sent_and_kept(spark, warehouse, action)
    report = split_batch(
        StageRun(spark, action, warehouse, "rerun"), batch, BatchCommit.of(action, SPLIT_STREAM, "stream-1", 0)
    )

    validated, inbox = sent_and_kept(spark, warehouse, action)
    assert validated == first_validated
    assert validated + inbox == Counter(range(200))
    assert (report.rows_read, report.rows_validated + report.rows_held_in_inbox) == (200, 200)


def test_source_files_gone_after_a_crash_between_the_two_commits_lose_no_row(spark, warehouse, tmp_path, monkeypatch):
    """The batch is read once: a re-run writes the inbox from its verdict, even once the files are gone."""
    import shutil

    from quarantine_assets.config.models import FileSource
    from quarantine_assets.engine.spark import split

    landing = tmp_path / "landing"
    landing.mkdir()
    rows = random_orders(random.Random(5), 0, 60)
    lines = ["row_no,order_id,amount,currency"] + [",".join("" if v is None else str(v) for v in row) for row in rows]
    (landing / "orders.csv").write_text("\n".join(lines) + "\n")
    source = FileSource(path=str(landing), format="csv", schema_ddl=ORDERS_SCHEMA, options={"header": "true"})
    action = orders_action().model_copy(update={"source": source})
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)

    def crash(*args, **kwargs):
        shutil.rmtree(landing)
        raise RuntimeError("killed between the validated and the inbox commit")

    with monkeypatch.context() as patched:
        patched.setattr(split, "append_to_dlq_table", crash)
        with pytest.raises(RuntimeError, match="killed"):
            run_split(spark, action, warehouse, run_id="crashed")
    landing.mkdir()
    report = run_split(spark, action, warehouse, run_id="rerun")

    validated, inbox = sent_and_kept(spark, warehouse, action)
    assert validated + inbox == Counter(row[0] for row in rows)
    assert sum(inbox.values()) == sum(not passes(row) for row in rows) == report.rows_held_in_inbox


def test_a_delta_source_vacuumed_after_a_crash_between_the_two_commits_loses_no_row(spark, warehouse, monkeypatch):
    """Rules that judge alike each time are not kept in memory, but the rejected rows are still staged
    before the first commit: the re-run writes the inbox from the stage, not from the vacuumed files."""
    from quarantine_assets.engine.spark import split

    action = orders_action()
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)
    rows = random_orders(random.Random(6), 0, 80)
    append_source(spark, warehouse, action, rows)
    source = Path(warehouse.path(action.source.table))

    def crash(*args, **kwargs):
        for data_file in source.glob("*.parquet"):
            data_file.unlink()
        raise RuntimeError("killed between the validated and the inbox commit")

    with monkeypatch.context() as patched:
        patched.setattr(split, "append_to_dlq_table", crash)
        with pytest.raises(RuntimeError, match="killed"):
            run_split(spark, action, warehouse, run_id="crashed")
    report = run_split(spark, action, warehouse, run_id="rerun")

    validated, inbox = sent_and_kept(spark, warehouse, action)
    assert validated + inbox == Counter(row[0] for row in rows)
    assert sum(inbox.values()) == sum(not passes(row) for row in rows) == report.rows_held_in_inbox


@pytest.mark.parametrize(
    ("expression", "alike"),
    [
        ("amount >= 0 AND currency IN ('EUR', 'USD')", True),
        ("coalesce(order_id, 0) % 2 = 0", True),
        ("order_ts <= current_timestamp()", False),
        ("order_ts <= now()", False),
        ("current_date() > DATE'2020-01-01'", False),
        ("order_ts <= localtimestamp()", False),
        ("rand() < 0.5", False),
        ("uuid() < '8'", False),
        ("qa_test_plus_one(order_id) > 1", False),
        ("amount <= (SELECT max(id) FROM range(10))", False),
        ("order_id IN (SELECT id FROM range(10))", False),
    ],
)
def test_only_rules_without_clock_chance_or_function_judge_a_delta_stream_alike_each_time(
    spark, warehouse, expression, alike
):
    from quarantine_assets.engine.spark.rules import passes as rule_passes
    from quarantine_assets.engine.spark.verdict import judges_alike_each_time

    spark.udf.register("qa_test_plus_one", lambda value: (value or 0) + 1, "int")
    action = orders_action()
    spark.createDataFrame([], ORDERS_SCHEMA + ", order_ts TIMESTAMP").write.format("delta").save(
        str(warehouse.path(action.source.table))
    )
    stream = spark.readStream.format("delta").load(str(warehouse.path(action.source.table)))

    assert judges_alike_each_time(stream.select(rule_passes(Rule(name="rule", expression=expression)))) is alike


@pytest.mark.parametrize(
    ("source_options", "session_conf", "alike"),
    [
        ({}, {}, True),
        ({"ignoreMissingFiles": "true"}, {}, False),
        ({"ignoreCorruptFiles": "true"}, {}, False),
        ({}, {"spark.sql.files.ignoreMissingFiles": "true"}, False),
        ({}, {"spark.sql.files.ignoreCorruptFiles": "true"}, False),
    ],
)
def test_a_source_that_skips_files_or_is_not_delta_keeps_its_verdict(
    spark, warehouse, source_options, session_conf, alike
):
    """Only a Delta source that fails on a missing or unreadable file is judged again per query."""
    from quarantine_assets.config.models import DeltaSource, FileSource
    from quarantine_assets.engine.spark.split import _judges_alike

    action = orders_action()
    spark.createDataFrame([], ORDERS_SCHEMA).write.format("delta").save(str(warehouse.path(action.source.table)))
    stream = spark.readStream.format("delta").load(str(warehouse.path(action.source.table)))
    skipping = action.model_copy(update={"source": DeltaSource(table=action.source.table, options=source_options)})
    files = action.model_copy(update={"source": FileSource(path=str(warehouse.root), format="json")})
    previous = {key: spark.conf.get(key) for key in session_conf}
    for key, value in session_conf.items():
        spark.conf.set(key, value)
    try:
        assert _judges_alike(spark, skipping, stream) is alike
        assert _judges_alike(spark, files, stream) is False
    finally:
        for key, value in previous.items():
            spark.conf.set(key, value)


def test_a_batch_over_the_reject_limit_writes_nothing_and_is_read_again_until_the_limit_allows_it(spark, warehouse):
    """A circuit breaker per batch: the batch before it stays written, the one over the limit is all or nothing."""
    action = orders_action()
    limited = action.model_copy(
        update={
            "source": action.source.model_copy(update={"options": {"maxFilesPerTrigger": "1"}}),
            "quarantine": action.quarantine.model_copy(update={"max_reject_ratio": 0.5}),
        }
    )
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)
    source = warehouse.path(action.source.table)
    first = [(1, 1, 1.0, "EUR"), (2, 2, 2.0, "EUR"), (3, None, 3.0, "EUR")]  # a third rejected
    broken = [(4, None, 1.0, "EUR"), (5, 5, -2.0, "EUR"), (6, 6, 3.0, "EUR")]  # two thirds rejected
    spark.createDataFrame(first, ORDERS_SCHEMA).coalesce(1).write.format("delta").save(source)
    spark.createDataFrame(broken, ORDERS_SCHEMA).coalesce(1).write.format("delta").mode("append").save(source)

    def tables() -> tuple[list[int], list[int]]:
        validated = spark.read.format("delta").load(warehouse.path(action.target_table)).collect()
        inbox = spark.read.format("delta").load(warehouse.path(action.quarantine.inbox_table))
        kept = inbox.select(F.variant_get("_row_data", "$.row_no", "int").alias("row_no")).collect()
        return sorted(row["row_no"] for row in validated), sorted(row["row_no"] for row in kept)

    for attempt in ("run", "rerun"):
        with pytest.raises(DataQualityFailure) as refused:
            run_split(spark, limited, warehouse, attempt)
        assert refused.value.code == "QA-DQ-004" and refused.value.problem.field == "quarantine.max_reject_ratio"
        assert "batch 1 of dq_orders rejected 2 of 3 row(s) (66.7%)" in str(refused.value)
        assert "valid_order_id (1), non_negative_amount (1)" in str(refused.value)
        assert tables() == ([1, 2], [3])

    relaxed = limited.model_copy(update={"quarantine": limited.quarantine.model_copy(update={"max_reject_ratio": 0.7})})
    report = run_split(spark, relaxed, warehouse, "after the limit was raised")

    assert (report.rows_read, report.rows_validated, report.rows_quarantined) == (3, 1, 2)
    assert tables() == ([1, 2, 6], [3, 4, 5])


def test_the_split_job_over_the_reject_limit_fails_its_step_with_the_code_and_writes_nothing(
    spark, warehouse, tmp_path
):
    """Through Dagster: the run fails at the split step, whose error carries QA-DQ-004; the tables stay as they were."""
    loop = Loop(spark, warehouse, tmp_path, max_reject_ratio=0.5)
    loop.ingest([(1, 1, 1.0, "EUR")])
    broken = [(2, None, 1.0, "EUR"), (3, 3, -2.0, "EUR"), (4, 4, 3.0, "EUR")]
    spark.createDataFrame(broken, ORDERS_SCHEMA).write.format("delta").mode("append").save(
        warehouse.path(loop.action.source.table)
    )

    result = loop.defs.resolve_job_def(SPLIT_JOB).execute_in_process(instance=loop.instance, raise_on_error=False)

    (failure,) = [event for event in result.all_events if event.is_step_failure]
    error, shown = failure.step_failure_data.error, ""
    while error is not None:  # the error as the UI shows it, with the errors that caused it
        shown, error = shown + error.message, error.cause
    assert failure.step_key.endswith("_split") and "QA-DQ-004" in shown
    assert loop.validated() == [(1, 1, 1.0, "EUR")] and loop.inbox().count() == 0
