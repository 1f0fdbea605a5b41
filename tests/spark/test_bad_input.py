"""Whatever a source produces and whatever happens to the tables between runs: a DLQ row or a coded error,
never a row lost, landed twice or silently changed."""

from __future__ import annotations

import shutil
from collections import Counter

import pytest
from builders import ORDERS_SCHEMA, orders_action
from dlq_template import dlq_tables_from_template
from pyspark.sql import functions as F

from quarantine_assets.config.models import FileSource, Rule
from quarantine_assets.engine.spark.operator import fix_rows
from quarantine_assets.engine.spark.outbox import run_outbox
from quarantine_assets.engine.spark.recycled import run_recycled
from quarantine_assets.engine.spark.split import SPLIT_STREAM, run_split
from quarantine_assets.errors import QuarantineError

CSV_LINES = [
    "1,1,1.0,EUR",
    "2,2",  # too few fields
    "3,3,3.0,EUR,surplus",  # too many
    '4,"unclosed,4.0,EUR',  # a quote that never closes
    "5,five,5.0,EUR",  # not a number
    "6,6,6.0,EUR",
]
JSON_LINES = [
    '{"row_no": 1, "order_id": 1, "amount": 1.0, "currency": "EUR"}',
    '{"row_no": 2, "order_id":',  # cut short
    '{"row_no": 3, "order_id": "three", "amount": 3.0, "currency": "EUR"}',  # wrong type
    "not json at all",
    '{"row_no": 5, "order_id": 5, "amount": 5.0, "currency": "EUR"}',
    "[6, 6, 6.0]",  # JSON, but no object
]
# What each bad record's parse message must say, in words.
PARSE_MESSAGES = {
    CSV_LINES[1]: "the record has 2 field(s); 4 columns are declared",
    CSV_LINES[2]: "the record has more than 4 fields; 4 columns are declared",
    CSV_LINES[3]: "a quoted value is not closed before the record ends",
    CSV_LINES[4]: "order_id = five is not a valid int",
    JSON_LINES[1]: "the line is not a JSON document: Expecting value at column 26",
    JSON_LINES[2]: "order_id = three is not a valid int",
    JSON_LINES[3]: "the line is not a JSON document: Expecting value at column 1",
    JSON_LINES[5]: "the line is JSON but not an object",
}


def file_action(landing, file_format: str, **options):
    return orders_action().model_copy(
        update={"source": FileSource(path=str(landing), format=file_format, options=options, schema_ddl=ORDERS_SCHEMA)}
    )


def table(spark, warehouse, name: str):
    return spark.read.format("delta").load(str(warehouse.path(name)))


