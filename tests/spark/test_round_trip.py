"""A recycled value comes back exactly as it left, in every type a Delta table holds, or fails payload_type."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from builders import orders_action
from dlq_template import dlq_tables_from_template
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from quarantine_assets.config.models import Rule
from quarantine_assets.engine.spark.operator import fix_rows
from quarantine_assets.engine.spark.outbox import run_outbox
from quarantine_assets.engine.spark.recycled import run_recycled
from quarantine_assets.engine.spark.split import run_split
from quarantine_assets.errors import ConfigError

EVERY_TYPE = """
    row_no INT, flag STRING,
    tiny TINYINT, small SMALLINT, whole INT, big BIGINT,
    money DECIMAL(10,2), precise DECIMAL(38,18), single FLOAT, real DOUBLE,
    text STRING, yes BOOLEAN, day DATE, moment TIMESTAMP, wall_clock TIMESTAMP_NTZ, bytes BINARY,
    nested STRUCT<a: INT, inner: STRUCT<c: DECIMAL(5,3), tags: ARRAY<STRING>>>,
    items ARRAY<STRUCT<qty: INT, price: DECIMAL(10,2)>>,
    lookup MAP<STRING, ARRAY<DOUBLE>>
"""
ROWS = """
SELECT * FROM VALUES
  (1, 'bad', CAST(-128 AS TINYINT), CAST(-32768 AS SMALLINT), -2147483648, 9223372036854775807,
   CAST(-12.34 AS DECIMAL(10,2)), CAST('12345678901234567890.123456789012345678' AS DECIMAL(38,18)),
   CAST('NaN' AS FLOAT), CAST(-0.0 AS DOUBLE), 'ünï €😀 "quoted"', true, DATE'0001-01-01',
   TIMESTAMP'2024-02-29 23:59:59.999999', TIMESTAMP_NTZ'9999-12-31 23:59:59.999999', X'00FF10',
   named_struct('a', 1, 'inner', named_struct('c', CAST(-0.001 AS DECIMAL(5,3)), 'tags', array('x', NULL))),
   array(named_struct('qty', 2, 'price', CAST(0.10 AS DECIMAL(10,2))), NULL),
   map('k', array(CAST('-Infinity' AS DOUBLE), 1e-308D, NULL))),
  (2, 'bad', NULL, NULL, NULL, NULL, NULL, NULL, CAST(-0.0 AS FLOAT), CAST('Infinity' AS DOUBLE), '', false,
   DATE'9999-12-31', TIMESTAMP'1970-01-01 00:00:00', NULL, X'', NULL, array(), map()),
  (3, 'ok', 1, 2, 3, 4, 5.00, CAST(6 AS DECIMAL(38,18)), CAST(7.5 AS FLOAT), 0.1D, 'plain',
   NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)
