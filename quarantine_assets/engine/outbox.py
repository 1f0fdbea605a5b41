"""The outbox: fixed rows from the inbox change feed, appended once per (key, attempt) to the recycled ledger."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from quarantine_assets.config.models import DataQualityAction
from quarantine_assets.engine.claims import before_writing
from quarantine_assets.engine.commits import append_to_dlq_table
from quarantine_assets.engine.dlq_columns import ATTEMPT, DlqColumns
from quarantine_assets.engine.inbox import scoped_key_condition
from quarantine_assets.engine.merge import merge_into, when_matched_update
from quarantine_assets.engine.payload_types import sql_string
from quarantine_assets.engine.statuses import FIXED, POST_IMAGES, RECYCLED
from quarantine_assets.engine.streams import run_action_stream, writer_id
from quarantine_assets.engine.tables import Warehouse

OUTBOX_STREAM = "outbox"
UPDATED_AT = "_dlq_updated_at"
FIXED_AT = "_dlq_fixed_at"
_ROW = ("_dlq_sk", "_dlq_source_table")
# Spark's and Delta's conditions for a data or change file listed in the log but gone from storage.
_CHANGES_VACUUMED = re.compile(r"\[(FAILED_READ_FILE\.FILE_NOT_EXIST|DELTA_CHANGE_DATA_FILE_NOT_FOUND)\]")
log = logging.getLogger(__name__)


@dataclass
class OutboxReport:
    batches: int = 0
    rows_sent: int = 0  # fixed rows handed to the outbox in this run
    warnings: list[str] = field(default_factory=list)  # what this DLQ loses without its missing context columns


def same_attempt(target: str, source: str, source_table: str, columns: DlqColumns) -> str:
    """The same row, and the same attempt at it where the DLQ counts attempts."""
    condition = scoped_key_condition(target, source, source_table)
    if not columns.counts_attempts:
        return condition
    # A row quarantined before `upgrade-tables` added the column is on its first attempt.
    return condition + f" AND coalesce({target}.{ATTEMPT}, 1) = coalesce({source}.{ATTEMPT}, 1)"


def latest_fixed(changes: DataFrame, source_table: str) -> DataFrame:
    """The last image per key in this batch, kept only if that image is `fixed`, with the time of that
    fix (`FIXED_AT`, the image's `_dlq_updated_at`; NULL where the inbox has no such column).

    Taking the last image first means a row fixed twice is sent once, with its last payload,
    and a row fixed then discarded is not sent at all.
    """
    latest_first = Window.partitionBy("_dlq_sk").orderBy(F.col("_commit_version").desc())
    attempt = F.coalesce(F.col(ATTEMPT), F.lit(1)) if ATTEMPT in changes.columns else F.lit(1)
    fixed_at = F.col(UPDATED_AT) if UPDATED_AT in changes.columns else F.lit(None).cast("timestamp")
    return (
        changes.where(F.col("_change_type").isin(*POST_IMAGES) & (F.col("_dlq_source_table") == source_table))
        .withColumn("_image_rank", F.row_number().over(latest_first))
        .where((F.col("_image_rank") == 1) & (F.col("_dlq_status") == FIXED))
        .select("_dlq_sk", "_dlq_source_table", "_row_data", attempt.alias(ATTEMPT), fixed_at.alias(FIXED_AT))
    )


def send_batch_to_outbox(
    spark: SparkSession,
    changes: DataFrame,
    batch_id: int,
    stream_id: str,
    action: DataQualityAction,
    warehouse: Warehouse,
    columns: DlqColumns,
    run_id: str,
) -> OutboxReport:
    """Mark the batch's fixed rows recycled in the inbox, then append the rows marked to the outbox.

    The MERGE moves a row only while it is the image this batch read (the same `_dlq_updated_at`): a row
    fixed again meanwhile stays `fixed`, and a later batch sends it with its last payload. The append
    sends exactly the rows this batch's MERGE marked (each tagged with the batch), idempotent on (stream,
    batch): a re-run after a crash between the two finds them marked and appends them; a replay adds nothing.
    """
    source_table = action.quarantine.source_table
    inbox_path = warehouse.path(action.quarantine.inbox_table)
    tag = f"{OUTBOX_STREAM}:{stream_id}:{batch_id}"
    fixed = latest_fixed(changes, source_table).persist()
    try:
        if fixed.isEmpty():  # changes without a fixed row leave both tables alone
            return OutboxReport(batches=1)
        _mark_recycled(spark, inbox_path, fixed, source_table, columns, run_id, tag)
        marked = fixed.join(_recycled_by(spark, inbox_path, source_table, columns, tag), list(_ROW), "semi")
        outbox_rows = marked.select(
            *_ROW,
            "_row_data",
            F.current_timestamp().alias("_dlq_recycled_at"),
            ATTEMPT,
            F.lit(action.owner).alias("_dlq_action"),
            FIXED_AT,
        )
        sent = append_to_dlq_table(
            spark,
            outbox_rows,
            warehouse,
            action.quarantine.outbox_table,
            writer_id(action, OUTBOX_STREAM, stream_id),
            batch_id,
        )
    finally:
        fixed.unpersist()
    return OutboxReport(batches=1, rows_sent=sent)


def _mark_recycled(
    spark: SparkSession,
    inbox_path: str,
    fixed: DataFrame,
    source_table: str,
    columns: DlqColumns,
    run_id: str,
    tag: str,
) -> None:
    values = {
        "_dlq_status": f"'{RECYCLED}'",
        "_dlq_run_id": sql_string(run_id),
        UPDATED_AT: "current_timestamp()",
        "_dlq_updated_by": sql_string(tag),
    }
    still_that_fix = f" AND dlq.{UPDATED_AT} <=> new.{FIXED_AT}" if UPDATED_AT in columns.inbox else ""
    merge_into(
        inbox_path,
        fixed,
        same_attempt("dlq", "new", source_table, columns),
        [when_matched_update(f"dlq._dlq_status = '{FIXED}'{still_that_fix}", columns.inbox_values(values))],
    )


def _recycled_by(spark: SparkSession, inbox_path: str, source_table: str, columns: DlqColumns, tag: str) -> DataFrame:
    """The keys of the inbox rows the outbox batch `tag` marked recycled. Only the outbox marks a row
    recycled, one batch at a time, and a recycled row changes no more until the recycled step settles it
    from the outbox: where the inbox keeps no tag, a fixed row of the batch now recycled was marked by it."""
    inbox = spark.read.format("delta").load(inbox_path)
    marked = (F.col("_dlq_source_table") == source_table) & (F.col("_dlq_status") == RECYCLED)
    if "_dlq_updated_by" in columns.inbox:
        marked &= F.col("_dlq_updated_by") == tag
    return inbox.where(marked).select(*_ROW)


def run_outbox(spark: SparkSession, action: DataQualityAction, warehouse: Warehouse, run_id: str) -> OutboxReport:
    """Read the inbox change feed from this action's checkpoint on; never re-read a snapshot."""
    columns = before_writing(spark, warehouse, action, by=run_id)

    def process(changes: DataFrame, batch_id: int, stream_id: str) -> OutboxReport:
        return send_batch_to_outbox(spark, changes, batch_id, stream_id, action, warehouse, columns, run_id)

    inbox = warehouse.path(action.quarantine.inbox_table)
    warnings = columns.warnings(action.quarantine.inbox_table, action.quarantine.outbox_table)

    def changes() -> DataFrame:
        return spark.readStream.format("delta").option("readChangeFeed", "true").load(inbox)

    if not warehouse.checkpoint_started(action.key, OUTBOX_STREAM):
        _unmark_unsent(spark, warehouse, action, columns, run_id)
    try:
        return run_action_stream(changes(), action, warehouse, OUTBOX_STREAM, process, OutboxReport(warnings=warnings))
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
    return run_action_stream(
        changes(), action, warehouse, OUTBOX_STREAM, process, OutboxReport(warnings=[*warnings, restarted])
    )


