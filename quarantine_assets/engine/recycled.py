"""The recycled stream: outbox payloads back into typed rows, re-validated, into validated or back to the inbox."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from quarantine_assets.config.models import DataQualityAction
from quarantine_assets.engine.commits import append_once, retry_on_conflict
from quarantine_assets.engine.inbox import quote
from quarantine_assets.engine.outbox import same_attempt
from quarantine_assets.engine.rules import FAILED_RULES, applicable_rules, failed_rules_column
from quarantine_assets.engine.statuses import EXHAUSTED, QUARANTINED, RECYCLED
from quarantine_assets.engine.streams import add_counts, run_available_now
from quarantine_assets.engine.table_health import require_healthy_dlq
from quarantine_assets.engine.tables import Warehouse
from quarantine_assets.errors import MissingTableError

RECYCLED_STREAM = "recycled"
PAYLOAD_TYPE_RULE = "payload_type"


@dataclass
class RecycleReport:
    batches: int = 0
    rows_recycled: int = 0  # re-validated and appended to the validated table
    rows_requarantined: int = 0  # failed again: back in the inbox
    rows_exhausted: int = 0  # failed again at the attempt cap: closed


def variant_path(field: str) -> str:
    """A quoted path, so column names with dots, spaces or quotes still resolve.

    Spark's variant paths have no escapes: a name holding a single quote goes in double quotes.
    """
    return f'$["{field}"]' if "'" in field else f"$['{field}']"


def typed_columns(schema: StructType) -> list[Column]:
    return [
        F.try_variant_get("_row_data", variant_path(f.name), f.dataType.simpleString()).alias(f.name) for f in schema
    ]


def payload_type_failures(schema: StructType) -> Column:
    """A field that is present and not NULL but does not cast to its column type fails, never becomes NULL."""
    failures = []
    for field in schema:
        path = variant_path(field.name)
        raw = F.variant_get("_row_data", path, "variant")
        cast = F.try_variant_get("_row_data", path, field.dataType.simpleString())
        mismatch = raw.isNotNull() & ~F.is_variant_null(raw) & cast.isNull()
        failures.append(
            F.when(
                mismatch,
                F.struct(
                    F.lit(PAYLOAD_TYPE_RULE).alias("name"),
                    F.lit(f"{field.name} is {field.dataType.simpleString()}").alias("rule"),
                ),
            )
        )
    return F.filter(F.array(*failures), lambda failure: failure.isNotNull())


def recycled_writer_id(action: DataQualityAction, stream_id: str) -> str:
    return f"quarantine_assets/{action.owner}/{RECYCLED_STREAM}/{stream_id}"


def validated_schema(spark: SparkSession, warehouse: Warehouse, action: DataQualityAction) -> StructType:
    path = warehouse.path(action.target_table)
    if not DeltaTable.isDeltaTable(spark, str(path)):
        raise MissingTableError(
            "QA-TBL-002",
            f"validated table {action.target_table} does not exist yet (expected at {path}); "
            "materialize the split first",
            file=action.config_file,
        )
    return spark.read.format("delta").load(str(path)).schema


def recycle_batch(
    spark: SparkSession,
    outbox_rows: DataFrame,
    batch_id: int,
    stream_id: str,
    action: DataQualityAction,
    warehouse: Warehouse,
    run_id: str,
) -> RecycleReport:
    schema = validated_schema(spark, warehouse, action)
    rules = applicable_rules(action.rules, schema.fieldNames())
    typed = outbox_rows.where(F.col("_dlq_source_table") == action.quarantine.source_table).select(
        "_dlq_sk",
        "_dlq_source_table",
        "_dlq_attempt",
        payload_type_failures(schema).alias("_type_failures"),
        *typed_columns(schema),
    )
    # Cached so that counting, the append and the inbox MERGE read the outbox batch once.
    judged = typed.withColumn(FAILED_RULES, F.concat(F.col("_type_failures"), failed_rules_column(rules))).persist()
    try:
        failing = F.size(FAILED_RULES) > 0
        counts = judged.agg(
            F.count(F.lit(1)).alias("rows"),
            F.sum(failing.cast("long")).alias("failed"),
            F.sum((failing & (F.col("_dlq_attempt") + 1 > action.quarantine.max_attempts)).cast("long")).alias(
                "exhausted"
            ),
        ).first()
        append_once(
            judged.where(~failing).select(*[quote(f.name) for f in schema]),
            warehouse.path(action.target_table),
            recycled_writer_id(action, stream_id),
            batch_id,
        )
        if counts["failed"]:
            _back_to_inbox(spark, warehouse.path(action.quarantine.dlq_table), judged.where(failing), action, run_id)
    finally:
        judged.unpersist()
    failed, exhausted = counts["failed"] or 0, counts["exhausted"] or 0
    return RecycleReport(
        batches=1,
        rows_recycled=counts["rows"] - failed,
        rows_requarantined=failed - exhausted,
        rows_exhausted=exhausted,
    )


def _back_to_inbox(
    spark: SparkSession, inbox_path: Path, failed: DataFrame, action: DataQualityAction, run_id: str
) -> None:
    """Only a row still `recycled` at this attempt is touched, so a replayed batch changes nothing."""
    max_attempts = action.quarantine.max_attempts
    next_attempt = F.col("dlq._dlq_attempt") + 1
    at_cap = next_attempt > max_attempts
    inbox = DeltaTable.forPath(spark, str(inbox_path))
    retry_on_conflict(
        lambda: (
            inbox.alias("dlq")
            .merge(failed.alias("new"), same_attempt("dlq", "new", action.quarantine.source_table))
            .whenMatchedUpdate(
                condition=f"dlq._dlq_status = '{RECYCLED}'",
                set={
                    "_dlq_status": F.when(at_cap, F.lit(EXHAUSTED)).otherwise(F.lit(QUARANTINED)),
                    "_dlq_attempt": next_attempt,
                    "_dlq_failed_rules": F.col(f"new.{FAILED_RULES}"),
                    "_dlq_reason": F.when(
                        at_cap, F.lit(f"failed validation after {max_attempts} attempts (cap {max_attempts})")
                    ),
                    "_dlq_run_id": F.lit(run_id),
                    "_dlq_updated_at": F.current_timestamp(),
                    "_dlq_updated_by": F.lit(RECYCLED_STREAM),
                },
            )
            .execute()
        )
    )


def run_recycled(
    spark: SparkSession,
    action: DataQualityAction,
    warehouse: Warehouse,
    run_id: str,
) -> RecycleReport:
    """Re-validate every outbox row this action's checkpoint has not seen; each lands once."""
    require_healthy_dlq(warehouse, action)
    total = RecycleReport()

    def on_batch(outbox_rows: DataFrame, batch_id: int, stream_id: str) -> None:
        add_counts(total, recycle_batch(spark, outbox_rows, batch_id, stream_id, action, warehouse, run_id))

    outbox = spark.readStream.format("delta").load(str(warehouse.path(action.quarantine.outbox_table)))
    run_available_now(
        outbox, on_batch, warehouse.checkpoint(action.key, RECYCLED_STREAM), f"{action.key}_{RECYCLED_STREAM}"
    )
    return total
