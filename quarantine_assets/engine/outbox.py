"""The outbox: fixed rows from the inbox change feed, once per (key, attempt), into the recycled ledger."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from quarantine_assets.config.models import DataQualityAction
from quarantine_assets.engine.commits import retry_on_conflict
from quarantine_assets.engine.inbox import scoped_key_condition
from quarantine_assets.engine.statuses import FIXED, POST_IMAGES, RECYCLED
from quarantine_assets.engine.streams import add_counts, run_available_now
from quarantine_assets.engine.table_health import require_healthy_dlq
from quarantine_assets.engine.tables import Warehouse

OUTBOX_STREAM = "outbox"


@dataclass
class OutboxReport:
    batches: int = 0
    rows_sent: int = 0  # fixed rows handed to the outbox in this run


def same_attempt(target: str, source: str, source_table: str) -> str:
    return scoped_key_condition(target, source, source_table) + f" AND {target}._dlq_attempt = {source}._dlq_attempt"


def latest_fixed(changes: DataFrame, source_table: str) -> DataFrame:
    """The last image per key in this batch, kept only if that image is `fixed`.

    Taking the last image first means a row fixed twice is sent once, with its last payload,
    and a row fixed then discarded is not sent at all.
    """
    latest_first = Window.partitionBy("_dlq_sk").orderBy(F.col("_commit_version").desc())
    return (
        changes.where(F.col("_change_type").isin(*POST_IMAGES) & (F.col("_dlq_source_table") == source_table))
        .withColumn("_image_rank", F.row_number().over(latest_first))
        .where((F.col("_image_rank") == 1) & (F.col("_dlq_status") == FIXED))
        .select("_dlq_sk", "_dlq_source_table", "_row_data", "_dlq_attempt")
    )


def send_batch_to_outbox(
    spark: SparkSession, changes: DataFrame, action: DataQualityAction, warehouse: Warehouse, run_id: str
) -> OutboxReport:
    source_table = action.quarantine.source_table
    fixed = latest_fixed(changes, source_table).persist()
    try:
        sent = fixed.count()
        if sent:
            _insert_into_outbox(spark, warehouse.path(action.quarantine.outbox_table), fixed, action)
            _mark_recycled(spark, warehouse.path(action.quarantine.dlq_table), fixed, source_table, run_id)
    finally:
        fixed.unpersist()
    return OutboxReport(batches=1, rows_sent=sent)


def _insert_into_outbox(spark: SparkSession, outbox_path: Path, fixed: DataFrame, action: DataQualityAction) -> None:
    """Insert-only on (source, key, attempt): a retried run or a replayed batch adds nothing."""
    outbox = DeltaTable.forPath(spark, str(outbox_path))
    values = {
        "_dlq_sk": F.col("new._dlq_sk"),
        "_dlq_source_table": F.col("new._dlq_source_table"),
        "_row_data": F.col("new._row_data"),
        "_dlq_recycled_at": F.current_timestamp(),
        "_dlq_attempt": F.col("new._dlq_attempt"),
        "_dlq_action": F.lit(action.owner),
    }
    retry_on_conflict(
        lambda: (
            outbox.alias("out")
            .merge(fixed.alias("new"), same_attempt("out", "new", action.quarantine.source_table))
            .whenNotMatchedInsert(values=values)
            .execute()
        )
    )


def _mark_recycled(spark: SparkSession, inbox_path: Path, fixed: DataFrame, source_table: str, run_id: str) -> None:
    inbox = DeltaTable.forPath(spark, str(inbox_path))
    retry_on_conflict(
        lambda: (
            inbox.alias("dlq")
            .merge(fixed.alias("new"), same_attempt("dlq", "new", source_table))
            .whenMatchedUpdate(
                condition=f"dlq._dlq_status = '{FIXED}'",
                set={
                    "_dlq_status": F.lit(RECYCLED),
                    "_dlq_run_id": F.lit(run_id),
                    "_dlq_updated_at": F.current_timestamp(),
                    "_dlq_updated_by": F.lit(OUTBOX_STREAM),
                },
            )
            .execute()
        )
    )


def run_outbox(spark: SparkSession, action: DataQualityAction, warehouse: Warehouse, run_id: str) -> OutboxReport:
    """Read the inbox change feed from this action's checkpoint on; never re-read a snapshot."""
    require_healthy_dlq(warehouse, action)
    total = OutboxReport()

    def on_batch(changes: DataFrame, batch_id: int, stream_id: str) -> None:
        add_counts(total, send_batch_to_outbox(spark, changes, action, warehouse, run_id))

    changes = (
        spark.readStream.format("delta")
        .option("readChangeFeed", "true")
        .load(str(warehouse.path(action.quarantine.dlq_table)))
    )
    run_available_now(
        changes, on_batch, warehouse.checkpoint(action.key, OUTBOX_STREAM), f"{action.key}_{OUTBOX_STREAM}"
    )
    return total


def duplicate_outbox_keys(spark: SparkSession, warehouse: Warehouse, action: DataQualityAction) -> int:
    """Keys sent to the outbox more than once for the same attempt: each would recycle twice."""
    return (
        spark.read.format("delta")
        .load(str(warehouse.path(action.quarantine.outbox_table)))
        .where(F.col("_dlq_source_table") == action.quarantine.source_table)
        .groupBy("_dlq_sk", "_dlq_attempt")
        .count()
        .where(F.col("count") > 1)
        .count()
    )