@pytest.mark.parametrize(
    ("file_format", "text", "options", "good_rows", "parse_codes"),
    [
        (
            "csv",
            "row_no,order_id,amount,currency\n" + "\n".join(CSV_LINES) + "\n",
            {"header": "true"},
            [1, 6],
            {"csv_schema_mismatch": 4},
        ),
        ("json", "\n".join(JSON_LINES) + "\n", {}, [1, 5], {"json_parse_error": 2, "json_schema_mismatch": 2}),
    ],
)
def test_records_that_do_not_parse_are_quarantined_with_their_raw_text_and_reason_code(
    spark, warehouse, tmp_path, file_format, text, options, good_rows, parse_codes
):
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / f"batch.{file_format}").write_text(text)
    action = file_action(landing, file_format, **options)
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)

    report = run_split(spark, action, warehouse, "run")

    lines = text.strip().splitlines()[1 if file_format == "csv" else 0 :]
    assert sorted(row["row_no"] for row in table(spark, warehouse, action.target_table).collect()) == good_rows
    inbox = table(spark, warehouse, action.quarantine.inbox_table).collect()
    bad_lines = [line for line in lines if line not in (lines[good - 1] for good in good_rows)]
    assert sorted(row["_dlq_rescued_data"] for row in inbox) == sorted(bad_lines)
    assert all("record_parses" in [rule["name"] for rule in row["_dlq_failed_rules"]] for row in inbox)
    assert (report.rows_read, report.rows_validated, report.rows_quarantined) == (
        len(lines),
        len(good_rows),
        len(bad_lines),
    )
    assert report.failures_per_rule["record_parses"] == len(bad_lines)
    # The reference's column keeps its shape; the reason code and message are beside it, one entry per failure.
    assert all(set(rule.asDict()) == {"name", "rule"} for row in inbox for rule in row["_dlq_failed_rules"])
    assert all(len(row["_dlq_errors"]) == len(row["_dlq_failed_rules"]) for row in inbox)
    parse_errors = [error for row in inbox for error in row["_dlq_errors"] if error["type"] == "parse"]
    assert Counter(error["code"] for error in parse_errors) == Counter(parse_codes) == report.parse_errors
    for row in inbox:
        (message,) = [error["message"] for error in row["_dlq_errors"] if error["type"] == "parse"]
        assert PARSE_MESSAGES[row["_dlq_rescued_data"]] in message, (row["_dlq_rescued_data"], message)
    # Arrived when its file did: the file's modification time, beside the rejection time.
    arrived = (landing / f"batch.{file_format}").stat().st_mtime
    assert all(abs(row["_dlq_arrived_at"].timestamp() - arrived) < 0.01 for row in inbox)
    assert all(row["_dlq_timestamp"] >= row["_dlq_arrived_at"] for row in inbox)
    if file_format == "json":
        codes = {row["_dlq_rescued_data"]: [e["code"] for e in row["_dlq_errors"]] for row in inbox}
        assert "json_parse_error" in codes["not json at all"] and "json_schema_mismatch" in codes[JSON_LINES[2]]


def test_a_parse_message_names_each_value_that_does_not_fit_under_the_sources_own_read_options(
    spark, warehouse, tmp_path
):
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "batch.csv").write_text(
        "row_no;order id;due `day`;amount\n"
        "1;1;02/01/2024;1.50\n"
        "2;two;31/01/2024;2.50\n"  # not a number
        "3;3;2024-01-03;x\n"  # a date in another format, an amount that is no number
        "4;4;04/01/2024;4.50\n"
    )
    action = orders_action().model_copy(
        update={
            "source": FileSource(
                path=str(landing),
                format="csv",
                options={"header": "true", "sep": ";", "dateFormat": "dd/MM/yyyy"},
                schema_ddl="row_no INT, `order id` BIGINT, `due ``day``` DATE, amount DECIMAL(5,2)",
            ),
            "rules": (),
        }
    )
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)

    run_split(spark, action, warehouse, "run")

    assert sorted(row["row_no"] for row in table(spark, warehouse, action.target_table).collect()) == [1, 4]
    messages = {
        row["_dlq_rescued_data"]: row["_dlq_errors"][0]["message"]
        for row in table(spark, warehouse, action.quarantine.inbox_table).collect()
    }
    assert messages == {
        "2;two;31/01/2024;2.50": "order id = two is not a valid bigint",
        "3;3;2024-01-03;x": "due `day` = 2024-01-03 is not a valid date; amount = x is not a valid decimal(5,2)",
    }


@pytest.mark.parametrize(
    "header", ["row_no,amount,order_id,currency", "row_no,order_id,amount,currency,channel", "row_no,order_id,amount"]
)
def test_in_dqe_mode_a_csv_file_whose_header_names_other_columns_is_refused_and_nothing_of_it_is_written(
    spark, warehouse, tmp_path, header
):
    """dqe mode has no DLQ to set the file aside in (quarantine mode does: test_file_quarantine.py)."""
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "a.csv").write_text("row_no,order_id,amount,currency\n1,1,1.0,EUR\n")
    action = file_action(landing, "csv", header="true").model_copy(update={"mode": "dqe", "quarantine": None})
    run_split(spark, action, warehouse, "first")
    (landing / "b.csv").write_text(header + "\n" + ",".join(["2"] * len(header.split(","))) + "\n")

    with pytest.raises(QuarantineError) as raised:
        run_split(spark, action, warehouse, "second")

    assert raised.value.code == "QA-SRC-003" and "b.csv" in str(raised.value)
    assert table(spark, warehouse, action.target_table).count() == 1
    (landing / "b.csv").unlink()  # moved out, as the message says: the stream goes on without it
    (landing / "c.csv").write_text("row_no,order_id,amount,currency\n3,3,3.0,EUR\n")
    assert run_split(spark, action, warehouse, "third").rows_validated == 1


