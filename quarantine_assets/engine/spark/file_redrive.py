"""`redrive-file`: a source file set aside whole, once fixed or replaced in place, read again through the split.

The file is split as a batch of a stream of its own (`file-<its record's key>`, batch 0), so its two appends are
idempotent like any batch's, and its verdict is staged before the first of them: a redrive killed anywhere is
finished by the same command, without a row lost or written twice. The record is marked redriven last, and only
a record not yet redriven is redriven: the file's rows enter the tables once.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from quarantine_assets import codes
from quarantine_assets.commands import FILES_COMMAND
from quarantine_assets.config.models import DataQualityAction, FileSource, files_table
from quarantine_assets.engine.lake.dlq_schema import (
    KEY,
    OWNER,
    REDRIVEN_ROWS,
    RESOLVED_AT,
    RESOLVED_BY,
    SOURCE_FILE,
    SOURCE_POSITION,
    STATUS,
)
from quarantine_assets.engine.lake.statuses import QUARANTINED
from quarantine_assets.engine.lake.tables import Warehouse
from quarantine_assets.engine.spark.claims import before_writing
from quarantine_assets.engine.spark.file_quarantine import REDRIVEN, same_file, set_aside_files, unreadable
from quarantine_assets.engine.spark.merge import merge_into, when_matched_update
from quarantine_assets.engine.spark.operational_metadata import with_view_columns
from quarantine_assets.engine.spark.parse_errors import record_parsing
from quarantine_assets.engine.spark.source import ONE_FILE_PER_TASK, read_source_files
from quarantine_assets.engine.spark.split import SPLIT_STREAM, split_batch
from quarantine_assets.engine.spark.streams import BatchCommit, StageRun, session_conf
from quarantine_assets.errors import OperatorError, QuarantineError


@dataclass(frozen=True)
class FileRedrive:
    file: str
    source_table: str
    rows_validated: int
    rows_quarantined: int


def redrive_file(
    spark: SparkSession, actions: list[DataQualityAction], warehouse: Warehouse, path: str, by: str
) -> list[FileRedrive]:
    """Every set-aside record of the file not yet redriven (one per batch that set it aside), redriven in turn."""
    actions = {action.owner: action for action in actions if isinstance(action.source, FileSource)}
    inbox_tables = sorted({action.quarantine.inbox_table for action in actions.values() if action.quarantine})
    records = [record for record in set_aside_files(warehouse, inbox_tables) if same_file(record[SOURCE_FILE], path)]
    waiting = [record for record in records if record[STATUS] == QUARANTINED and record[OWNER] in actions]
    if not waiting:
        done = "it was redriven already" if records else "no file of that path was set aside"
        raise OperatorError(codes.FILE_NOT_SET_ASIDE, f"{path}: {done}; `{FILES_COMMAND}` lists the files set aside")
    return [_redrive(spark, actions[record[OWNER]], warehouse, record, by) for record in waiting]


def _redrive(
    spark: SparkSession, action: DataQualityAction, warehouse: Warehouse, record: dict, by: str
) -> FileRedrive:
    file = record[SOURCE_FILE]
    problem = unreadable(spark, action.source, file)
    if problem is not None:
        raise QuarantineError(
            codes.SOURCE_FILE_UNREADABLE,
            f"{file} still cannot be read as {action.source.format} with the source's columns ({problem}). Nothing "
            "was written; fix or replace the file under the same name, then redrive it again",
            file=action.config_file,
            field=action.name,
        )
    source_rows = read_source_files(spark, action.source, [file])
    sensitive = bool(action.quarantine.sensitive_columns)
    parsing = record_parsing(action.source, source_rows.schema, shows_values=not sensitive)
    rows = with_view_columns(source_rows, action.operational_metadata)
    columns = before_writing(spark, warehouse, action, by=by)
    with session_conf(spark, ONE_FILE_PER_TASK if SOURCE_POSITION in columns.inbox else {}):
        commit = BatchCommit.of(action, SPLIT_STREAM, f"file-{record[KEY]}", 0)
        report = split_batch(StageRun(spark, action, warehouse, by), rows, commit, parsing)
    redriven = {"validated": report.rows_validated, "quarantined": report.rows_quarantined}
    marked = spark.createDataFrame([(record[KEY], redriven)], f"{KEY} STRING, rows MAP<STRING, BIGINT>")
    assignments = {
        STATUS: f"'{REDRIVEN}'",
        RESOLVED_AT: "current_timestamp()",
        RESOLVED_BY: "new.resolved_by",
        REDRIVEN_ROWS: "new.rows",
    }
    merge_into(
        warehouse.path(files_table(action.quarantine.inbox_table)),
        marked.withColumn("resolved_by", F.lit(by)),
        f"dlq.{KEY} = new.{KEY}",
        [when_matched_update(f"dlq.{STATUS} = '{QUARANTINED}'", assignments)],
    )
    return FileRedrive(file, action.quarantine.source_table, report.rows_validated, report.rows_quarantined)
