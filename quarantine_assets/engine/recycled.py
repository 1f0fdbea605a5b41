"""The recycled stream: outbox payloads back into typed rows, re-validated, into validated or back to the inbox."""

from __future__ import annotations

from dataclasses import dataclass, field

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from quarantine_assets.config.models import DataQualityAction
from quarantine_assets.engine.claims import before_writing
from quarantine_assets.engine.commits import append_once, retry_on_conflict
from quarantine_assets.engine.dlq_columns import ATTEMPT, DlqColumns
from quarantine_assets.engine.inbox import quote
from quarantine_assets.engine.operational_metadata import table_column_names, with_table_columns
from quarantine_assets.engine.outbox import same_attempt
from quarantine_assets.engine.payload_types import payload_type_failures, typed_columns
from quarantine_assets.engine.rules import FAILED_RULES, applicable_rules, error_details, failed_rules_column
from quarantine_assets.engine.statuses import EXHAUSTED, QUARANTINED, RECYCLED
from quarantine_assets.engine.streams import run_action_stream, writer_id
from quarantine_assets.engine.tables import Warehouse
from quarantine_assets.engine.validated import validated_schema

RECYCLED_STREAM = "recycled"
# Outcomes of a recycled row, besides going back to quarantined or exhausted.
LANDS = "lands"
ALREADY_LANDED = "already_landed"
UNACCOUNTED = "unaccounted"


@dataclass
class RecycleReport:
    batches: int = 0
    rows_landed: int = 0  # re-validated and appended to the validated table
    rows_requarantined: int = 0  # failed again: back in the inbox
    rows_exhausted: int = 0  # failed again at the attempt cap: closed
    rows_already_landed: int = 0  # passed, but an earlier landing already appended them: not appended again
    rows_unaccounted: int = 0  # neither landed nor back in the inbox: should never happen
    warnings: list[str] = field(default_factory=list)  # what this DLQ loses without its missing context columns


def recycle_batch(
    spark: SparkSession,
    outbox_rows: DataFrame,
    batch_id: int,
    stream_id: str,
    action: DataQualityAction,
    warehouse: Warehouse,
    columns: DlqColumns,
    run_id: str,
) -> RecycleReport:
    schema = validated_schema(spark, warehouse, action)
    # Columns of the target's own metadata are not in a payload: they are evaluated when the row lands.
    table_metadata = table_column_names(action.operational_metadata)
    payload_schema = StructType([column for column in schema if column.name not in table_metadata])
    rules = applicable_rules(action.rules, payload_schema.fieldNames())
    typed = (
        outbox_rows.alias("out")
        .where(F.col("_dlq_source_table") == action.quarantine.source_table)
        .select(
            "_dlq_sk",
            "_dlq_source_table",
            columns.attempt("out").alias(ATTEMPT),
            payload_type_failures(payload_schema).alias("_type_failures"),
            *typed_columns(payload_schema),
        )
    )
    # Cached so that the MERGE, the landing join and the append read the outbox batch once.
    judged = typed.withColumn(FAILED_RULES, F.concat(F.col("_type_failures"), failed_rules_column(rules))).persist()
    landing = f"{RECYCLED_STREAM}:{stream_id}:{batch_id}"
    try:
        inbox_path = warehouse.path(action.quarantine.inbox_table)
        _settle_in_inbox(spark, inbox_path, judged, action, columns, run_id, landing)
        outcomes = _landing_outcomes(spark, inbox_path, judged, action, columns, landing).persist()
        counts = outcomes.groupBy("_outcome").count().collect()
        append_once(
            with_table_columns(outcomes.where(F.col("_outcome") == LANDS), action.operational_metadata).select(
                *[quote(column.name) for column in schema]
            ),
            warehouse.path(action.target_table),
            writer_id(action, RECYCLED_STREAM, stream_id),
            batch_id,
        )
        outcomes.unpersist()
    finally:
        judged.unpersist()
    count = {row["_outcome"]: row["count"] for row in counts}
    return RecycleReport(
        batches=1,
        rows_landed=count.get(LANDS, 0),
        rows_requarantined=count.get(QUARANTINED, 0),
        rows_exhausted=count.get(EXHAUSTED, 0),
        rows_already_landed=count.get(ALREADY_LANDED, 0),
        rows_unaccounted=count.get(UNACCOUNTED, 0),
    )


