"""Given only its DLQ row, the original record is read back from the source, by file and position, and it is
the same record: for CSV and JSON files and for a Delta table, with several small files in one batch."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from urllib.parse import unquote, urlparse

import deltalake
import pyarrow.parquet
import pytest
from builders import ORDERS_SCHEMA, orders_action
from dlq_template import dlq_tables_from_template

from quarantine_assets.config.models import FileSource
from quarantine_assets.engine.lake.locate import record_location, source_line
from quarantine_assets.engine.spark.split import run_split
from quarantine_assets.errors import OperatorError

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
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)

    run_split(spark, action, warehouse, "run")

    records = spark.read.format("delta").load(str(warehouse.path(action.quarantine.inbox_table))).collect()
    expected_rows = {"csv": 5, "json": 3, "delta": 3}[source_format]  # the bad records above
    assert len(records) == expected_rows
    for record in records:
        location = record_location(record.asDict(), action.source)
        position = record["_dlq_source_position"]
        if source_format == "delta":
            assert (location.label, location.where) == (
                "source row",
                f"record {position['record']} of {record['_dlq_source_file']}, "
                f"in version {record['_dlq_source_version']} of {action.source.table}",
            )
        else:
            assert location.label == "source line"
            assert location.where.startswith(record["_dlq_source_file"] + ":")
            if record["_dlq_rescued_data"]:
                assert location.text == record["_dlq_rescued_data"]
        original = original_record(record)
        if record["_dlq_rescued_data"]:
            assert original == record["_dlq_rescued_data"]
            continue
        payload = json.loads(record["_row_data"].toJson())
        if source_format == "csv":
            payload = {name: as_written(payload.get(name)) for name in COLUMNS}
        assert {name: original.get(name) for name in COLUMNS} == {name: payload.get(name) for name in COLUMNS}
    if source_format == "delta":
        assert_delta_version_holds_the_file_after_compaction(spark, str(warehouse.path(action.source.table)), records)


def file_names(table: deltalake.DeltaTable) -> set[str]:
    return {uri.rsplit("/", 1)[-1] for uri in table.file_uris()}


def assert_delta_version_holds_the_file_after_compaction(spark, source_path: str, records) -> None:
    """Compaction takes the rows' data files out of the source's newest version; the version each row
    names still holds its file, so time travel, file and position find the row."""
    spark.sql(f"OPTIMIZE delta.`{source_path}`")
    newest = file_names(deltalake.DeltaTable(source_path))
    for record in records:
        file_name = record["_dlq_source_file"].rsplit("/", 1)[-1]
        assert file_name not in newest
        assert file_name in file_names(deltalake.DeltaTable(source_path, version=record["_dlq_source_version"]))


# Files with what a line reader must skip or join: CRLF and CR line ends, blank and whitespace-only lines, a
# comment, a header after a blank line, a quoted value over two lines, a record cut short.
HEADER = ",".join(COLUMNS)
AWKWARD_FILES = {
    "csv": (
        {"header": "true", "comment": "#"},
        ["", HEADER, "1,1,1.0,EUR", "   ", "# a note", "2,,2.0,EUR", "", "3,three,3.0,EUR", "4,4,-4.0,EUR"],
        "\r\n",
    ),
    "csv_multiline": (
        {"header": "true", "multiLine": "true"},
        [HEADER, "1,1,1.0,EUR", '2,,2.0,"EU', 'R"', "", "3,three,3.0,EUR", "4,4,-4.0,EUR"],
        "\n",
    ),
    "json": (
        {},
        [
            '{"row_no":1,"order_id":1,"amount":1.0,"currency":"EUR"}',
            "  ",
            '{"row_no":2,"order_id":null}',
            "",
            '{"row_no":3,',
            '{"row_no":4,"order_id":4,"amount":-4.0,"currency":"EUR"}',
        ],
        "\r",
    ),
}


def identifying_line(lines: list[str], record, source_format: str) -> int:
    """The number, from 1, of the line a DLQ row's record starts at, found by its raw text or its row_no."""
    if record["_dlq_rescued_data"]:
        first = record["_dlq_rescued_data"]
        return lines.index(first) + 1
    row_no = json.loads(record["_row_data"].toJson())["row_no"]
    prefix = f"{row_no}," if source_format == "csv" else f'{{"row_no":{row_no},'
    return next(number for number, line in enumerate(lines, 1) if line.startswith(prefix))


