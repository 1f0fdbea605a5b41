"""Incremental reads of an action's source as a Structured Streaming DataFrame."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import unquote

import pyarrow
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, DataFrameReader, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamReader
from pyspark.sql.types import StructType

from quarantine_assets import codes
from quarantine_assets.config.models import DeltaSource, FileSource, Project
from quarantine_assets.engine.lake.dlq_schema import (
    ARRIVED_AT,
    DATA_FILE_NAME,
    SOURCE_FILE,
    SOURCE_POSITION,
    SOURCE_VERSION,
)
from quarantine_assets.engine.lake.tables import Warehouse
from quarantine_assets.engine.spark.rules import SPARK_RESCUED_DATA, rule_column_problems
from quarantine_assets.engine.spark.sensitive_columns import sensitive_column_problems
from quarantine_assets.errors import Problem, QuarantineError

# Spark numbers each task's rows from 0 in the low 33 bits of `monotonically_increasing_id`.
_ROW_IN_TASK = (1 << 33) - 1
# Spark packs small files into one task; an opening cost above any task's size gives every file (or
# split of a file larger than spark.sql.files.maxPartitionBytes) a task of its own.
ONE_FILE_PER_TASK = {"spark.sql.files.openCostInBytes": str(1 << 40)}
# Formats whose unparseable records Spark can keep as text in a column of their own.
RESCUING_FORMATS = ("csv", "json")
PINNED_SCHEMA = "_quarantine_assets_schema.json"
# What Hadoop's glob takes for a pattern rather than a character of a name.
_GLOB_CHARACTERS = re.compile(r"[\\{}\[\]*?]")


def read_source_stream(
    spark: SparkSession, source: FileSource | DeltaSource, warehouse: Warehouse, *, skip_missing_files: bool = False
) -> DataFrame:
    """`skip_missing_files`: a file source's file gone between its listing and its read is skipped, as Spark can;
    else its read fails, naming the file, for the split to set it aside (where there is a DLQ to hold the record)."""
    if isinstance(source, DeltaSource):
        return spark.readStream.format("delta").options(**source.options).load(warehouse.path(source.table))
    return _with_file_columns(_file_reader(spark.readStream, spark, source, skip_missing_files).load(source.path))


def with_source_position(rows: DataFrame) -> DataFrame:
    """Each row's place in the file it was read from: the byte its split of the file starts at (0 unless
    Spark split the file), and its index, from 0, among the records read from there. Exact only for a
    batch read with `ONE_FILE_PER_TASK`, and only before any filter: every row read must be numbered."""
    record = F.monotonically_increasing_id().bitwiseAND(F.lit(_ROW_IN_TASK))
    split_start = F.input_file_block_start()
    return rows.withColumn(SOURCE_POSITION, F.struct(split_start.alias("split_start"), record.alias("record")))


def with_delta_file_context(
    spark: SparkSession, rows: DataFrame, source: DeltaSource, warehouse: Warehouse
) -> DataFrame:
    """Rows of a Delta source's batch, each naming the data file its scan read it from (`SOURCE_FILE`),
    with the time the source's log records for that file (its add action's modification time: when it
    was written), and a version of the source whose snapshot holds that file: `VERSION AS OF` it, file
    and position find the row even after the source is compacted, until the file is vacuumed.

    A Delta source's streaming batches expose no `_metadata`, but their scan still knows its file.
    Data file names are unique within a table, so the name alone finds the file's add action. The
    snapshot is the source's newest when the batch's rejected rows are written, so it holds every file
    of the batch that was not removed since.
    """
    snapshot = warehouse.delta_table(source.table)
    adds = pyarrow.table(snapshot.get_add_actions(flatten=True))
    names = [path.rsplit("/", 1)[-1] for path in adds.column("path").to_pylist()]
    added = pyarrow.table({DATA_FILE_NAME: names, "added_ms": adds.column("modification_time")})  # epoch ms
    arrivals = spark.createDataFrame(added).select(
        DATA_FILE_NAME,
        F.timestamp_millis("added_ms").alias(ARRIVED_AT),
        F.lit(snapshot.version()).cast("bigint").alias(SOURCE_VERSION),
    )
    file_name = F.substring_index(rows[SOURCE_FILE], "/", -1)  # byte-wise: no regex, no array per row
    return rows.join(F.broadcast(arrivals), file_name == arrivals[DATA_FILE_NAME], "left").drop(DATA_FILE_NAME)


def known_source_schema(
    spark: SparkSession, source: FileSource | DeltaSource, warehouse: Warehouse
) -> StructType | None:
    """The columns a split will see, where they are known without reading any data: a declared schema,
    or an existing Delta table. None when only the files themselves can tell."""
    if isinstance(source, DeltaSource):
        if not warehouse.is_delta_table(source.table):
            return None
        return spark.read.format("delta").load(warehouse.path(source.table)).schema
    if source.schema_ddl:
        return (
            spark.createDataFrame([], source.schema_ddl)
            .schema.add(SPARK_RESCUED_DATA, "string")
            .add(SOURCE_FILE, "string")
        )
    return None


def rules_against_sources(spark: SparkSession, project: Project, warehouse: Warehouse) -> list[Problem]:
    """Every action's rules and sensitive columns against its source's columns, where they are known now;
    each problem once."""
    problems = []
    for action in project.actions:
        schema = known_source_schema(spark, action.source, warehouse)
        if schema is not None:
            problems += rule_column_problems(spark, schema, action.rules, action.expectations_file)
            problems += sensitive_column_problems(action, schema)
    return list(dict.fromkeys(problems))


def read_source_files(
    spark: SparkSession, source: FileSource, files: list[str], *, skip_missing_files: bool = False
) -> DataFrame:
    """The rows of some files of a file source (URIs as its stream's log names them), read as its stream reads
    them. Each file is named as a glob that matches itself alone: Spark's reader of a list of paths with
    globbing off reads the other files again once per name that looks like a glob (SPARK-58518)."""
    reader = _file_reader(spark.read, spark, source, skip_missing_files)
    if not _is_glob(source.path):
        reader = reader.option("basePath", source.path)  # partition columns from key=value folders, as the stream
    return _with_file_columns(reader.load([as_glob(file) for file in files]))


def looks_like_glob(file: str) -> bool:
    """Whether a file's name is one Spark's readers take for a glob."""
    return _is_glob(unquote(file))


def _is_glob(path: str) -> bool:
    return bool(_GLOB_CHARACTERS.search(path))


def as_glob(file: str) -> str:
    """A file's URI as a path Spark's readers take, as a glob that matches that file alone."""
    return _GLOB_CHARACTERS.sub(r"\\\g<0>", unquote(file))


def _file_reader(
    read: DataStreamReader | DataFrameReader, spark: SparkSession, source: FileSource, skip_missing_files: bool
):
    """Rows that do not parse keep their raw text in `_rescued_data`, so they reach the DLQ, not the void."""
    schema = file_schema(spark, source)
    # Spark matches CSV values to columns by position; checking the header sets aside a file whose columns moved.
    defaults = {"ignoreMissingFiles": str(skip_missing_files).lower()}
    defaults |= {"enforceSchema": "false"} if source.format == "csv" else {}
    reader = read.format(source.format).options(**(defaults | source.options))
    if source.format in RESCUING_FORMATS:
        if SPARK_RESCUED_DATA not in schema.fieldNames():
            schema = schema.add(SPARK_RESCUED_DATA, "string")
        reader = reader.option("columnNameOfCorruptRecord", SPARK_RESCUED_DATA).option("mode", "PERMISSIVE")
    return reader.schema(schema)


def _with_file_columns(rows: DataFrame) -> DataFrame:
    return rows.select(
        "*",
        F.col("_metadata.file_path").alias(SOURCE_FILE),
        F.col("_metadata.file_modification_time").alias(ARRIVED_AT),
    )


def batch_files(warehouse: Warehouse, checkpoint: str, batch_id: int) -> list[str]:
    """The files a file stream's micro-batch reads, as URIs, from its checkpoint (relative to the warehouse root):
    the batch's offsets name the span of the source's file log it covers, whose entries name the files. The log
    compacts every few batches into `<n>.compact`, which keeps each entry's batch."""
    end = _log_offset(warehouse, f"{checkpoint}/offsets/{batch_id}")
    start = _log_offset(warehouse, f"{checkpoint}/offsets/{batch_id - 1}") if batch_id > 0 else -1
    files = []
    for log_batch in range(start + 1, end + 1):
        log = f"{checkpoint}/sources/0/{log_batch}"
        text = warehouse.read_text(log if warehouse.holds_file(log) else f"{log}.compact")
        entries = [json.loads(line) for line in text.splitlines()[1:] if line.strip()]
        files += [entry["path"] for entry in entries if entry["batchId"] == log_batch]
    return files


def _log_offset(warehouse: Warehouse, offsets: str) -> int:
    """A file source's place in its log: the third line of an offsets file, `{"logOffset": n}`."""
    return int(json.loads(warehouse.read_text(offsets).splitlines()[2])["logOffset"])


def file_schema(spark: SparkSession, source: FileSource) -> StructType:
    """Declared; else pinned at the schema location; else inferred from the files there now, the way
    Auto Loader does it (strings unless column types are inferred, then the hints), and pinned."""
    if source.schema_ddl:
        return _parsed(spark, source.schema_ddl)
    pinned = Path(source.schema_location) / PINNED_SCHEMA if source.schema_location else None
    if pinned is not None and pinned.is_file():
        return StructType.fromJson(json.loads(pinned.read_text(encoding="utf-8")))
    inference = {"inferSchema": "true"} if source.infer_column_types else {"primitivesAsString": "true"}
    try:
        schema = spark.read.format(source.format).options(**source.options, **inference).load(source.path).schema
    except AnalysisException as error:
        raise QuarantineError(
            codes.SOURCE_SCHEMA_UNKNOWN,
            f"no schema is declared for {source.path} and none can be inferred yet ({error.getCondition()}): "
            "declare source.schema, or run again once files have arrived",
        ) from None
    if source.schema_hints:
        # A hint retypes the inferred column of its name, in place, or adds the column.
        fields = {field.name: field for field in schema.fields}
        fields |= {hint.name: hint for hint in _parsed(spark, source.schema_hints).fields}
        schema = StructType(list(fields.values()))
    if pinned is not None:
        pinned.parent.mkdir(parents=True, exist_ok=True)
        pinned.write_text(schema.json(), encoding="utf-8")
    return schema


def _parsed(spark: SparkSession, ddl: str) -> StructType:
    return spark.createDataFrame([], ddl).schema
