"""Sensitive columns reach neither the DLQ's data files nor its change feed; only an operator can give them back."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from pathlib import Path

import pytest
from builders import orders_action
from dlq_template import dlq_tables_from_template
from file_scan import files_holding_text
from pyspark.sql import functions as F
from test_file_sources import write_csv

from quarantine_assets.config.models import FileSource
from quarantine_assets.engine.spark.operator import fix_rows
from quarantine_assets.engine.spark.outbox import run_outbox
from quarantine_assets.engine.spark.recycled import run_recycled
from quarantine_assets.engine.spark.retention import purge_resolved
from quarantine_assets.engine.spark.split import run_split
from quarantine_assets.errors import ConfigError, OperatorError

CARD, EMAIL = "4111111111111111", "alice@example.com"
SCHEMA = "row_no INT, order_id INT, amount DOUBLE, currency STRING, email STRING, card STRING"


def redacting_action(method: str = "mask", source=None):
    action = orders_action()
    quarantine = action.quarantine.model_copy(update={"sensitive_columns": ("Email", "card"), "redaction": method})
    return action.model_copy(update={"quarantine": quarantine, **({"source": source} if source else {})})


def files_holding(folder: str, secret: str) -> list[str]:
    """Every file under the table's folder (Parquet data, change data, log with its column stats) holding `secret`."""
    return [str(path) for path in Path(folder).rglob("*") if path.is_file() and secret.encode() in path.read_bytes()]


def payloads(spark, path: str, change_feed: bool = False):
    reader = spark.read.format("delta")
    if change_feed:
        reader = reader.option("readChangeFeed", "true").option("startingVersion", 0)
    return reader.load(path).select(F.to_json("_row_data").alias("payload"), "_dlq_rescued_data").collect()


@pytest.mark.parametrize("method", ["mask", "sha256"])
def test_sensitive_values_are_in_no_dlq_file_and_no_change_feed_row(spark, warehouse, method):
    action = redacting_action(method)
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)
    rows = [(1, 1, 1.0, "EUR", "bob@example.com", "5500000000000004"), (2, None, 2.0, "EUR", EMAIL, CARD)]
    rows += [(3, 3, -1.0, "EUR", None, CARD)]
    spark.createDataFrame(rows, SCHEMA).write.format("delta").save(warehouse.path(action.source.table))

    run_split(spark, action, warehouse, "split")

    inbox = warehouse.path(action.quarantine.inbox_table)
    assert files_holding(inbox, CARD) == [] and files_holding(inbox, EMAIL) == []
    stored = sorted(row["payload"] for row in payloads(spark, inbox)) + [
        row["payload"] for row in payloads(spark, inbox, change_feed=True)
    ]
    assert len(stored) == 4 and not [payload for payload in stored if CARD in payload or EMAIL in payload]
    hidden = "[redacted]" if method == "mask" else f"sha256:{hashlib.sha256(CARD.encode()).hexdigest()}"
    by_row = {
        row["row_no"]: row
        for row in spark.read.format("delta")
        .load(inbox)
        .select(
            F.variant_get("_row_data", "$.row_no", "int").alias("row_no"),
            F.variant_get("_row_data", "$.card", "string").alias("card"),
            F.variant_get("_row_data", "$.email", "string").alias("email"),
            F.variant_get("_row_data", "$.order_id", "int").alias("order_id"),
        )
        .collect()
    }
    # Masked or hashed where there was a value; a NULL stays NULL; other columns untouched.
    assert (by_row[2]["card"], by_row[2]["order_id"], by_row[3]["email"]) == (hidden, None, None)
    # The validated table is the user's own: its rows keep their values.
    validated = spark.read.format("delta").load(warehouse.path(action.target_table)).collect()
    assert [(row["email"], row["card"]) for row in validated] == [("bob@example.com", "5500000000000004")]


