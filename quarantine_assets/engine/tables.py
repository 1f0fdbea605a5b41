"""Where DLQ tables live, what they look like, and how they are created."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from deltalake import DeltaTable

from quarantine_assets.config.models import outbox_table

if TYPE_CHECKING:  # no pyspark at import: the delta-rs checks and sensors share this module
    from pyspark.sql import SparkSession

# The reference's columns, verbatim (seed 000), then ours: the context seeds 001/002 ask for.
INBOX_CORE_COLUMNS = {
    "_dlq_sk": "STRING NOT NULL",
    "_dlq_source_table": "STRING NOT NULL",
    "_dlq_status": "STRING NOT NULL",
    "_dlq_timestamp": "TIMESTAMP NOT NULL",
    "_dlq_failed_rules": "ARRAY<STRUCT<name: STRING, rule: STRING>>",
    "_dlq_rescued_data": "STRING",
    "_row_data": "VARIANT NOT NULL",
}
INBOX_CONTEXT_COLUMNS = {
    "_dlq_action": "STRING",  # owning action: pipeline/flowgroup/action
    "_dlq_run_id": "STRING",  # the Dagster run that wrote the row
    "_dlq_config_version": "STRING",  # hash of the flowgroup and expectations that judged it
    "_dlq_batch_id": "BIGINT",  # the source stream's micro-batch
    "_dlq_source_file": "STRING",  # the file the row came from (file sources)
    "_dlq_attempt": "INT",  # 1 on first quarantine, +1 each failed recycle
    "_dlq_reason": "STRING",  # why a row was discarded or gave up
    "_dlq_resolved_at": "TIMESTAMP",  # when the recycled row landed in the validated table
    "_dlq_updated_at": "TIMESTAMP",
    "_dlq_updated_by": "STRING",
}
OUTBOX_CORE_COLUMNS = {
    "_dlq_sk": "STRING NOT NULL",
    "_dlq_source_table": "STRING NOT NULL",
    "_row_data": "VARIANT NOT NULL",
    "_dlq_recycled_at": "TIMESTAMP NOT NULL",
}
OUTBOX_CONTEXT_COLUMNS = {
    "_dlq_attempt": "INT",  # with the key, lets a re-fixed row recycle again
    "_dlq_action": "STRING",
}
CLUSTERING_COLUMN = "_dlq_source_table"
INBOX_PROPERTIES = {
    "delta.enableChangeDataFeed": "true",
    "delta.enableRowTracking": "true",
    "delta.enableDeletionVectors": "true",
}
OUTBOX_PROPERTIES = {
    "delta.enableRowTracking": "true",
    "delta.enableDeletionVectors": "true",
}


@dataclass(frozen=True)
class Warehouse:
    """Maps `catalog.schema.table` to `<root>/<catalog>/<schema>/<table>`: no metastore needed."""

    root: Path

    def path(self, qualified_name: str) -> Path:
        catalog, schema, table = qualified_name.split(".")
        return self.root / catalog / schema / table

    def checkpoint(self, action_key: str, stream: str) -> Path:
        return self.root / "_checkpoints" / action_key / stream


def _ddl(path: Path, columns: dict[str, str], properties: dict[str, str]) -> str:
    column_lines = ",\n".join(f"  {name} {sql_type}" for name, sql_type in columns.items())
    property_lines = ",\n".join(f"  '{key}' = '{value}'" for key, value in properties.items())
    return (
        f"CREATE TABLE IF NOT EXISTS delta.`{path}` (\n{column_lines}\n)\n"
        f"USING DELTA\nCLUSTER BY ({CLUSTERING_COLUMN})\nTBLPROPERTIES (\n{property_lines}\n)"
    )


def inbox_ddl(warehouse: Warehouse, dlq_table: str) -> str:
    columns = INBOX_CORE_COLUMNS | INBOX_CONTEXT_COLUMNS
    return _ddl(warehouse.path(dlq_table), columns, INBOX_PROPERTIES)


def outbox_ddl(warehouse: Warehouse, dlq_table: str) -> str:
    columns = OUTBOX_CORE_COLUMNS | OUTBOX_CONTEXT_COLUMNS
    return _ddl(warehouse.path(outbox_table(dlq_table)), columns, OUTBOX_PROPERTIES)


def create_dlq_tables(spark: "SparkSession", warehouse: Warehouse, dlq_table: str) -> None:
    """Idempotent; a table that exists is left as it is, without asking Spark (delta-rs reads its log)."""
    for table, ddl in ((dlq_table, inbox_ddl), (outbox_table(dlq_table), outbox_ddl)):
        if not DeltaTable.is_deltatable(str(warehouse.path(table))):
            spark.sql(ddl(warehouse, dlq_table))
