"""File sources read the way the reference's Auto Loader reads them, and rules checked against their columns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import ORDER_RULES, orders_action
from dlq_template import dlq_tables_from_template
from typer.testing import CliRunner

from quarantine_assets.cli import app
from quarantine_assets.config.models import FileSource, Rule
from quarantine_assets.engine.spark.operator import fix_rows
from quarantine_assets.engine.spark.outbox import run_outbox
from quarantine_assets.engine.spark.recycled import run_recycled
from quarantine_assets.engine.spark.source import PINNED_SCHEMA
from quarantine_assets.engine.spark.split import run_split
from quarantine_assets.errors import ConfigError

runner = CliRunner()


def file_action(landing, **source):
    action = orders_action()
    return action.model_copy(update={"source": FileSource(path=str(landing), format="csv", **source)})


def write_csv(landing, name: str, text: str) -> None:
    landing.mkdir(parents=True, exist_ok=True)
    (landing / name).write_text(text)


def test_csv_read_without_its_header_is_refused_before_anything_is_written(spark, warehouse, tmp_path):
    landing = tmp_path / "landing"
    write_csv(landing, "a.csv", "row_no,order_id,amount,currency\n1,1,1.0,EUR\n")
    action = file_action(landing)
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)

    with pytest.raises(ConfigError) as raised:
        run_split(spark, action, warehouse, "run")

    assert {problem.code for problem in raised.value.problems} == {"QA-CFG-025"}
    message = str(raised.value)
    assert "valid_order_id" in message and "`order_id`" in message and "_c0" in message and "header: true" in message
    assert not Path(warehouse.path(action.target_table)).exists()


def test_without_inferred_column_types_every_column_is_a_string(spark, warehouse, tmp_path):
    landing = tmp_path / "landing"
    text_amounts = "row_no,order_id,amount,currency\n1,1,1.0,EUR\n2,,2.0,EUR\n3,3,n/a,EUR\n"
    write_csv(landing, "a.csv", text_amounts)
    action = file_action(landing, options={"header": "true"})
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)

    report = run_split(spark, action, warehouse, "run")

    validated = spark.read.format("delta").load(str(warehouse.path(action.target_table)))
    assert {field.name: field.dataType.simpleString() for field in validated.schema}["amount"] == "string"
    # `amount >= 0` on the text 'n/a' is NULL, a failed rule: the row is quarantined, the batch goes on.
    assert (report.rows_validated, report.rows_quarantined) == (1, 2)
    assert report.failures_per_rule["non_negative_amount"] == 1


def test_schema_hints_retype_inferred_columns_and_the_schema_is_pinned_between_runs(spark, warehouse, tmp_path):
    landing, schemas = tmp_path / "landing", tmp_path / "schemas"
    write_csv(landing, "a.csv", "row_no,order_id,amount,currency\n1,1,1.5,EUR\n")
    action = file_action(
        landing, options={"header": "true"}, schema_hints="amount DECIMAL(10,2)", schema_location=str(schemas)
    )
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)
    run_split(spark, action, warehouse, "first")
    pinned = (schemas / PINNED_SCHEMA).read_text()

    write_csv(landing, "b.csv", "row_no,order_id,amount,currency\n2,2,2.5,USD\n")
    run_split(spark, action, warehouse, "second")

    validated = spark.read.format("delta").load(str(warehouse.path(action.target_table)))
    types = {field.name: field.dataType.simpleString() for field in validated.schema}
    assert types["amount"] == "decimal(10,2)"
    assert sorted(row["row_no"] for row in validated.collect()) == ["1", "2"]
    assert (schemas / PINNED_SCHEMA).read_text() == pinned
    assert [field["name"] for field in json.loads(pinned)["fields"]] == ["row_no", "order_id", "amount", "currency"]


def test_validate_names_a_rule_whose_column_a_delta_source_lacks(spark, tmp_path):
    config = tmp_path / "configs"
    (config / "pipelines").mkdir(parents=True)
    (config / "expectations").mkdir()
    (config / "expectations" / "rules.yaml").write_text(
        "".join(f'"{rule.expression}":\n  action: drop\n  name: {rule.name}\n' for rule in ORDER_RULES)
    )
    (config / "pipelines" / "orders.yaml").write_text(
        """pipeline: p
flowgroup: f
actions:
  - {name: load, type: load, source: {type: delta, database: demo.raw, table: orders}, target: v_raw}
  - name: dq_orders
    type: transform
    transform_type: data_quality
    source: v_raw
    target: v_clean
    expectations_file: expectations/rules.yaml
  - {name: write, type: write, source: v_clean, write_target: {database: demo.bronze, table: orders}}
"""
    )
    warehouse = tmp_path / "warehouse"
    spark.createDataFrame([(1, 1.0)], "order_id INT, amount DOUBLE").write.format("delta").save(
        str(warehouse / "demo" / "raw" / "orders")
    )

    validated = runner.invoke(app, ["--config-dir", str(config), "--warehouse", str(warehouse), "validate"])

    assert validated.exit_code == 1
    assert (
        "QA-CFG-025" in validated.output and "known_currency" in validated.output and "`currency`" in validated.output
    )


def test_any_column_name_spark_reads_is_stored_and_survives_the_round_trip(spark, warehouse, tmp_path):
    landing = tmp_path / "landing"
    write_csv(landing, "a.csv", "row no,unit price,kundennummer ünï,a.b,`tick\n1,-2.5,k1,x,t\n2,3.0,k2,y,u\n")
    rules = (Rule(name="non_negative_price", expression="`unit price` >= 0"),)
    action = file_action(landing, options={"header": "true"}, infer_column_types=True)
    action = action.model_copy(update={"rules": rules})
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)

    run_split(spark, action, warehouse, "split")
    key = spark.read.format("delta").load(str(warehouse.path(action.quarantine.inbox_table))).first()["_dlq_sk"]
    fix_rows(spark, warehouse, action, [key], set_fields={"unit price": 2.5}, by="test")
    run_outbox(spark, action, warehouse, "recycle")
    run_recycled(spark, action, warehouse, "recycle")

    validated = spark.read.format("delta").load(str(warehouse.path(action.target_table)))
    assert validated.columns == ["row no", "unit price", "kundennummer ünï", "a.b", "`tick"]
    rows = sorted(tuple(row) for row in validated.collect())
    assert rows == [(1, 2.5, "k1", "x", "t"), (2, 3.0, "k2", "y", "u")]
