"""Retention: resolved inbox rows older than their action's retention are deleted; open rows never are.

Resolved: landed after a recycle (`recycled` with `_dlq_resolved_at` set), discarded, exhausted. A
`recycled` row without the stamp is still on its way to the validated table, so it stays, as do
`quarantined` and `fixed` rows whatever their age. The DELETE writes deletion vectors and `delete`
images to the change feed, which neither the outbox nor the sensor reads as fixed rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from quarantine_assets.config.models import DataQualityAction, files_table
from quarantine_assets.engine.lake.dlq_columns import DlqColumns
from quarantine_assets.engine.lake.dlq_schema import KEY, RESOLVED_AT, SOURCE_TABLE, STATUS, TIMESTAMP, UPDATED_AT
from quarantine_assets.engine.lake.statuses import DISCARDED, EXHAUSTED, RECYCLED
from quarantine_assets.engine.lake.table_health import require_healthy_dlq
from quarantine_assets.engine.lake.tables import Warehouse
from quarantine_assets.engine.spark.claims import before_writing
from quarantine_assets.engine.spark.file_quarantine import REDRIVEN
from quarantine_assets.engine.spark.file_removal import SOURCE, FileRemoval, readable_table_id, remove_files_holding
from quarantine_assets.engine.spark.merge import delete_where
from quarantine_assets.engine.spark.payload_types import PAYLOAD, sql_string
from quarantine_assets.engine.spark.redaction import holds_clear_values


@dataclass(frozen=True)
class PurgeReport:
    source_table: str
    cutoff: datetime  # rows resolved before this instant were (or, in a dry run, would be) deleted
    dry_run: bool
    rows_by_status: dict[str, int]
    warnings: list[str] = field(default_factory=list)
    files: FileRemoval | None = None  # with `physically`
    file_records: int = 0  # records of source files redriven before the cutoff (see `file_quarantine`)

    @property
    def rows(self) -> int:
        return sum(self.rows_by_status.values())


def purge_resolved(
    spark: SparkSession,
    warehouse: Warehouse,
    action: DataQualityAction,
    older_than: timedelta,
    *,
    dry_run: bool,
    by: str,
    now: datetime | None = None,
    physically: bool = False,
) -> PurgeReport:
    """Delete the action's resolved inbox rows resolved more than `older_than` ago; a dry run only counts them.
    `physically`: then remove them from the table's files too (see `file_removal`)."""
    cutoff = (now or datetime.now(timezone.utc)) - older_than
    quarantine = action.quarantine
    columns = require_healthy_dlq(warehouse, action) if dry_run else before_writing(spark, warehouse, action, by=by)
    condition = f"{SOURCE_TABLE} = {sql_string(quarantine.source_table)} AND ({resolved_before(columns, cutoff)})"
    path = warehouse.path(quarantine.inbox_table)
    counted = spark.read.format("delta").load(path).where(condition).groupBy(STATUS).count().collect()
    rows_by_status = {row[STATUS]: row["count"] for row in counted}
    # Resolved rows never reopen and every resolution is stamped after the cutoff, so the DELETE
    # removes exactly the rows counted, also with writers running.
    if physically:  # refused before anything is deleted
        readable_table_id(spark, warehouse, quarantine.inbox_table)
        if quarantine.sensitive_columns:
            readable_table_id(spark, warehouse, quarantine.outbox_table)
    if rows_by_status and not dry_run:
        delete_where(spark, path, condition)
    files = _remove_files_of_deleted_rows(spark, warehouse, action, dry_run=dry_run) if physically else None
    file_records = _purge_redriven_file_records(spark, warehouse, action, cutoff, dry_run=dry_run)
    warnings = _warnings(columns, quarantine)
    return PurgeReport(quarantine.source_table, cutoff, dry_run, rows_by_status, warnings, files, file_records)


def _purge_redriven_file_records(
    spark: SparkSession, warehouse: Warehouse, action: DataQualityAction, cutoff: datetime, *, dry_run: bool
) -> int:
    """A set-aside file's record is resolved once redriven: it goes with the source's resolved rows. One still
    waiting for its redrive stays, whatever its age."""
    table = files_table(action.quarantine.inbox_table)
    if not warehouse.is_delta_table(table):
        return 0
    condition = (
        f"{SOURCE_TABLE} = {sql_string(action.quarantine.source_table)} AND {STATUS} = '{REDRIVEN}' "
        f"AND {RESOLVED_AT} < {_timestamp(cutoff)}"
    )
    path = warehouse.path(table)
    records = spark.read.format("delta").load(path).where(condition).count()
    if records and not dry_run:
        delete_where(spark, path, condition)
    return records


