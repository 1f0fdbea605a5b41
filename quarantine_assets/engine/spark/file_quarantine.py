"""Whole-file quarantine: a source file that cannot be read with its source's format and schema (a CSV header
that names other columns, a file that is not of the format, cut short, or cannot be decompressed) is set aside
as one record of `<dlq_table>_files`, and the rest of its batch goes on.

A file is set aside for one batch of one stream (its record's key names both), before the batch's first commit,
and that batch never reads it again: not on a retry, and not on a re-run after a crash when the file has been
fixed since. Its rows reach the tables only through `redrive-file` (see `file_redrive`), once. A file whose read
fails is read again alone first: one that reads then (the failure was the storage's, not the file's) fails the
batch as before, and the next run retries it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from urllib.parse import unquote

import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession

from quarantine_assets import codes
from quarantine_assets.config.models import DataQualityAction, FileSource, files_table
from quarantine_assets.engine.lake.dlq_schema import (
    BATCH_ID,
    FILES_COLUMNS,
    KEY,
    SOURCE_FILE,
    SOURCE_TABLE,
    STREAM_ID,
    TIMESTAMP,
)
from quarantine_assets.engine.lake.statuses import QUARANTINED
from quarantine_assets.engine.lake.tables import Warehouse, checkpoint_folder, files_ddl
from quarantine_assets.engine.spark.dlq_tables import create_if_missing
from quarantine_assets.engine.spark.inbox import quote
from quarantine_assets.engine.spark.merge import merge_into
from quarantine_assets.engine.spark.operational_metadata import with_view_columns
from quarantine_assets.engine.spark.source import as_glob, batch_files, looks_like_glob, read_source_files

REDRIVEN = "redriven"
FILE_ERROR = "file"  # the `type` of a file record's error
HEAD_LINES = 5
HEAD_CHARACTERS = 2000
REASON_CHARACTERS = 500
# Spark names the file a task failed on; a glob that matched nothing, or a path gone, is named by the planner.
_FILE_NAMED = (
    re.compile(r"\[FAILED_READ_FILE\.\w+\] Encountered error while reading file (\S+)\. "),
    re.compile(r"CSV file: (\S+)"),
    re.compile(r"\[PATH_NOT_FOUND\] Path does not exist: (\S+)\. "),
)
# Spark's reader with `enforceSchema` off, on a CSV file whose header disagrees with the columns.
CSV_HEADER_MISMATCH = re.compile(
    r"CSV header does not conform to the schema|Number of column in CSV header is not equal to number of fields"
)
CSV_HEADER_DETAIL = re.compile(r"Expected: \S+ but found: \S+|Header length: \d+, schema size: \d+")
_CAUSE = re.compile(r"Caused by: ([^\n]+)")
_JAVA_PACKAGE = re.compile(r"^(?:[a-z_$][\w$]*\.)+(?=[A-Z])")


@dataclass
class FileBatch:
    """A micro-batch of a file source, as the split reads it: Spark's own read of the batch, unless one of its
    files is set aside, or names a file the way Spark takes for a glob. Then the batch's files are read by name,
    without those set aside: Spark's read of such a batch reads its other files again, once per such name
    (SPARK-58518)."""

    action: DataQualityAction
    warehouse: Warehouse
    stream_id: str
    batch_id: int
    run_id: str
    files: list[str]
    set_aside: set[str] = field(default_factory=set)

    @classmethod
    def of(
        cls, action: DataQualityAction, warehouse: Warehouse, stream: str, stream_id: str, batch_id: int, run_id: str
    ) -> FileBatch:
        files = batch_files(warehouse, checkpoint_folder(action.key, stream), batch_id)
        batch = cls(action, warehouse, stream_id, batch_id, run_id, files)
        batch.set_aside = batch._recorded() if action.quarantine is not None else set()
        return batch

    def rows(self, streamed: DataFrame) -> DataFrame:
        if not self.set_aside and not any(looks_like_glob(file) for file in self.files):
            return streamed
        spark = streamed.sparkSession
        readable = [file for file in self.files if file not in self.set_aside]
        if not readable:
            return spark.createDataFrame([], streamed.schema)
        rows = with_view_columns(
            read_source_files(spark, self.action.source, readable, skip_missing_files=self.action.quarantine is None),
            self.action.operational_metadata,
        )
        return rows.select(*[quote(column) for column in streamed.columns])

    def set_aside_file_of(self, spark: SparkSession, error: BaseException) -> bool:
        """Sets aside the file of the batch that `error` names, if reading it alone fails too; whether it did."""
        named = _file_named(str(error))
        file = next(
            (file for file in self.files if named and file not in self.set_aside and same_file(file, named)), None
        )
        if file is None:
            return False
        problem = unreadable(spark, self.action.source, file)
        if problem is None:
            return False
        self._record(spark, file, problem)
        self.set_aside.add(file)
        return True

    def _key(self, file: str) -> str:
        identity = "\u0001".join((self.action.quarantine.source_table, self.stream_id, str(self.batch_id), file))
        return hashlib.sha256(identity.encode()).hexdigest()[:32]

    def _recorded(self) -> set[str]:
        """The files set aside for this batch by an earlier attempt of it."""
        table = files_table(self.action.quarantine.inbox_table)
        if not self.warehouse.is_delta_table(table):
            return set()
        condition = (
            (pc.field(SOURCE_TABLE) == self.action.quarantine.source_table)
            & (pc.field(STREAM_ID) == self.stream_id)
            & (pc.field(BATCH_ID) == self.batch_id)
        )
        dataset = self.warehouse.delta_table(table).to_pyarrow_dataset()
        return set(dataset.to_table(filter=condition, columns=[SOURCE_FILE]).column(0).to_pylist())

    def _record(self, spark: SparkSession, file: str, problem: str) -> None:
        """One record per file and batch, whatever the retries: merged in by its key."""
        quarantine = self.action.quarantine
        code = codes.CSV_HEADER_MISMATCH if CSV_HEADER_MISMATCH.search(problem) else codes.SOURCE_FILE_UNREADABLE
        size, modified_at = _file_status(spark, file)
        head = None if quarantine.sensitive_columns else _head(spark, file)
        record = (
            self._key(file),
            quarantine.source_table,
            QUARANTINED,
            datetime.now(timezone.utc),
            file,
            [(FILE_ERROR, code, problem)],
            head,
            size,
            modified_at,
            self.action.owner,
            self.run_id,
            self.stream_id,
            self.batch_id,
            None,
            None,
            None,
        )
        schema = ", ".join(f"{name} {sql_type.removesuffix(' NOT NULL')}" for name, sql_type in FILES_COLUMNS.items())
        table = files_table(quarantine.inbox_table)
        create_if_missing(spark, self.warehouse, table, files_ddl(self.warehouse, quarantine.inbox_table))
        path = self.warehouse.path(table)
        new = spark.createDataFrame([record], schema)
        merge_into(path, new, f"dlq.{KEY} = new.{KEY}", ["WHEN NOT MATCHED THEN INSERT *"])


def unreadable(spark: SparkSession, source: FileSource, file: str) -> str | None:
    """Why the file cannot be read with its source's format and schema, read alone and whole; None if it can."""
    try:
        read_source_files(spark, source, [file]).write.format("noop").mode("overwrite").save()
    except Exception as error:  # noqa: BLE001 - whatever stops the read is the file's problem, in Spark's words
        return _reason(str(error))
    return None


