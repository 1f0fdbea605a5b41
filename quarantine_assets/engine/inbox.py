"""Quarantined rows as DLQ inbox records, and the scoped, idempotent MERGE that stores them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from quarantine_assets.engine.commits import retry_on_conflict
from quarantine_assets.engine.rules import FAILED_RULES, RESCUED_DATA
from quarantine_assets.engine.source import SOURCE_FILE
from quarantine_assets.engine.statuses import QUARANTINED

# Columns the split adds to a row; everything else is the row itself.
BOOKKEEPING_COLUMNS = (FAILED_RULES, RESCUED_DATA, SOURCE_FILE)
# 128 bits: collisions stay near n^2/2^129, negligible at 10^9 rows (64-bit xxhash: ~3%).
KEY_HEX_CHARS = 32


@dataclass(frozen=True)
class Provenance:
    """Where a quarantined batch came from and who judged it."""

    source_table: str
    action: str
    run_id: str
    config_version: str
    batch_id: int


def quote(column: str) -> Column:
    return F.col("`" + column.replace("`", "``") + "`")


def payload_columns(rows: DataFrame) -> list[str]:
    return [c for c in rows.columns if c not in BOOKKEEPING_COLUMNS]


def row_payload(columns: list[str]) -> Column:
    """The row as VARIANT, keeping NULL fields and value types."""
    return F.to_variant_object(F.struct(*[quote(c) for c in columns]))


def inbox_records(quarantined: DataFrame, provenance: Provenance) -> DataFrame:
    """The key hashes source, batch, content and the occurrence of that content in the batch.

    So identical bad rows in different batches or positions are all kept, and replaying the
    same batch after a crash yields the same keys, which the MERGE then skips.
    """
    rescued = F.col(RESCUED_DATA) if RESCUED_DATA in quarantined.columns else F.lit(None).cast("string")
    source_file = F.col(SOURCE_FILE) if SOURCE_FILE in quarantined.columns else F.lit(None).cast("string")
    columns = payload_columns(quarantined)
    content = F.concat_ws(
        "\u0001",
        F.to_json(F.struct(*[quote(c) for c in columns])),
        F.coalesce(rescued, F.lit("")),
    )
    occurrence = F.row_number().over(Window.partitionBy("_content").orderBy("_content"))
    key = F.substring(
        F.sha2(
            F.concat_ws(
                "\u0001",
                F.lit(provenance.source_table),
                F.lit(str(provenance.batch_id)),
                F.col("_content"),
                occurrence.cast("string"),
            ),
            256,
        ),
        1,
        KEY_HEX_CHARS,
    )
    return quarantined.withColumn("_content", content).select(
        key.alias("_dlq_sk"),
        F.lit(provenance.source_table).alias("_dlq_source_table"),
        F.lit(QUARANTINED).alias("_dlq_status"),
        F.current_timestamp().alias("_dlq_timestamp"),
        F.col(FAILED_RULES).alias("_dlq_failed_rules"),
        rescued.alias("_dlq_rescued_data"),
        row_payload(columns).alias("_row_data"),
        F.lit(provenance.action).alias("_dlq_action"),
        F.lit(provenance.run_id).alias("_dlq_run_id"),
        F.lit(provenance.config_version).alias("_dlq_config_version"),
        F.lit(provenance.batch_id).cast("bigint").alias("_dlq_batch_id"),
        source_file.alias("_dlq_source_file"),
        F.lit(1).alias("_dlq_attempt"),
        F.current_timestamp().alias("_dlq_updated_at"),
        F.lit(provenance.action).alias("_dlq_updated_by"),
    )


def scoped_key_condition(target: str, source: str, source_table: str) -> str:
    """Every MERGE on a shared DLQ names its own source, so actions never touch each other's rows."""
    return f"{target}._dlq_source_table = '{source_table}' AND {target}._dlq_sk = {source}._dlq_sk"


def merge_into_inbox(spark: SparkSession, inbox_path: Path, records: DataFrame, source_table: str) -> int:
    """Insert-only on the scoped key: replays add nothing and never overwrite an operator's edit.

    Returns how many records the inbox holds after the MERGE, each matched on key and payload,
    so a caller can prove that no quarantined row was lost.
    """
    inbox = DeltaTable.forPath(spark, str(inbox_path))
    # Context columns are written only where the user's table has them.
    columns = [c for c in records.columns if c in set(inbox.toDF().columns)]
    records = records.persist()
    try:
        metrics = retry_on_conflict(
            lambda: (
                inbox.alias("dlq")
                .merge(records.alias("new"), scoped_key_condition("dlq", "new", source_table))
                .whenNotMatchedInsert(values={c: F.col(f"new.{c}") for c in columns})
                .execute()
                .first()
            )
        )
        inserted, expected = metrics["num_inserted_rows"], records.count()
        if inserted == expected:
            return inserted
        # Fewer inserts: a replayed batch, or a key that already names another row. Look.
        return _records_held(inbox.toDF(), records, source_table)
    finally:
        records.unpersist()


def _records_held(inbox: DataFrame, records: DataFrame, source_table: str) -> int:
    held = inbox.where(F.col("_dlq_source_table") == source_table).select(
        "_dlq_sk", F.to_json("_row_data").alias("_payload")
    )
    return (
        records.select("_dlq_sk", F.to_json("_row_data").alias("_payload"))
        .join(held, ["_dlq_sk", "_payload"], "left_semi")
        .count()
    )
