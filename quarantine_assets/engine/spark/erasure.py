"""Erasure by subject: a source's rows whose payload meets a condition, whatever their status, deleted from the
inbox and the outbox, then from every file of those tables that still holds them (see `file_removal`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from quarantine_assets import codes
from quarantine_assets.config.models import DataQualityAction
from quarantine_assets.engine.lake.dlq_schema import KEY, RESOLVED_AT, STATUS
from quarantine_assets.engine.lake.statuses import FIXED, RECYCLED
from quarantine_assets.engine.lake.table_health import require_healthy_dlq
from quarantine_assets.engine.lake.tables import Warehouse
from quarantine_assets.engine.spark.bulk_fix import rows_meeting
from quarantine_assets.engine.spark.claims import before_writing
from quarantine_assets.engine.spark.file_removal import SOURCE, FileRemoval, readable_table_id, remove_files_holding
from quarantine_assets.engine.spark.merge import merge_into
from quarantine_assets.engine.spark.payload_types import sql_string, typed_columns
from quarantine_assets.engine.spark.validated import payload_schema
from quarantine_assets.errors import OperatorError


@dataclass(frozen=True)
class Erasure:
    source_table: str
    dry_run: bool
    inbox_rows_by_status: dict[str, int]
    outbox_rows: int
    files: FileRemoval  # of both tables

    @property
    def files_removed(self) -> int:
        return self.files.files_removed

    @property
    def files_pending(self) -> dict[str, int]:
        return self.files.files_pending


def forget_subject(
    spark: SparkSession, warehouse: Warehouse, action: DataQualityAction, where: str, *, dry_run: bool, by: str
) -> Erasure:
    """Erase the source's rows whose payload meets `where` (Spark SQL over the payload's fields), whatever their
    status, from the inbox and the outbox and from their tables' files; a dry run counts them and the files
    that hold them, and writes nothing. The validated table is the pipeline's, and is not touched."""
    quarantine = action.quarantine
    if dry_run:
        require_healthy_dlq(warehouse, action)
    else:
        before_writing(spark, warehouse, action, by=by)
    fields = [column for column in payload_schema(spark, warehouse, action) if column.name not in (KEY, SOURCE)]
    payload = typed_columns(fields)

    def subject(rows: DataFrame, *kept: str) -> DataFrame:
        view = rows.where(F.col(SOURCE) == quarantine.source_table).select(KEY, *kept, *payload)
        return rows_meeting(view, where)

    inbox = spark.read.format("delta").load(warehouse.path(quarantine.inbox_table))
    outbox = spark.read.format("delta").load(warehouse.path(quarantine.outbox_table))
    landed = F.col(RESOLVED_AT).isNotNull() if RESOLVED_AT in inbox.columns else F.lit(True)
    in_flight = (F.col(STATUS) == FIXED) | ((F.col(STATUS) == RECYCLED) & ~landed)
    flagged = subject(inbox.withColumn("_in_flight", in_flight), STATUS, "_in_flight")
    in_inbox = flagged.select(KEY, STATUS, "_in_flight").collect()
    _refuse_rows_in_flight(sum(row["_in_flight"] for row in in_inbox), where)
    in_outbox = [row[KEY] for row in subject(outbox).select(KEY).collect()]
    keys = {row[KEY] for row in in_inbox} | set(in_outbox)
    for table in (quarantine.inbox_table, quarantine.outbox_table):
        readable_table_id(spark, warehouse, table)
    if keys and not dry_run:
        erased = spark.createDataFrame([(key,) for key in sorted(keys)], f"{KEY} STRING")
        # By key, so that the commits' recorded predicates hold row keys, never the subject's values.
        on = f"dlq.{SOURCE} = {sql_string(quarantine.source_table)} AND dlq.{KEY} = new.{KEY}"
        for table in (quarantine.inbox_table, quarantine.outbox_table):
            merge_into(warehouse.path(table), erased, on, ["WHEN MATCHED THEN DELETE"])
    files = FileRemoval.of_tables(
        remove_files_holding(spark, warehouse, table, subject, dry_run=dry_run)
        for table in (quarantine.inbox_table, quarantine.outbox_table)
    )
    return Erasure(
        quarantine.source_table,
        dry_run,
        dict(Counter(row[STATUS] for row in in_inbox)),
        len(in_outbox),
        files,
    )


def _refuse_rows_in_flight(rows: int, where: str) -> None:
    """A fixed row goes on to the outbox, and from there to the validated table, from commits made before the
    erasure: erased from the DLQ, it would still land."""
    if rows:
        raise OperatorError(
            codes.ERASURE_IN_FLIGHT,
            f"{rows} row(s) meeting --where {where!r} are on their way to the validated table (fixed, or recycled "
            "and not landed yet): run the recycle (the outbox and recycled steps) first, then erase them, here and "
            "in the validated table. Nothing was deleted",
            field="--where",
        )
