"""The DLQ's tables created and upgraded in place, through Spark SQL (their DDL is rendered in
`engine.lake.tables`)."""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import SparkSession

from quarantine_assets.config.models import claims_table, files_table, metrics_table, outbox_table
from quarantine_assets.engine.lake.dlq_schema import INBOX_CONTEXT_COLUMNS, OUTBOX_CONTEXT_COLUMNS
from quarantine_assets.engine.lake.tables import (
    Warehouse,
    claims_ddl,
    files_ddl,
    inbox_ddl,
    metrics_ddl,
    missing_context_columns,
    outbox_ddl,
    table_reference,
)
from quarantine_assets.engine.spark.commits import retry_on_conflict


def upgrade_dlq_tables(spark: SparkSession, warehouse: Warehouse, inbox_table: str) -> dict[str, list[str]]:
    """Add the context columns an inbox or outbox lacks, in place: `ALTER TABLE ... ADD COLUMNS` rewrites no data."""
    added = {}
    for table, context_columns in (
        (inbox_table, INBOX_CONTEXT_COLUMNS),
        (outbox_table(inbox_table), OUTBOX_CONTEXT_COLUMNS),
    ):
        missing = missing_context_columns(set(warehouse.delta_table(table).schema().to_arrow().names), context_columns)
        if missing:
            columns = ", ".join(f"{name} {sql_type}" for name, sql_type in missing.items())
            spark.sql(f"ALTER TABLE {table_reference(warehouse.path(table))} ADD COLUMNS ({columns})")
        added[table] = list(missing)
    return added


def dlq_tables(inbox_table: str) -> tuple[tuple[str, Callable[[Warehouse, str], str]], ...]:
    """The DLQ's tables, each with the function rendering its DDL."""
    return (
        (inbox_table, inbox_ddl),
        (outbox_table(inbox_table), outbox_ddl),
        (claims_table(inbox_table), claims_ddl),
        (metrics_table(inbox_table), metrics_ddl),
        (files_table(inbox_table), files_ddl),
    )


def create_dlq_tables(spark: SparkSession, warehouse: Warehouse, inbox_table: str) -> None:
    """Idempotent; a table that exists is left as it is, without asking Spark (delta-rs reads its log)."""
    for table, ddl in dlq_tables(inbox_table):
        create_if_missing(spark, warehouse, table, ddl(warehouse, inbox_table))


def create_if_missing(spark: SparkSession, warehouse: Warehouse, table: str, ddl: str) -> None:
    """A DLQ table made if it is not there: with the DLQ, or on first use for a table beside it (its metrics, its
    files) where the DLQ was created from the reference's DDL. Two writers of one DLQ may make it at once (the
    actions of one DLQ split side by side, or two processes): both commit its first version, one of them
    conflicts, and its retry finds the table there."""
    if not warehouse.is_delta_table(table):
        retry_on_conflict(lambda: spark.sql(ddl))