"""
FLAG_RULE = (Rule(name="flag_ok", expression="flag = 'ok'"),)


def exactly(value):
    """Values compared by representation: a float's bits (so -0.0 and NaN count), not its equality."""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else value.hex()
    if isinstance(value, dict):
        return {key: exactly(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [exactly(item) for item in value]
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def rows_by_number(frame) -> dict[int, dict]:
    return {row["row_no"]: exactly(row.asDict(recursive=True)) for row in frame.collect()}


@pytest.fixture
def every_type(spark, warehouse):
    action = orders_action(name="dq_types", source_table="demo.bronze.types", rules=FLAG_RULE)
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)
    schema = StructType.fromDDL(EVERY_TYPE)
    source = spark.sql(ROWS).select(
        *[F.col(f"col{index + 1}").cast(field.dataType).alias(field.name) for index, field in enumerate(schema)]
    )
    source.write.format("delta").save(str(warehouse.path(action.source.table)))
    run_split(spark, action, warehouse, "split")
    return action, spark.read.format("delta").load(str(warehouse.path(action.source.table)))


def test_every_type_round_trips_field_by_field_through_fix_and_recycle(spark, warehouse, every_type):
    action, source = every_type
    inbox = spark.read.format("delta").load(str(warehouse.path(action.quarantine.inbox_table)))
    keys = [row["_dlq_sk"] for row in inbox.collect()]
    assert len(keys) == 2

    fix_rows(spark, warehouse, action, keys, set_fields={"flag": "ok"}, by="test")
    run_outbox(spark, action, warehouse, "recycle")
    report = run_recycled(spark, action, warehouse, "recycle")

    assert (report.rows_landed, report.rows_requarantined) == (2, 0)
    expected = rows_by_number(source)
    for row in expected.values():
        row["flag"] = "ok"
    landed = rows_by_number(spark.read.format("delta").load(str(warehouse.path(action.target_table))))
    assert landed.keys() == expected.keys()
    for number, row in expected.items():
        for field, value in row.items():
            assert landed[number][field] == value, f"row {number}, {field}"


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"money": 12.345}, "money = 12.345 is not exactly decimal(10,2)"),
        ({"whole": 1.5}, "whole = 1.5 is not exactly int"),
        ({"tiny": 300}, "tiny = 300 is not exactly tinyint"),
        ({"items": [{"qty": 1}, {"qty": 1.5, "price": 1}]}, "items[1].qty = 1.5 is not exactly int"),
        ({"nested": {"a": 1, "inner": {"c": 0.0001}}}, "nested.inner.c = 0.0001 is not exactly decimal(5,3)"),
        ({"nested": {"a": 1, "colour": "red"}}, "nested.colour is not a field of"),
        ({"lookup": {"k": ["x"]}}, 'lookup[k][0] = "x" is not exactly double'),
        ({"bytes": "AP8Q"}, 'bytes = "AP8Q" is not exactly binary'),
        ({"day": "2024-01-01 10:00"}, 'day = "2024-01-01 10:00" is not exactly date'),
    ],
    ids=[
        "decimal-scale",
        "int-fraction",
        "tinyint-range",
        "array-of-struct",
        "nested-decimal",
        "unknown-nested",
        "map",
        "binary-text",
        "date-time",
    ],
)
def test_a_value_that_would_change_fails_payload_type_naming_path_and_value(
    spark, warehouse, every_type, change, problem
):
    action, _ = every_type
    inbox_path = str(warehouse.path(action.quarantine.inbox_table))
    key = spark.read.format("delta").load(inbox_path).where("variant_get(_row_data, '$.row_no', 'int') = 2").first()
    fix_rows(spark, warehouse, action, [key["_dlq_sk"]], set_fields={"flag": "ok", **change}, by="test")
    run_outbox(spark, action, warehouse, "recycle")
    report = run_recycled(spark, action, warehouse, "recycle")

    assert (report.rows_landed, report.rows_requarantined) == (0, 1)
    row = spark.read.format("delta").load(inbox_path).where(f"_dlq_sk = '{key['_dlq_sk']}'").first()
    assert row["_dlq_status"] == "quarantined"
    failures = [failure["rule"] for failure in row["_dlq_failed_rules"] if failure["name"] == "payload_type"]
    assert any(problem in failure for failure in failures), failures
    landed = spark.read.format("delta").load(str(warehouse.path(action.target_table)))
    assert [r["row_no"] for r in landed.collect()] == [3]


def test_a_source_map_with_keys_that_are_not_strings_is_refused_before_anything_is_written(spark, warehouse):
    action = orders_action(name="dq_maps", source_table="demo.bronze.maps", rules=FLAG_RULE)
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)
    spark.sql("SELECT 1 AS row_no, 'bad' AS flag, array(named_struct('counts', map(1, 'one'))) AS items").write.format(
        "delta"
    ).save(str(warehouse.path(action.source.table)))

    with pytest.raises(ConfigError) as refused:
        run_split(spark, action, warehouse, "split")

    assert [(problem.code, problem.field) for problem in refused.value.problems] == [("QA-CFG-029", "items[].counts")]
    assert not Path(warehouse.path(action.target_table)).exists()
