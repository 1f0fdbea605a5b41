"""The outbox: fixed rows from the inbox change feed, appended once per (key, attempt) to the recycled ledger."""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, Row, SparkSession, Window
from pyspark.sql import functions as F

from quarantine_assets.config.models import DataQualityAction
from quarantine_assets.engine.lake.dlq_columns import DlqColumns
from quarantine_assets.engine.lake.dlq_schema import (
    ATTEMPT,
    FIXED_AT,
    KEY,
    OWNER,
    RECYCLED_AT,
    ROW_DATA,
    RUN_ID,
    SOURCE_TABLE,
    STATUS,
    UPDATED_AT,
    UPDATED_BY,
)
from quarantine_assets.engine.lake.statuses import FIXED, POST_IMAGES, RECYCLED
from quarantine_assets.engine.lake.tables import Warehouse
from quarantine_assets.engine.spark.claims import before_writing
from quarantine_assets.engine.spark.commits import append_to_dlq_table
from quarantine_assets.engine.spark.inbox import attempt_column, same_attempt, scoped_source
from quarantine_assets.engine.spark.merge import merge_into, update_where, when_matched_update
from quarantine_assets.engine.spark.payload_types import sql_string
from quarantine_assets.engine.spark.streams import BatchCommit, StageRun, run_action_stream

OUTBOX_STREAM = "outbox"
_ROW = (KEY, SOURCE_TABLE)
# Spark's and Delta's conditions for a data or change file listed in the log but gone from storage.
_CHANGES_VACUUMED = re.compile(r"\[(FAILED_READ_FILE\.FILE_NOT_EXIST|DELTA_CHANGE_DATA_FILE_NOT_FOUND)\]")
# Up to this many fixes in a batch, the mark names each (an UPDATE); beyond, it joins the batch (a MERGE).
_NAMED_FIXES = 100
log = logging.getLogger(__name__)


@dataclass
class OutboxReport:
    batches: int = 0
    rows_sent: int = 0  # fixed rows handed to the outbox in this run
    warnings: list[str] = field(default_factory=list)  # what this DLQ loses without its missing context columns


def latest_fixed(changes: DataFrame, source_table: str) -> DataFrame:
    """The last image per key in this batch, kept only if that image is `fixed`, with the time of that
    fix (`FIXED_AT`, the image's `_dlq_updated_at`; NULL where the inbox has no such column).

    Taking the last image first means a row fixed twice is sent once, with its last payload,
    and a row fixed then discarded is not sent at all.
    """
    latest_first = Window.partitionBy(KEY).orderBy(F.col("_commit_version").desc())
    attempt = F.coalesce(F.col(ATTEMPT), F.lit(1)) if ATTEMPT in changes.columns else F.lit(1)
    fixed_at = F.col(UPDATED_AT) if UPDATED_AT in changes.columns else F.lit(None).cast("timestamp")
    return (
        changes.where(F.col("_change_type").isin(*POST_IMAGES) & (F.col(SOURCE_TABLE) == source_table))
        .withColumn("_image_rank", F.row_number().over(latest_first))
        .where((F.col("_image_rank") == 1) & (F.col(STATUS) == FIXED))
        .select(KEY, SOURCE_TABLE, ROW_DATA, attempt.alias(ATTEMPT), fixed_at.alias(FIXED_AT))
    )


def send_batch_to_outbox(run: StageRun, changes: DataFrame, commit: BatchCommit) -> OutboxReport:
    """Mark the batch's fixed rows recycled in the inbox, then append the rows marked to the outbox.

    The mark moves a row only while it is the image this batch read (the same `_dlq_updated_at`): a row
    fixed again meanwhile stays `fixed`, and a later batch sends it with its last payload. The append
    sends exactly the rows this batch marked (each tagged with the batch), idempotent on (stream,
    batch): a re-run after a crash between the two finds them marked and appends them; a replay adds nothing.
    Where the mark moved every fix of the batch, as the first run of a batch nearly always does, those are
    the rows it marked; otherwise they are read back from the inbox by their tag.
    """
    spark, action, warehouse, columns, run_id = run.spark, run.action, run.warehouse, run.columns, run.run_id
    source_table = action.quarantine.source_table
    inbox_path = warehouse.path(action.quarantine.inbox_table)
    tag = f"{OUTBOX_STREAM}:{commit.stream_id}:{commit.batch_id}"
    fixed = latest_fixed(changes, source_table).persist()
    try:
        named = _fixes_to_name(fixed)
        if named == []:  # changes without a fixed row leave both tables alone
            return OutboxReport(batches=1)
        marked_now = _mark_recycled(spark, inbox_path, fixed, named, source_table, columns, run_id, tag)
        # The inbox holds one row per key, and the batch one fix per key: as many moved as the batch has fixes
        # means the mark moved each of them.
        marked = fixed
        if marked_now != (len(named) if named is not None else fixed.count()):
            marked = fixed.join(_recycled_by(spark, inbox_path, source_table, columns, tag), list(_ROW), "semi")
        outbox_rows = marked.select(
            *_ROW,
            ROW_DATA,
            F.current_timestamp().alias(RECYCLED_AT),
            ATTEMPT,
            F.lit(action.owner).alias(OWNER),
            FIXED_AT,
        )
        sent = append_to_dlq_table(
            spark, outbox_rows, warehouse, action.quarantine.outbox_table, commit.writer, commit.batch_id
        )
    finally:
        fixed.unpersist()
    return OutboxReport(batches=1, rows_sent=sent)


