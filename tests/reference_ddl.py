"""Lakehouse Plumber's DDL for the DLQ inbox and outbox, as the reference's page gives it, with only the name
filled in."""

from __future__ import annotations

from quarantine_assets.config.models import outbox_table

REFERENCE_INBOX_DDL = """CREATE TABLE IF NOT EXISTS {table} (
  _dlq_sk STRING NOT NULL,
  _dlq_source_table STRING NOT NULL,
  _dlq_status STRING NOT NULL,
  _dlq_timestamp TIMESTAMP NOT NULL,
  _dlq_failed_rules ARRAY<STRUCT<name: STRING, rule: STRING>>,
  _dlq_rescued_data STRING,
  _row_data VARIANT NOT NULL
)
CLUSTER BY (_dlq_source_table)
TBLPROPERTIES (
  'delta.enableChangeDataFeed' = 'true',
  'delta.enableRowTracking' = 'true',
  'delta.enableDeletionVectors' = 'true'
);"""

REFERENCE_OUTBOX_DDL = """CREATE TABLE IF NOT EXISTS {table} (
  _dlq_sk STRING NOT NULL,
  _dlq_source_table STRING NOT NULL,
  _row_data VARIANT NOT NULL,
  _dlq_recycled_at TIMESTAMP NOT NULL
)
CLUSTER BY (_dlq_source_table)
TBLPROPERTIES (
  'delta.enableRowTracking' = 'true',
  'delta.enableDeletionVectors' = 'true'
);"""


def path_name(warehouse, table: str) -> str:
    return f"delta.`{warehouse.path(table)}`"


def create_reference_tables(spark, warehouse, inbox_table: str) -> None:
    """Run the statements unchanged: no USING clause, the trailing semicolon kept."""
    spark.sql(REFERENCE_INBOX_DDL.format(table=path_name(warehouse, inbox_table)))
    spark.sql(REFERENCE_OUTBOX_DDL.format(table=path_name(warehouse, outbox_table(inbox_table))))
