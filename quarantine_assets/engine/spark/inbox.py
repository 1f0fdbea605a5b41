"""Quarantined rows as DLQ inbox records."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from quarantine_assets.engine.lake.dlq_columns import DlqColumns
from quarantine_assets.engine.lake.dlq_schema import (
    ARRIVED_AT,
    ATTEMPT,
    BATCH_ID,
    CONFIG_VERSION,
    ERRORS,
    FAILED_RULES,
    INBOX_CONTEXT_COLUMNS,
    KEY,
    OWNER,
    RESCUED_DATA,
    ROW_DATA,
    RUN_ID,
    SOURCE_FILE,
    SOURCE_POSITION,
    SOURCE_TABLE,
    SOURCE_VERSION,
    STATUS,
    TIMESTAMP,
    UPDATED_AT,
    UPDATED_BY,
)
from quarantine_assets.engine.lake.statuses import QUARANTINED
from quarantine_assets.engine.spark.payload_types import sql_string
from quarantine_assets.engine.spark.rules import SPARK_RESCUED_DATA

# Columns the split adds to a row; everything else is the row itself.
BOOKKEEPING_COLUMNS = (
    FAILED_RULES,
    ERRORS,
    SPARK_RESCUED_DATA,
    SOURCE_FILE,
    SOURCE_POSITION,
    SOURCE_VERSION,
    ARRIVED_AT,
)
# 96 bits per batch: two batches collide with odds near b^2/2^97, negligible at 10^9 batches.
KEY_PREFIX_HEX_CHARS = 24


@dataclass(frozen=True)
class Provenance:
    """Where a quarantined batch came from and who judged it."""

    source_table: str
    owner: str
    run_id: str
    config_version: str
    stream_id: str  # the checkpoint's query id
    batch_id: int


def quote(column: str) -> Column:
    return F.col("`" + column.replace("`", "``") + "`")


def payload_columns(rows: DataFrame) -> list[str]:
    return [c for c in rows.columns if c not in BOOKKEEPING_COLUMNS]


def row_payload(columns: list[str]) -> Column:
    """The row as VARIANT, keeping NULL fields and value types."""
    return F.to_variant_object(F.struct(*[quote(c) for c in columns]))


def inbox_records(quarantined: DataFrame, provenance: Provenance) -> DataFrame:
    """Each quarantined row as an inbox record.

    The key is the batch's prefix (a hash of source, stream and batch, computed once) and the row's
    position in the batch: identical bad rows are all kept, and no row is hashed or shuffled. A
    replayed batch needs no stable key: its append is skipped as a whole (see `append_once`).
    """

    def carried(name: str, inbox_type: str) -> Column:
        """A column the split set on these rows, or NULL where this source has none."""
        return F.col(name) if name in quarantined.columns else F.lit(None).cast(inbox_type)

    def context(name: str) -> Column:
        return carried(name, INBOX_CONTEXT_COLUMNS[name]).alias(name)

    batch = "\u0001".join((provenance.source_table, provenance.stream_id, str(provenance.batch_id)))
    prefix = hashlib.sha256(batch.encode()).hexdigest()[:KEY_PREFIX_HEX_CHARS]
    key = F.concat(F.lit(prefix + "-"), F.monotonically_increasing_id().cast("string"))
    return quarantined.select(
        key.alias(KEY),
        F.lit(provenance.source_table).alias(SOURCE_TABLE),
        F.lit(QUARANTINED).alias(STATUS),
        F.current_timestamp().alias(TIMESTAMP),
        F.col(FAILED_RULES),
        carried(SPARK_RESCUED_DATA, "string").alias(RESCUED_DATA),
        row_payload(payload_columns(quarantined)).alias(ROW_DATA),
        F.lit(provenance.owner).alias(OWNER),
        F.lit(provenance.run_id).alias(RUN_ID),
        F.lit(provenance.config_version).alias(CONFIG_VERSION),
        F.lit(provenance.batch_id).cast("bigint").alias(BATCH_ID),
        context(SOURCE_FILE),
        context(SOURCE_POSITION),
        context(SOURCE_VERSION),
        F.lit(1).alias(ATTEMPT),
        F.current_timestamp().alias(UPDATED_AT),
        F.lit(provenance.owner).alias(UPDATED_BY),
        F.col(ERRORS),
        context(ARRIVED_AT),
    )


def scoped_source(target: str, source_table: str) -> str:
    """Every MERGE and UPDATE on a shared DLQ names its own source, so actions never touch each other's rows."""
    return f"{target}.{SOURCE_TABLE} = {sql_string(source_table)}"


def scoped_key_condition(target: str, source: str, source_table: str) -> str:
    """The same key, in this action's source."""
    return f"{scoped_source(target, source_table)} AND {target}.{KEY} = {source}.{KEY}"


def same_attempt(target: str, source: str, source_table: str, columns: DlqColumns) -> str:
    """The same row, and the same attempt at it where the DLQ counts attempts."""
    condition = scoped_key_condition(target, source, source_table)
    if not columns.counts_attempts:
        return condition
    # A row quarantined before `upgrade-tables` added the column is on its first attempt.
    return condition + f" AND coalesce({target}.{ATTEMPT}, 1) = coalesce({source}.{ATTEMPT}, 1)"


def attempt_column(columns: DlqColumns, alias: str) -> Column:
    """A row's attempt; 1 where nothing counts it, or where it predates the column (`upgrade-tables`)."""
    return F.coalesce(F.col(f"{alias}.{ATTEMPT}"), F.lit(1)) if columns.counts_attempts else F.lit(1)