def _fixes_to_name(fixed: DataFrame) -> list[Row] | None:
    """The batch's fixes (key, attempt, and the fix's time in microseconds), when they are few enough for the
    mark to name each one; None when there are more."""
    fixes = fixed.select(KEY, ATTEMPT, F.unix_micros(F.col(FIXED_AT).cast("timestamp")).alias(FIXED_AT))
    found = fixes.limit(_NAMED_FIXES + 1).collect()
    return found if len(found) <= _NAMED_FIXES else None


def _mark_recycled(
    spark: SparkSession,
    inbox_path: str,
    fixed: DataFrame,
    named: list[Row] | None,
    source_table: str,
    columns: DlqColumns,
    run_id: str,
    tag: str,
) -> int:
    """Each fix of the batch still in the inbox as it was read (`fixed`, its rows `named` when few) becomes
    `recycled`, tagged with the batch; returns the rows moved, by Delta's count. A few fixes are named in an
    UPDATE, which spares Delta a MERGE's join; more are joined in a MERGE."""
    values = columns.inbox_values(
        {
            STATUS: f"'{RECYCLED}'",
            RUN_ID: sql_string(run_id),
            UPDATED_AT: "current_timestamp()",
            UPDATED_BY: sql_string(tag),
        }
    )
    still_fixed = f"dlq.{STATUS} = '{FIXED}'"
    if named is not None:
        that_fix = " OR ".join(f"({_that_fix(row, columns)})" for row in named)
        condition = f"{scoped_source('dlq', source_table)} AND {still_fixed} AND ({that_fix})"
        return int(update_where(spark, inbox_path, values, condition)["num_affected_rows"])
    still_that_fix = f" AND dlq.{UPDATED_AT} <=> new.{FIXED_AT}" if UPDATED_AT in columns.inbox else ""
    merged = merge_into(
        inbox_path,
        fixed,
        same_attempt("dlq", "new", source_table, columns),
        [when_matched_update(still_fixed + still_that_fix, values)],
    )
    return int(merged["num_affected_rows"])


def _that_fix(fix: Row, columns: DlqColumns) -> str:
    """The inbox row of one fix, at its attempt, while it is the image the batch read (the same
    `_dlq_updated_at`, compared in microseconds): the MERGE's match and condition, for one row."""
    condition = f"dlq.{KEY} = {sql_string(fix[KEY])}"
    if columns.counts_attempts:
        condition += f" AND coalesce(dlq.{ATTEMPT}, 1) = {fix[ATTEMPT]}"
    if UPDATED_AT in columns.inbox:
        fixed_at = "NULL" if fix[FIXED_AT] is None else str(fix[FIXED_AT])
        condition += f" AND unix_micros(CAST(dlq.{UPDATED_AT} AS TIMESTAMP)) <=> {fixed_at}"
    return condition


def _recycled_by(spark: SparkSession, inbox_path: str, source_table: str, columns: DlqColumns, tag: str) -> DataFrame:
    """The keys of the inbox rows the outbox batch `tag` marked recycled. Only the outbox marks a row
    recycled, one batch at a time, and a recycled row changes no more until the recycled step settles it
    from the outbox: where the inbox keeps no tag, a fixed row of the batch now recycled was marked by it."""
    inbox = spark.read.format("delta").load(inbox_path)
    marked = (F.col(SOURCE_TABLE) == source_table) & (F.col(STATUS) == RECYCLED)
    if UPDATED_BY in columns.inbox:
        marked &= F.col(UPDATED_BY) == tag
    return inbox.where(marked).select(*_ROW)