def _remove_files_of_deleted_rows(
    spark: SparkSession, warehouse: Warehouse, action: DataQualityAction, *, dry_run: bool
) -> FileRemoval:
    """Removes the files that hold rows of the source no longer in the inbox: those this purge deleted and any
    an earlier one did. A row's key never leaves the inbox otherwise, so a row whose key is still there is
    kept, in its every image. Where the action has sensitive columns, also the inbox's and the outbox's files
    that the tables no longer hold and that hold a value a fix supplied, as it was given (see `redaction`)."""
    quarantine = action.quarantine
    path = warehouse.path(quarantine.inbox_table)
    kept = spark.read.format("delta").load(path).where(F.col(SOURCE) == quarantine.source_table).select(KEY)

    def deleted(rows: DataFrame, *_: str) -> DataFrame:
        return rows.where(F.col(SOURCE) == quarantine.source_table).join(kept, KEY, "left_anti")

    if not quarantine.sensitive_columns:
        return remove_files_holding(spark, warehouse, quarantine.inbox_table, deleted, dry_run=dry_run)
    in_clear = F.expr(holds_clear_values(PAYLOAD, quarantine.sensitive_columns, quarantine.redaction))

    def supplied_in_clear(rows: DataFrame, *_: str) -> DataFrame:
        return rows.where((F.col(SOURCE) == quarantine.source_table) & in_clear)

    def deleted_or_in_clear(rows: DataFrame, *_: str) -> DataFrame:
        # One scan of the files: each row beside whether its key is still in the inbox.
        still_there = kept.withColumn("_kept", F.lit(True))
        of_source = rows.where(F.col(SOURCE) == quarantine.source_table).join(still_there, KEY, "left")
        return of_source.where(F.col("_kept").isNull() | in_clear).drop("_kept")

    return FileRemoval.of_tables(
        [
            remove_files_holding(spark, warehouse, quarantine.inbox_table, deleted_or_in_clear, dry_run=dry_run),
            remove_files_holding(spark, warehouse, quarantine.outbox_table, supplied_in_clear, dry_run=dry_run),
        ]
    )


def resolved_before(columns: DlqColumns, cutoff: datetime) -> str:
    """SQL: rows resolved before `cutoff`, by the most precise time the DLQ has for their resolution.
    SQL text rather than a column, so that the DELETE runs the same on a Spark Connect server."""
    # Rows closed before a column was added (`upgrade-tables`) have no value there: the next time stands in.
    times = [name for name in (RESOLVED_AT, UPDATED_AT) if name in columns.inbox]
    closed_at = f"coalesce({', '.join([*times, TIMESTAMP])})"
    before = _timestamp(cutoff)
    resolved = f"{STATUS} IN ('{DISCARDED}', '{EXHAUSTED}') AND {closed_at} < {before}"
    if RESOLVED_AT in columns.inbox:
        resolved = f"({resolved}) OR ({STATUS} = '{RECYCLED}' AND {RESOLVED_AT} < {before})"
    return resolved


def _timestamp(instant: datetime) -> str:
    return f"TIMESTAMP'{instant.astimezone(timezone.utc):%Y-%m-%d %H:%M:%S.%f}Z'"


def _warnings(columns: DlqColumns, quarantine) -> list[str]:
    warnings = []
    if RESOLVED_AT not in columns.inbox:
        warnings.append(
            f"{quarantine.inbox_table} has no {RESOLVED_AT}, so nothing tells a landed recycled row from one "
            "on its way: recycled rows are kept"
        )
    if RESOLVED_AT not in columns.inbox and UPDATED_AT not in columns.inbox:
        warnings.append(
            f"{quarantine.inbox_table} has no {UPDATED_AT}: discarded and exhausted rows are aged from "
            f"their quarantine ({TIMESTAMP}), not from when they were closed"
        )
    return warnings
