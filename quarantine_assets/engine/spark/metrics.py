"""The DLQ's metrics table, `<dlq_table>_metrics`: a row per run, step and source, with what the step did and the
source's backlog after it, for a dashboard in any SQL tool. The Dagster metadata says the same per run.

Each row is appended once: its append carries a Delta transaction id of its own (run, step, source), so a
retried step does not count twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from quarantine_assets.config.models import DataQualityAction, metrics_table
from quarantine_assets.engine.lake.dlq_schema import METRICS_COLUMNS, SOURCE_TABLE, STATUS, TIMESTAMP
from quarantine_assets.engine.lake.statuses import QUARANTINED
from quarantine_assets.engine.lake.tables import Warehouse, metrics_ddl
from quarantine_assets.engine.spark.commits import append_once
from quarantine_assets.engine.spark.dlq_tables import create_if_missing


@dataclass(frozen=True)
class Backlog:
    rows_by_status: dict[str, int]
    oldest_quarantined_age: timedelta | None


def record_step(
    spark: SparkSession,
    warehouse: Warehouse,
    action: DataQualityAction,
    run_id: str,
    step: str,
    rows: Mapping[str, int],
    failures_by_rule: Mapping[str, int] | None = None,
    failures_by_code: Mapping[str, int] | None = None,
) -> Backlog:
    """Appends the step's row and returns the backlog it recorded, read in one aggregate over the source's slice."""
    backlog = _backlog(spark, warehouse, action)
    age = backlog.oldest_quarantined_age
    row = (
        run_id,
        step,
        action.owner,
        action.quarantine.source_table,
        datetime.now(timezone.utc),
        dict(rows),
        dict(failures_by_rule or {}),
        dict(failures_by_code or {}),
        backlog.rows_by_status,
        age.total_seconds() if age is not None else None,
    )
    schema = ", ".join(f"{name} {sql_type.removesuffix(' NOT NULL')}" for name, sql_type in METRICS_COLUMNS.items())
    table = metrics_table(action.quarantine.inbox_table)
    create_if_missing(spark, warehouse, table, metrics_ddl(warehouse, action.quarantine.inbox_table))
    writer = f"metrics:{run_id}:{step}:{action.quarantine.source_table}"
    append_once(spark.createDataFrame([row], schema), warehouse.path(table), writer, 0)
    return backlog


def _backlog(spark: SparkSession, warehouse: Warehouse, action: DataQualityAction) -> Backlog:
    inbox = spark.read.format("delta").load(warehouse.path(action.quarantine.inbox_table))
    counted = (
        inbox.where(F.col(SOURCE_TABLE) == action.quarantine.source_table)
        .groupBy(STATUS)
        .agg(
            F.count(F.lit(1)).alias("rows"),
            F.min(TIMESTAMP).alias("oldest"),
            F.current_timestamp().alias("now"),
        )
        .collect()
    )
    quarantined = next((row for row in counted if row[STATUS] == QUARANTINED), None)
    age = quarantined["now"] - quarantined["oldest"] if quarantined is not None else None
    return Backlog({row[STATUS]: row["rows"] for row in counted}, age)