def run_outbox(spark: SparkSession, action: DataQualityAction, warehouse: Warehouse, run_id: str) -> OutboxReport:
    """Read the inbox change feed from this action's checkpoint on; never re-read a snapshot."""
    columns = before_writing(spark, warehouse, action, by=run_id)

    run = StageRun(spark, action, warehouse, run_id, columns)
    process = functools.partial(send_batch_to_outbox, run)

    inbox = warehouse.path(action.quarantine.inbox_table)
    warnings = columns.warnings(action.quarantine.inbox_table, action.quarantine.outbox_table)

    def changes() -> DataFrame:
        return spark.readStream.format("delta").option("readChangeFeed", "true").load(inbox)

    if not warehouse.checkpoint_started(action.key, OUTBOX_STREAM):
        _unmark_unsent(spark, warehouse, action, columns, run_id)
    try:
        return run_action_stream(run, changes(), OUTBOX_STREAM, process, OutboxReport(warnings=warnings))
    except Exception as error:
        if not _CHANGES_VACUUMED.search(str(error)):
            raise
    # The change files this checkpoint still had to read were vacuumed. Every row that waits to be sent is
    # `fixed` in the inbox as it is now, and a stream without a checkpoint starts with that snapshot.
    warehouse.remove_checkpoint(action.key, OUTBOX_STREAM)
    _unmark_unsent(spark, warehouse, action, columns, run_id)
    restarted = (
        f"the change feed of {action.quarantine.inbox_table} was vacuumed before the outbox of {action.name} "
        "read it; the outbox started again from the inbox as it is now and sent every row that is fixed"
    )
    log.warning(restarted)
    return run_action_stream(run, changes(), OUTBOX_STREAM, process, OutboxReport(warnings=[*warnings, restarted]))


def _unmark_unsent(
    spark: SparkSession, warehouse: Warehouse, action: DataQualityAction, columns: DlqColumns, run_id: str
) -> None:
    """Before a stream starts again from the inbox's snapshot, which sends `fixed` rows only: rows an outbox
    batch marked recycled and never appended (a crash between its two commits), whose batch the lost
    checkpoint will not replay, are `fixed` again, as they were, and go with the first batch."""
    if UPDATED_BY not in columns.inbox:
        return
    source_table = action.quarantine.source_table
    inbox_path = warehouse.path(action.quarantine.inbox_table)
    marked = (
        spark.read.format("delta")
        .load(inbox_path)
        .alias("marked")
        .where(
            (F.col(SOURCE_TABLE) == source_table)
            & (F.col(STATUS) == RECYCLED)
            & F.startswith(UPDATED_BY, F.lit(f"{OUTBOX_STREAM}:"))
        )
        .select(*_ROW, attempt_column(columns, "marked").alias(ATTEMPT), UPDATED_BY)
    )
    # As nearly always (an outbox's first run): no row is marked, and the outbox need not be read.
    if marked.isEmpty():
        return
    sent = (
        spark.read.format("delta")
        .load(warehouse.path(action.quarantine.outbox_table))
        .alias("sent")
        .select(*_ROW, attempt_column(columns, "sent").alias(ATTEMPT))
    )
    unsent = marked.join(sent, [*_ROW, ATTEMPT], "left_anti")
    if unsent.isEmpty():  # no commit, which a sensor would take for news
        return
    values = {
        STATUS: f"'{FIXED}'",
        RUN_ID: sql_string(run_id),
        UPDATED_AT: "current_timestamp()",
        UPDATED_BY: f"'{OUTBOX_STREAM}'",
    }
    still_marked = f"dlq.{STATUS} = '{RECYCLED}' AND dlq.{UPDATED_BY} = new.{UPDATED_BY}"
    merge_into(
        inbox_path,
        unsent,
        same_attempt("dlq", "new", source_table, columns),
        [when_matched_update(still_marked, columns.inbox_values(values))],
    )


def duplicate_outbox_keys(spark: SparkSession, warehouse: Warehouse, action: DataQualityAction) -> int:
    """Keys sent to the outbox more than once for the same attempt (for the same key, where the
    outbox does not count attempts): each would recycle twice."""
    outbox = spark.read.format("delta").load(warehouse.path(action.quarantine.outbox_table))
    sent_once_by = [KEY, ATTEMPT] if ATTEMPT in outbox.columns else [KEY]
    return (
        outbox.where(F.col(SOURCE_TABLE) == action.quarantine.source_table)
        .groupBy(*sent_once_by)
        .count()
        .where(F.col("count") > 1)
        .count()
    )