def test_a_column_added_to_the_source_is_added_to_the_validated_table(spark, warehouse):
    action = orders_action()
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)
    source = str(warehouse.path(action.source.table))
    spark.createDataFrame([(1, 1, 1.0, "EUR")], ORDERS_SCHEMA).write.format("delta").save(source)
    run_split(spark, action, warehouse, "first")
    spark.createDataFrame(
        [(2, 2, 2.0, "EUR", "web"), (3, None, 3.0, "EUR", "shop")], ORDERS_SCHEMA + ", channel STRING"
    ).write.format("delta").mode("append").option("mergeSchema", "true").save(source)

    report = run_split(spark, action, warehouse, "second")

    validated = table(spark, warehouse, action.target_table)
    assert sorted(validated.select("row_no", "channel").collect()) == [(1, None), (2, "web")]
    assert any("channel" in warning and action.target_table in warning for warning in report.warnings)
    inbox_row = table(spark, warehouse, action.quarantine.inbox_table).first()
    assert inbox_row["_row_data"].toJson().count('"shop"') == 1


@pytest.mark.parametrize(
    ("change", "new_schema", "row"),
    [
        ("retyped", "row_no INT, order_id INT, amount STRING, currency STRING, note STRING", (9, 9, "9.0", "EUR", "x")),
        ("dropped", "row_no INT, order_id INT, amount DOUBLE, currency STRING", (9, 9, 9.0, "EUR")),
    ],
)
def test_a_retyped_or_dropped_source_column_is_refused_with_a_code_and_nothing_is_written(
    spark, warehouse, change, new_schema, row
):
    action = orders_action()
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)
    source = str(warehouse.path(action.source.table))
    first = [(1, 1, 1.0, "EUR", "a"), (2, None, 2.0, "EUR", "b")]
    spark.createDataFrame(first, ORDERS_SCHEMA + ", note STRING").write.format("delta").save(source)
    run_split(spark, action, warehouse, "first")
    spark.createDataFrame([row], new_schema).write.format("delta").mode("overwrite").option(
        "overwriteSchema", "true"
    ).save(source)

    with pytest.raises(QuarantineError) as raised:
        run_split(spark, action, warehouse, "second")

    assert raised.value.code == "QA-SRC-001" and action.name in str(raised.value)
    assert table(spark, warehouse, action.target_table).count() == 1
    assert table(spark, warehouse, action.quarantine.inbox_table).count() == 1


def test_a_lost_split_checkpoint_is_refused_instead_of_writing_every_row_again(spark, warehouse):
    action = orders_action()
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)
    source = str(warehouse.path(action.source.table))
    spark.createDataFrame([(1, 1, 1.0, "EUR"), (2, None, 2.0, "EUR")], ORDERS_SCHEMA).write.format("delta").save(source)
    run_split(spark, action, warehouse, "first")
    shutil.rmtree(warehouse.checkpoint(action.key, SPLIT_STREAM))

    with pytest.raises(QuarantineError) as raised:
        run_split(spark, action, warehouse, "second")

    assert raised.value.code == "QA-SRC-002"
    assert table(spark, warehouse, action.target_table).count() == 1
    assert table(spark, warehouse, action.quarantine.inbox_table).count() == 1


