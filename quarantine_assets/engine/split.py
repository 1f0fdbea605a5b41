"""The split: one scan of each source batch yields validated rows and DLQ inbox records."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession

from quarantine_assets.config.models import DataQualityAction
from quarantine_assets.engine.commits import append_once
from quarantine_assets.engine.inbox import BOOKKEEPING_COLUMNS, Provenance, inbox_records, merge_into_inbox
from quarantine_assets.engine.rules import (
    applicable_rules,
    batch_counts,
    fails_any,
    names_with_action,
    with_failed_rules,
)
from quarantine_assets.engine.source import read_source_stream
from quarantine_assets.engine.streams import add_counts, run_available_now
from quarantine_assets.engine.table_health import require_healthy_dlq
from quarantine_assets.engine.tables import Warehouse
from quarantine_assets.errors import DataQualityFailure

SPLIT_STREAM = "split"


@dataclass
class SplitReport:
    """Totals over the batches one materialization processed."""

    batches: int = 0
    rows_read: int = 0
    rows_validated: int = 0
    rows_quarantined: int = 0  # mode quarantine: kept in the inbox
    rows_dropped: int = 0  # mode dqe: gone, as the reference does
    rows_held_in_inbox: int = 0  # quarantined rows found in the inbox after the write, by key and payload
    failures_per_rule: Counter = field(default_factory=Counter)


def split_writer_id(action: DataQualityAction, stream_id: str) -> str:
    return f"quarantine_assets/{action.owner}/{SPLIT_STREAM}/{stream_id}"


def split_batch(
    spark: SparkSession,
    batch: DataFrame,
    batch_id: int,
    stream_id: str,
    action: DataQualityAction,
    warehouse: Warehouse,
    run_id: str,
) -> SplitReport:
    rules = applicable_rules(action.rules, batch.columns)
    # Cached so that counting and both writes read the source once.
    evaluated = with_failed_rules(batch, rules).persist()
    try:
        counts = batch_counts(evaluated, rules)
        if counts.fail_rule_violations:
            failed = [name for name in names_with_action(rules, "fail") if counts.failures_per_rule[name]]
            raise DataQualityFailure(
                "QA-DQ-001",
                f"{counts.fail_rule_violations} row(s) violate fail rule(s) {failed} in batch {batch_id}; "
                "nothing from this batch was written",
                file=action.config_file,
                field=action.name,
            )
        held = 0
        rejected = fails_any(names_with_action(rules, "drop"))
        validated = evaluated.where(~rejected).drop(*BOOKKEEPING_COLUMNS)
        append_once(validated, warehouse.path(action.target_table), split_writer_id(action, stream_id), batch_id)
        if action.quarantine is not None:
            provenance = Provenance(
                source_table=action.quarantine.source_table,
                action=action.owner,
                run_id=run_id,
                config_version=action.config_version,
                batch_id=batch_id,
            )
            held = merge_into_inbox(
                spark,
                warehouse.path(action.quarantine.dlq_table),
                inbox_records(evaluated.where(rejected), provenance),
                action.quarantine.source_table,
            )
    finally:
        evaluated.unpersist()
    rejected_count = counts.rows - counts.kept
    return SplitReport(
        batches=1,
        rows_read=counts.rows,
        rows_validated=counts.kept,
        rows_quarantined=rejected_count if action.quarantine is not None else 0,
        rows_dropped=0 if action.quarantine is not None else rejected_count,
        rows_held_in_inbox=held,
        failures_per_rule=Counter(counts.failures_per_rule),
    )


def run_split(spark: SparkSession, action: DataQualityAction, warehouse: Warehouse, run_id: str) -> SplitReport:
    """Process every source batch not yet seen by this action's checkpoint, then stop."""
    if action.quarantine is not None:
        require_healthy_dlq(warehouse, action)
    total = SplitReport()

    def on_batch(batch: DataFrame, batch_id: int, stream_id: str) -> None:
        add_counts(total, split_batch(spark, batch, batch_id, stream_id, action, warehouse, run_id))

    run_available_now(
        read_source_stream(spark, action.source, warehouse),
        on_batch,
        warehouse.checkpoint(action.key, SPLIT_STREAM),
        query_name=f"{action.key}_{SPLIT_STREAM}",
    )
    return total
