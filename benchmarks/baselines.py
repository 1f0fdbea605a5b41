"""The baselines the benchmarks measure us against, written here rather than taken from the engine.

- plain: the same `availableNow` stream and `foreachBatch`, filter, idempotent append to Delta
  (what `mode: dqe` with drop rules does, without a DLQ);
- reference: Lakehouse Plumber's algorithm: two reads of the source (clean filter, inverse filter) and an
  insert-only MERGE into the inbox on an `xxhash64` key alone;
- two appends: the plain write, then the rejected rows appended as they are into a second table
  with the properties Lakehouse Plumber requires of an inbox: the least any DLQ on Delta writes per batch;
- direct append: rows appended to the validated table as they are, for the recycle path.
"""

from __future__ import annotations

from pathlib import Path

from delta.tables import DeltaTable
from harness import CLEAN, RULES
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from quarantine_assets.config.models import DataQualityAction
from quarantine_assets.engine.lake.tables import INBOX_PROPERTIES, Warehouse


def passes_every_rule():
    return F.coalesce(F.expr(CLEAN), F.lit(False))


def plain_split(spark: SparkSession, action: DataQualityAction, warehouse: Warehouse, checkpoint: Path) -> None:
    target = str(warehouse.path(action.target_table))

    def write(batch: DataFrame, batch_id: int) -> None:
        _append(batch.where(passes_every_rule()), target, "plain", batch_id)

    _available_now(_source_stream(spark, action, warehouse), write, checkpoint)


def create_rejected_table(spark: SparkSession, path: Path, columns: DataFrame) -> None:
    """A table of the source's columns with the inbox's properties (row tracking, change feed, deletion vectors)."""
    builder = DeltaTable.create(spark).location(str(path)).addColumns(columns.schema)
    for key, value in INBOX_PROPERTIES.items():
        builder = builder.property(key, value)
    builder.execute()


def two_appends(
    spark: SparkSession, action: DataQualityAction, warehouse: Warehouse, rejected_table: Path, checkpoint: Path
) -> None:
    """The plain write, and a second idempotent append of the rejected rows, read again, as they are."""
    target = str(warehouse.path(action.target_table))

    def write(batch: DataFrame, batch_id: int) -> None:
        _append(batch.where(passes_every_rule()), target, "two_appends", batch_id)
        _append(batch.where(~passes_every_rule()), str(rejected_table), "two_appends", batch_id)

    _available_now(_source_stream(spark, action, warehouse), write, checkpoint)


def reference_split(spark: SparkSession, action: DataQualityAction, warehouse: Warehouse, checkpoint: Path) -> None:
    """Lakehouse Plumber's quarantine: a clean stream and a quarantine stream, each reading the source."""
    target = str(warehouse.path(action.target_table))
    source_table = action.quarantine.source_table
    inbox = DeltaTable.forPath(spark, str(warehouse.path(action.quarantine.inbox_table)))
    failed = F.filter(
        F.array(
            *[
                F.when(
                    ~F.coalesce(F.expr(rule.expression), F.lit(False)),
                    F.struct(F.lit(rule.name).alias("name"), F.lit(rule.expression).alias("rule")),
                )
                for rule in RULES
            ]
        ),
        lambda failure: failure.isNotNull(),
    )

    def write_clean(batch: DataFrame, batch_id: int) -> None:
        _append(batch.where(passes_every_rule()), target, "reference", batch_id)

    def merge_quarantined(batch: DataFrame, batch_id: int) -> None:
        row = F.struct(*batch.columns)
        records = batch.where(~passes_every_rule()).select(
            F.xxhash64(F.lit(source_table), F.to_json(row)).cast("string").alias("_dlq_sk"),
            F.lit(source_table).alias("_dlq_source_table"),
            F.lit("quarantined").alias("_dlq_status"),
            F.current_timestamp().alias("_dlq_timestamp"),
            failed.alias("_dlq_failed_rules"),
            F.lit(None).cast("string").alias("_dlq_rescued_data"),
            F.to_variant_object(row).alias("_row_data"),
        )
        (
            inbox.alias("dlq")
            .merge(records.alias("new"), f"dlq._dlq_source_table = '{source_table}' AND dlq._dlq_sk = new._dlq_sk")
            .whenNotMatchedInsert(values={column: F.col(f"new.{column}") for column in records.columns})
            .execute()
        )

    stream = _source_stream(spark, action, warehouse)
    _available_now(stream, write_clean, checkpoint / "clean")
    _available_now(stream, merge_quarantined, checkpoint / "quarantine")


def direct_append(spark: SparkSession, rows_path: Path, target: Path, batch_id: int) -> None:
    """Read rows that are already typed and valid and append them: the floor for the recycle path."""
    _append(spark.read.format("delta").load(str(rows_path)), str(target), "direct", batch_id)


def _source_stream(spark: SparkSession, action: DataQualityAction, warehouse: Warehouse) -> DataFrame:
    return spark.readStream.format("delta").load(str(warehouse.path(action.source.table)))


def _append(rows: DataFrame, target: str, writer: str, batch_id: int) -> None:
    rows.write.format("delta").mode("append").option("txnAppId", writer).option("txnVersion", batch_id).save(target)


def _available_now(stream: DataFrame, on_batch, checkpoint: Path) -> None:
    query = stream.writeStream.foreachBatch(on_batch).option("checkpointLocation", str(checkpoint))
    query.trigger(availableNow=True).start().awaitTermination()