def test_a_record_that_did_not_parse_keeps_no_raw_text_of_a_redacting_source(spark, warehouse, tmp_path):
    landing = tmp_path / "landing"
    header = "row_no,order_id,amount,currency,email,card\n"
    dashed_card = "4111-1111-1111-1111"  # not a number: its column's type refuses it
    write_csv(
        landing,
        "a.csv",
        header
        + f"1,1,1.0,EUR,bob@example.com,5500000000000004\n2,2,2.0,EUR,{EMAIL},{CARD},surplus\n"
        + f"3,3,3.0,EUR,{EMAIL},{dashed_card}\n",
    )
    schema = SCHEMA.replace("card STRING", "card BIGINT")
    source = FileSource(path=str(landing), format="csv", schema_ddl=schema, options={"header": "true"})
    action = redacting_action(source=source)
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)

    run_split(spark, action, warehouse, "split")

    inbox = warehouse.path(action.quarantine.inbox_table)
    rows = spark.read.format("delta").load(inbox).collect()
    assert [row["_dlq_rescued_data"] for row in rows] == ["[redacted]", "[redacted]"]
    # The parse message still says what is wrong, but shows no value: it could be a sensitive one.
    messages = sorted(error["message"] for row in rows for error in row["_dlq_errors"] if error["type"] == "parse")
    assert messages == ["card is not a valid bigint", "the record has more than 6 fields; 6 columns are declared"]
    assert [name for name in (CARD, EMAIL, dashed_card) if files_holding(inbox, name)] == []


def test_a_redacted_row_recycles_only_with_its_sensitive_values_supplied(spark, warehouse):
    action = redacting_action()
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)
    rows = [(1, None, 1.0, "EUR", EMAIL, CARD)]
    spark.createDataFrame(rows, SCHEMA).write.format("delta").save(warehouse.path(action.source.table))
    run_split(spark, action, warehouse, "split")
    inbox = warehouse.path(action.quarantine.inbox_table)
    key = spark.read.format("delta").load(inbox).first()["_dlq_sk"]

    with pytest.raises(OperatorError) as refused:
        fix_rows(spark, warehouse, action, [key], set_fields={"order_id": 1}, by="test")
    assert refused.value.code == "QA-OPS-012" and "['card', 'email']" in str(refused.value)
    assert spark.read.format("delta").load(inbox).first()["_dlq_status"] == "quarantined"

    fix_rows(spark, warehouse, action, [key], set_fields={"order_id": 1, "email": EMAIL, "card": CARD}, by="test")
    run_outbox(spark, action, warehouse, "outbox")
    run_recycled(spark, action, warehouse, "recycled")
    landed = spark.read.format("delta").load(warehouse.path(action.target_table)).collect()
    assert [(row["order_id"], row["email"], row["card"]) for row in landed] == [(1, EMAIL, CARD)]


@pytest.mark.parametrize("named", ["emial", "customer.email"])
def test_a_sensitive_column_the_source_lacks_is_refused_before_anything_is_written(spark, warehouse, named):
    """A misspelt name or a nested field would redact nothing: the split refuses it with a code instead."""
    action = redacting_action()
    quarantine = action.quarantine.model_copy(update={"sensitive_columns": ("card", named)})
    action = action.model_copy(update={"quarantine": quarantine})
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)
    rows = [(2, None, 2.0, "EUR", EMAIL, CARD)]
    spark.createDataFrame(rows, SCHEMA).write.format("delta").save(warehouse.path(action.source.table))

    with pytest.raises(ConfigError) as refused:
        run_split(spark, action, warehouse, "split")

    (problem,) = refused.value.problems
    assert (problem.code, problem.field) == ("QA-CFG-036", "quarantine.sensitive_columns")
    assert repr(named) in problem.message and "email" in problem.message
    assert not warehouse.is_delta_table(action.target_table)
    assert spark.read.format("delta").load(warehouse.path(action.quarantine.inbox_table)).count() == 0


def test_a_fix_whose_sensitive_value_does_not_fit_fails_without_showing_the_value(spark, warehouse):
    """A `payload_type` failure shows the value that does not fit, except a sensitive column's: the operator
    supplied it in clear, and the row goes back to the inbox with its failure."""
    action = redacting_action()
    quarantine = action.quarantine.model_copy(update={"sensitive_columns": ("card",)})
    action = action.model_copy(update={"quarantine": quarantine})
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)
    rows = [(1, None, 1.0, "EUR", 4111111111111111)]
    schema = "row_no INT, order_id INT, amount DOUBLE, currency STRING, card BIGINT"
    spark.createDataFrame(rows, schema).write.format("delta").save(warehouse.path(action.source.table))
    run_split(spark, action, warehouse, "split")
    inbox = warehouse.path(action.quarantine.inbox_table)
    key = spark.read.format("delta").load(inbox).first()["_dlq_sk"]
    typed_by_hand = "4111 1111 1111 1111"

    fix_rows(spark, warehouse, action, [key], set_fields={"order_id": 1, "card": typed_by_hand}, by="test")
    run_outbox(spark, action, warehouse, "outbox")
    run_recycled(spark, action, warehouse, "recycled")

    row = (
        spark.read.format("delta")
        .load(inbox)
        .select("_dlq_status", F.to_json("_dlq_failed_rules").alias("rules"), F.to_json("_dlq_errors").alias("errors"))
        .first()
    )
    assert row["_dlq_status"] == "quarantined"
    assert "card is not exactly bigint" in row["rules"] and "card is not exactly bigint" in row["errors"]
    assert typed_by_hand not in row["rules"] + row["errors"]