def _settle_in_inbox(
    spark: SparkSession,
    inbox_path: str,
    judged: DataFrame,
    action: DataQualityAction,
    columns: DlqColumns,
    run_id: str,
    landing: str,
) -> None:
    """One MERGE records each row's fate on its inbox row, which stays `recycled` until then.

    A passing row is stamped `_dlq_resolved_at` and the landing (stream and batch) once; a failing
    row goes back to quarantined with attempt + 1. A replayed batch matches nothing new. Without
    the stamp columns a passing row is left as it is; without attempts a failing row is never exhausted.
    """
    max_attempts = action.quarantine.max_attempts
    next_attempt = columns.attempt("dlq") + 1
    at_cap = next_attempt > max_attempts if columns.counts_attempts else F.lit(False)
    unsettled = f"dlq._dlq_status = '{RECYCLED}'" + (
        " AND dlq._dlq_resolved_at IS NULL" if columns.stamps_landings else ""
    )
    touched = {"_dlq_run_id": F.lit(run_id), "_dlq_updated_at": F.current_timestamp()}
    landed = touched | {"_dlq_resolved_at": F.current_timestamp(), "_dlq_updated_by": F.lit(landing)}
    failed_again = touched | {
        "_dlq_status": F.when(at_cap, F.lit(EXHAUSTED)).otherwise(F.lit(QUARANTINED)),
        **({ATTEMPT: next_attempt} if columns.counts_attempts else {}),
        "_dlq_failed_rules": F.col(f"new.{FAILED_RULES}"),
        "_dlq_errors": error_details(F.col(f"new.{FAILED_RULES}"), action.rules),
        "_dlq_reason": F.when(at_cap, F.lit(f"failed validation after {max_attempts} attempts (cap {max_attempts})")),
        "_dlq_updated_by": F.lit(RECYCLED_STREAM),
        "_dlq_resolved_at": F.when(at_cap, F.current_timestamp()),
        "_dlq_resolved_by": F.when(at_cap, F.lit(RECYCLED_STREAM)),
    }
    merge = (
        DeltaTable.forPath(spark, inbox_path)
        .alias("dlq")
        .merge(judged.alias("new"), same_attempt("dlq", "new", action.quarantine.source_table, columns))
    )
    if columns.stamps_landings:
        merge = merge.whenMatchedUpdate(
            condition=f"{unsettled} AND size(new.{FAILED_RULES}) = 0", set=columns.inbox_values(landed)
        )
    merge = merge.whenMatchedUpdate(
        condition=f"{unsettled} AND size(new.{FAILED_RULES}) > 0", set=columns.inbox_values(failed_again)
    )
    retry_on_conflict(merge.execute)


def _landing_outcomes(
    spark: SparkSession,
    inbox_path: str,
    judged: DataFrame,
    action: DataQualityAction,
    columns: DlqColumns,
    landing: str,
) -> DataFrame:
    """Each row's outcome, read back from the inbox: only rows this landing stamped are appended,
    so a row landed by an earlier stream (a reset checkpoint) is never appended twice.

    Without the stamp, a passing row lands and a failing one is back in the inbox: the append's
    transaction id still keeps a replayed batch from landing twice.
    """
    passed = F.size(FAILED_RULES) == 0
    if not columns.stamps_landings:
        return judged.withColumn("_outcome", F.when(passed, F.lit(LANDS)).otherwise(F.lit(QUARANTINED)))
    settled = (
        spark.read.format("delta")
        .load(str(inbox_path))
        .alias("settled")
        .where(F.col("_dlq_source_table") == action.quarantine.source_table)
        .select(
            "_dlq_sk",
            _settled_attempt(columns),
            "_dlq_status",
            "_dlq_resolved_at",
            "_dlq_updated_by",
        )
    )
    rows = judged.join(settled, "_dlq_sk", "left")
    same_attempt_row = F.col("_settled_attempt") == F.col(ATTEMPT)
    next_attempt_row = F.col("_settled_attempt") == F.col(ATTEMPT) + (1 if columns.counts_attempts else 0)
    outcome = (
        F.when(passed & same_attempt_row & (F.col("_dlq_updated_by") == landing), F.lit(LANDS))
        .when(passed & same_attempt_row & F.col("_dlq_resolved_at").isNotNull(), F.lit(ALREADY_LANDED))
        .when(~passed & next_attempt_row, F.col("_dlq_status"))
        .otherwise(F.lit(UNACCOUNTED))
    )
    return rows.withColumn("_outcome", outcome)


def _settled_attempt(columns: DlqColumns) -> Column:
    return columns.attempt("settled").alias("_settled_attempt")


def run_recycled(spark: SparkSession, action: DataQualityAction, warehouse: Warehouse, run_id: str) -> RecycleReport:
    """Re-validate every outbox row this action's checkpoint has not seen; each lands once."""
    columns = before_writing(spark, warehouse, action, by=run_id)

    def process(outbox_rows: DataFrame, batch_id: int, stream_id: str) -> RecycleReport:
        return recycle_batch(spark, outbox_rows, batch_id, stream_id, action, warehouse, columns, run_id)

    outbox = spark.readStream.format("delta").load(warehouse.path(action.quarantine.outbox_table))
    warnings = columns.warnings(action.quarantine.inbox_table, action.quarantine.outbox_table)
    return run_action_stream(outbox, action, warehouse, RECYCLED_STREAM, process, RecycleReport(warnings=warnings))