@pytest.mark.parametrize("case", list(AWKWARD_FILES))
def test_a_rows_line_number_and_byte_offset_find_its_record(spark, warehouse, tmp_path, case):
    options, lines, line_end = AWKWARD_FILES[case]
    source_format = case.split("_")[0]
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / f"awkward name.{source_format}").write_bytes(line_end.join(lines).encode() + line_end.encode())
    source = FileSource(path=str(landing), format=source_format, options=options, schema_ddl=ORDERS_SCHEMA)
    action = orders_action().model_copy(update={"source": source})
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)

    run_split(spark, action, warehouse, "run")

    records = spark.read.format("delta").load(str(warehouse.path(action.quarantine.inbox_table))).collect()
    assert len(records) == 3
    for record in records:
        position = record["_dlq_source_position"]
        found = source_line(record["_dlq_source_file"], position["split_start"], position["record"], source)
        expected = identifying_line(lines, record, source_format)
        assert found.line == expected
        assert found.byte_offset == sum(len(line.encode()) + len(line_end) for line in lines[: expected - 1])
        assert found.text.split("\n")[0] == lines[expected - 1]


def test_the_line_number_holds_in_a_file_spark_read_in_several_splits(spark, warehouse, tmp_path):
    lines = [
        f'{{"row_no":{n},"order_id":{"null" if n % 7 == 0 else n},"amount":1.0,"currency":"EUR"}}' for n in range(60)
    ]
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "big.json").write_text("\n".join(lines) + "\n")
    source = FileSource(path=str(landing), format="json", schema_ddl=ORDERS_SCHEMA)
    action = orders_action().model_copy(update={"source": source})
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)
    spark.conf.set("spark.sql.files.maxPartitionBytes", "500")  # about 8 lines per split
    try:
        run_split(spark, action, warehouse, "run")
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")

    records = spark.read.format("delta").load(str(warehouse.path(action.quarantine.inbox_table))).collect()
    assert len(records) == 9  # row_no 0, 7, ..., 56
    assert {record["_dlq_source_position"]["split_start"] > 0 for record in records} == {True, False}
    for record in records:
        position = record["_dlq_source_position"]
        found = source_line(record["_dlq_source_file"], position["split_start"], position["record"], source)
        assert found.line == identifying_line(lines, record, "json")
        assert found.text == lines[found.line - 1]


@pytest.mark.parametrize(
    ("file_format", "options", "name"),
    [
        ("parquet", {}, "a.csv"),  # no lines to count
        ("json", {"multiLine": "true"}, "a.csv"),  # one document per file
        ("csv", {"multiLine": "true", "sep": "||"}, "a.csv"),  # a separator Python's csv cannot follow
        ("csv", {"lineSep": ";"}, "a.csv"),
        ("csv", {}, "gone.csv"),  # the file is no longer there
        ("csv", {}, "a.csv"),  # the file holds fewer records than the position says: it changed
    ],
)
def test_a_record_that_cannot_be_found_by_line_is_refused_with_a_code(tmp_path, file_format, options, name):
    (tmp_path / "a.csv").write_text("1,2\n")
    source = FileSource(path=str(tmp_path), format=file_format, options=options)

    with pytest.raises(OperatorError) as refused:
        source_line((tmp_path / name).as_uri(), 0, 5, source)

    assert refused.value.code == "QA-OPS-013"