def same_file(uri: str, path: str) -> bool:
    """Whether a URI as a stream's log names a file and a path as a person or an error names it are one file:
    `file:///a%20b.csv`, `file:/a b.csv` and `/a b.csv` are."""
    return _plain(uri) == _plain(path)


def _plain(path: str) -> str:
    plain = unquote(path).replace("\\", "")
    return re.sub(r"^file:/*", "/", plain)


def _file_named(error: str) -> str | None:
    return next((found[1] for pattern in _FILE_NAMED if (found := pattern.search(error))), None)


def _reason(error: str) -> str:
    """Spark's own words for the file's problem: the innermost cause, else the first line."""
    causes = _CAUSE.findall(error)
    reason = causes[-1] if causes else next((line for line in error.splitlines() if line.strip()), error)
    reason = _JAVA_PACKAGE.sub("", reason.strip())
    if detail := CSV_HEADER_DETAIL.search(error):
        reason = f"{reason} ({detail[0]})"
    return reason[:REASON_CHARACTERS]


def _file_status(spark: SparkSession, file: str) -> tuple[int | None, datetime | None]:
    try:
        status = spark.read.format("binaryFile").load(as_glob(file)).select("length", "modificationTime").first()
    except Exception:  # noqa: BLE001 - a file gone since it was listed has no size: the record says so
        return None, None
    return (status["length"], status["modificationTime"]) if status else (None, None)


def _head(spark: SparkSession, file: str) -> str | None:
    """The file's first lines as text (decompressed where its name says so and it can be), for a person to see
    what is wrong without fetching it."""
    try:
        lines = spark.read.text(as_glob(file)).limit(HEAD_LINES).collect()
    except Exception:  # noqa: BLE001 - a file that cannot even be read as lines of text has no head to show
        return None
    return "\n".join(line["value"] for line in lines)[:HEAD_CHARACTERS]


def set_aside_files(warehouse: Warehouse, inbox_tables: list[str]) -> list[dict]:
    """Every file record of the DLQs, newest first, read without a JVM."""
    found = []
    for inbox_table in inbox_tables:
        table = files_table(inbox_table)
        if warehouse.is_delta_table(table):
            found += warehouse.delta_table(table).to_pyarrow_table().to_pylist()
    return sorted(found, key=lambda record: record[TIMESTAMP], reverse=True)
