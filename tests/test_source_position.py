"""Given only its DLQ row, the original record is read back from the source, by file and position, and it is
the same record: for CSV and JSON files and for a Delta table, with several small files in one batch."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyarrow.parquet
import pytest
from builders import ORDERS_SCHEMA, orders_action

from quarantine_assets.config.models import FileSource
from quarantine_assets.engine.split import run_split
from quarantine_assets.engine.tables import create_dlq_tables

COLUMNS = ("row_no", "order_id", "amount", "currency")
# Per file: good and bad records; small files, which Spark would otherwise read in one task.
CSV_FILES = {
    "a file.csv": ["1,1,1.0,EUR", "2,,2.0,EUR", "3,3,-1.0,EUR"],
    "b.csv": ["4,4,4.0,EUR", "5,five,5.0,EUR", "6,6,6.0,EUR", "7,,7.0,EUR"],
    "c.csv": ["8,8,-8.0,USD"],
}
JSON_FILES = {
    "a file.json": ['{"row_no":1,"order_id":1,"amount":1.0,"currency":"EUR"}', "", '{"row_no":2,"order_id":null}'],
    "b.json": ['{"row_no":4,"order_id":4,"amount":4.0,"currency":"EUR"}', '{"row_no":5,"order_id":', ""],
    "c.json": ['{"row_no":6,"order_id":6,"amount":6.0,"currency":"EUR"}', '{"row_no":7,"amount":-7.0}'],
}


def original_record(record) -> dict | str:
    """The record at the row's position in the row's file, read with no Spark at all: the fields of a
    parsed record by name, or the raw text of one that did not parse."""
    path = Path(unquote(urlparse(record["_dlq_source_file"]).path))
    position = record["_dlq_source_position"]
    assert position["split_start"] == 0  # small files: Spark read each whole
    if path.suffix == ".parquet":
        return pyarrow.parquet.read_table(path).to_pylist()[position["record"]]
    if path.suffix == ".json":
        line = [line for line in path.read_text().splitlines() if line][position["record"]]
        return line if record["_dlq_rescued_data"] else json.loads(line)
    with path.open(newline="") as text:
        fields = list(csv.reader(text))[1:][position["record"]]
    if record["_dlq_rescued_data"]:
        return ",".join(fields)
    return {name: (None if value == "" else value) for name, value in zip(COLUMNS, fields, strict=True)}


def as_written(value) -> str | None:
    """A payload value as a CSV file writes it."""
    return None if value is None else str(value)


@pytest.mark.parametrize("source_format", ["csv", "json", "delta"])
def test_the_original_record_is_read_back_from_the_dlq_row_alone(spark, warehouse, tmp_path, source_format):
    action = orders_action()
    if source_format == "delta":
        for rows in ([(1, 1, 1.0, "EUR"), (2, None, 2.0, "EUR")], [(3, 3, -3.0, "EUR")], [(4, 4, 4.0, "XXX")]):
            table = spark.createDataFrame(rows, ORDERS_SCHEMA).coalesce(1)
            table.write.format("delta").mode("append").save(str(warehouse.path(action.source.table)))
    else:
        landing = tmp_path / "landing"
        landing.mkdir()
        files = CSV_FILES if source_format == "csv" else JSON_FILES
        header = ",".join(COLUMNS) + "\n" if source_format == "csv" else ""
        for name, lines in files.items():
            (landing / name).write_text(header + "\n".join(lines) + "\n")
        options = {"header": "true"} if source_format == "csv" else {}
        source = FileSource(path=str(landing), format=source_format, options=options, schema_ddl=ORDERS_SCHEMA)
        action = action.model_copy(update={"source": source})
    create_dlq_tables(spark, warehouse, action.quarantine.dlq_table)

    run_split(spark, action, warehouse, "run")

    records = spark.read.format("delta").load(str(warehouse.path(action.quarantine.dlq_table))).collect()
    expected_rows = {"csv": 5, "json": 3, "delta": 3}[source_format]  # the bad records above
    assert len(records) == expected_rows
    for record in records:
        original = original_record(record)
        if record["_dlq_rescued_data"]:
            assert original == record["_dlq_rescued_data"]
            continue
        payload = json.loads(record["_row_data"].toJson())
        if source_format == "csv":
            payload = {name: as_written(payload.get(name)) for name in COLUMNS}
        assert {name: original.get(name) for name in COLUMNS} == {name: payload.get(name) for name in COLUMNS}