def test_tables_vacuumed_between_runs_keep_every_row_moving(spark, warehouse):
    """Vacuumed to nothing but the current snapshots, while a fixed row waits for the outbox: the
    change files the outbox would have read are gone, and it starts again from the inbox."""
    action = orders_action()
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)
    source = str(warehouse.path(action.source.table))
    tables = [action.target_table, action.quarantine.inbox_table, action.quarantine.outbox_table, action.source.table]

    def split_and_fix(first_row: int) -> None:
        rows = [(first_row, 1, 1.0, "EUR"), (first_row + 1, None, 2.0, "EUR"), (first_row + 2, 3, -1.0, "EUR")]
        spark.createDataFrame(rows, ORDERS_SCHEMA).write.format("delta").mode("append").save(source)
        run_split(spark, action, warehouse, f"split-{first_row}")
        inbox = table(spark, warehouse, action.quarantine.inbox_table)
        key = inbox.where(F.variant_get("_row_data", "$.row_no", "int") == first_row + 1).first()["_dlq_sk"]
        fix_rows(spark, warehouse, action, [key], set_fields={"order_id": 2}, by="operator")

    split_and_fix(1)
    run_outbox(spark, action, warehouse, "outbox-1")
    run_recycled(spark, action, warehouse, "recycled-1")
    split_and_fix(10)
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    try:
        for name in tables:
            spark.sql(f"VACUUM delta.`{warehouse.path(name)}` RETAIN 0 HOURS")
    finally:
        spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "true")

    sent = run_outbox(spark, action, warehouse, "outbox-10")
    run_recycled(spark, action, warehouse, "recycled-10")
    split_and_fix(20)
    run_outbox(spark, action, warehouse, "outbox-20")
    run_recycled(spark, action, warehouse, "recycled-20")

    assert sent.rows_sent == 1 and any("vacuumed" in warning for warning in sent.warnings)
    landed = sorted(row["row_no"] for row in table(spark, warehouse, action.target_table).collect())
    assert landed == [1, 2, 10, 11, 20, 21]
    outbox = table(spark, warehouse, action.quarantine.outbox_table)
    assert outbox.groupBy("_dlq_sk", "_dlq_attempt").count().where("count > 1").count() == 0
    open_rows = table(spark, warehouse, action.quarantine.inbox_table).where("_dlq_status = 'quarantined'")
    assert sorted(r[0] for r in open_rows.select(F.variant_get("_row_data", "$.row_no", "int")).collect()) == [
        3,
        12,
        22,
    ]


def test_a_thousand_columns_and_a_ten_megabyte_value_round_trip_exactly(spark, warehouse):
    width = 1_000
    rules = (Rule(name="valid_c0", expression="c0 IS NOT NULL"),)
    action = orders_action(rules=rules)
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)
    big = "".join(chr(0x41 + n % 26) for n in range(10 * 1024 * 1024))
    columns = [F.col("id").cast("int").alias("row_no")] + [
        F.when((F.col("id") == 1) & F.lit(n == 0), F.lit(None)).otherwise(F.col("id") * 1_000 + n).alias(f"c{n}")
        for n in range(width)
    ]
    source = spark.range(3).select(
        *columns, F.when(F.col("id") == 1, F.lit(big)).otherwise(F.lit("small")).alias("text")
    )
    source.write.format("delta").save(str(warehouse.path(action.source.table)))

    report = run_split(spark, action, warehouse, "split")
    key = table(spark, warehouse, action.quarantine.inbox_table).first()["_dlq_sk"]
    fix_rows(spark, warehouse, action, [key], set_fields={"c0": 1_000}, by="operator")
    run_outbox(spark, action, warehouse, "outbox")
    recycled = run_recycled(spark, action, warehouse, "recycled")

    assert (report.rows_validated, report.rows_quarantined, recycled.rows_landed) == (2, 1, 1)
    landed = table(spark, warehouse, action.target_table).where("row_no = 1").first().asDict()
    expected = {"row_no": 1, "text": big} | {f"c{n}": 1_000 + n for n in range(width)}
    assert landed.keys() == expected.keys()
    assert [name for name in expected if landed[name] != expected[name]] == []