def _unmark_unsent(
    spark: SparkSession, warehouse: Warehouse, action: DataQualityAction, columns: DlqColumns, run_id: str
) -> None:
    """Before a stream starts again from the inbox's snapshot, which sends `fixed` rows only: rows an outbox
    batch marked recycled and never appended (a crash between its two commits), whose batch the lost
    checkpoint will not replay, are `fixed` again, as they were, and go with the first batch."""
    if "_dlq_updated_by" not in columns.inbox:
        return
    source_table = action.quarantine.source_table
    inbox_path = warehouse.path(action.quarantine.inbox_table)
    marked = (
        spark.read.format("delta")
        .load(inbox_path)
        .alias("marked")
        .where(
            (F.col("_dlq_source_table") == source_table)
            & (F.col("_dlq_status") == RECYCLED)
            & F.startswith("_dlq_updated_by", F.lit(f"{OUTBOX_STREAM}:"))
        )
        .select(*_ROW, columns.attempt("marked").alias(ATTEMPT), "_dlq_updated_by")
    )
    sent = (
        spark.read.format("delta")
        .load(warehouse.path(action.quarantine.outbox_table))
        .alias("sent")
        .select(*_ROW, columns.attempt("sent").alias(ATTEMPT))
    )
    unsent = marked.join(sent, [*_ROW, ATTEMPT], "left_anti")
    if unsent.isEmpty():  # as nearly always: no commit, which a sensor would take for news
        return
    values = {
        "_dlq_status": f"'{FIXED}'",
        "_dlq_run_id": sql_string(run_id),
        UPDATED_AT: "current_timestamp()",
        "_dlq_updated_by": f"'{OUTBOX_STREAM}'",
    }
    still_marked = f"dlq._dlq_status = '{RECYCLED}' AND dlq._dlq_updated_by = new._dlq_updated_by"
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
    sent_once_by = ["_dlq_sk", ATTEMPT] if ATTEMPT in outbox.columns else ["_dlq_sk"]
    return (
        outbox.where(F.col("_dlq_source_table") == action.quarantine.source_table)
        .groupBy(*sent_once_by)
        .count()
        .where(F.col("count") > 1)
        .count()
    )