@pytest.mark.parametrize("method", ["mask", "sha256"])
def test_values_a_fix_supplies_are_redacted_once_landed_or_failed_and_purged_from_every_file(spark, warehouse, method):
    """The values an operator gives back travel in clear only while the row is on its way: once it has landed
    or failed again its inbox and outbox rows hold them redacted, and `purge --physically` removes the files of
    their earlier images (the fix's, the change feed's) once the outbox has read them."""
    action = redacting_action(method)
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)
    rows = [(1, None, 1.0, "EUR", EMAIL, CARD), (2, None, 2.0, "EUR", EMAIL, CARD)]
    spark.createDataFrame(rows, SCHEMA).write.format("delta").save(warehouse.path(action.source.table))
    run_split(spark, action, warehouse, "split")
    inbox, outbox = warehouse.path(action.quarantine.inbox_table), warehouse.path(action.quarantine.outbox_table)
    keys = {
        row["no"]: row["_dlq_sk"]
        for row in spark.read.format("delta")
        .load(inbox)
        .selectExpr("_dlq_sk", "variant_get(_row_data, '$.row_no', 'int') AS no")
        .collect()
    }
    lands, fails = (
        {"email": "lands@example.com", "card": "4000000000000002"},
        {"email": "fails@example.com", "card": "4000000000000010"},
    )
    fix_rows(spark, warehouse, action, [keys[1]], set_fields={"order_id": 1, **lands}, by="test")
    fix_rows(spark, warehouse, action, [keys[2]], set_fields={"order_id": 2, "amount": -2.0, **fails}, by="test")
    supplied = [*lands.values(), *fails.values()]
    assert all(files_holding_text(Path(inbox), value) for value in supplied)

    run_outbox(spark, action, warehouse, "outbox")
    run_recycled(spark, action, warehouse, "recycled")

    validated = spark.read.format("delta").load(warehouse.path(action.target_table)).collect()
    assert [(row["order_id"], row["email"], row["card"]) for row in validated] == [(1, *lands.values())]
    hidden = {
        value: "[redacted]" if method == "mask" else f"sha256:{hashlib.sha256(value.encode()).hexdigest()}"
        for value in supplied
    }
    for table, statuses in ((inbox, {1: "recycled", 2: "quarantined"}), (outbox, {1: None, 2: None})):
        now = (
            spark.read.format("delta")
            .load(table)
            .selectExpr(
                "variant_get(_row_data, '$.row_no', 'int') AS no",
                "_dlq_status" if statuses[1] else "NULL AS _dlq_status",
                "variant_get(_row_data, '$.email', 'string') AS email",
                "variant_get(_row_data, '$.card', 'string') AS card",
            )
        )
        assert sorted(tuple(row) for row in now.collect()) == [
            (1, statuses[1], hidden[lands["email"]], hidden[lands["card"]]),
            (2, statuses[2], hidden[fails["email"]], hidden[fails["card"]]),
        ]
    # A row that failed again is fixed as before, its sensitive values given once more, and lands.
    fix_rows(spark, warehouse, action, [keys[2]], set_fields={"order_id": 2, "amount": 2.0, **fails}, by="test")
    run_outbox(spark, action, warehouse, "outbox")
    run_recycled(spark, action, warehouse, "recycled")
    validated = spark.read.format("delta").load(warehouse.path(action.target_table)).orderBy("order_id").collect()
    assert [(row["order_id"], row["email"], row["card"]) for row in validated] == [
        (1, *lands.values()),
        (2, *fails.values()),
    ]
    # Their earlier images are still on disk until the purge, once the outbox has read the recycle's changes.
    assert all(files_holding_text(Path(inbox), value) for value in supplied)
    run_outbox(spark, action, warehouse, "outbox")
    purged = purge_resolved(spark, warehouse, action, timedelta(days=36500), dry_run=False, by="test", physically=True)

    assert purged.rows == 0 and purged.files.files_removed > 0 and purged.files.files_pending == {}, purged.files
    for table in (inbox, outbox):
        assert [value for value in supplied if files_holding_text(Path(table), value)] == [], table
    assert spark.read.format("delta").load(inbox).where("_dlq_resolved_at IS NOT NULL").count() == 2
