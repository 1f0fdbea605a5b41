"""Quarantined rows as DLQ inbox records."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from quarantine_assets.engine.rules import ERRORS, FAILED_RULES, RESCUED_DATA
from quarantine_assets.engine.source import ARRIVED_AT, SOURCE_FILE, SOURCE_POSITION, SOURCE_VERSION
from quarantine_assets.engine.statuses import QUARANTINED
from quarantine_assets.engine.tables import INBOX_CONTEXT_COLUMNS

# Columns the split adds to a row; everything else is the row itself.
BOOKKEEPING_COLUMNS = (FAILED_RULES, ERRORS, RESCUED_DATA, SOURCE_FILE, SOURCE_POSITION, SOURCE_VERSION, ARRIVED_AT)
# 96 bits per batch: two batches collide with odds near b^2/2^97, negligible at 10^9 batches.
KEY_PREFIX_HEX_CHARS = 24


@dataclass(frozen=True)
class Provenance:
    """Where a quarantined batch came from and who judged it."""

    source_table: str
    action: str
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
        key.alias("_dlq_sk"),
        F.lit(provenance.source_table).alias("_dlq_source_table"),
        F.lit(QUARANTINED).alias("_dlq_status"),
        F.current_timestamp().alias("_dlq_timestamp"),
        F.col(FAILED_RULES).alias("_dlq_failed_rules"),
        carried(RESCUED_DATA, "string").alias("_dlq_rescued_data"),
        row_payload(payload_columns(quarantined)).alias("_row_data"),
        F.lit(provenance.action).alias("_dlq_action"),
        F.lit(provenance.run_id).alias("_dlq_run_id"),
        F.lit(provenance.config_version).alias("_dlq_config_version"),
        F.lit(provenance.batch_id).cast("bigint").alias("_dlq_batch_id"),
        context(SOURCE_FILE),
        context(SOURCE_POSITION),
        context(SOURCE_VERSION),
        F.lit(1).alias("_dlq_attempt"),
        F.current_timestamp().alias("_dlq_updated_at"),
        F.lit(provenance.action).alias("_dlq_updated_by"),
        F.col(ERRORS).alias("_dlq_errors"),
        context(ARRIVED_AT),
    )


def scoped_key_condition(target: str, source: str, source_table: str) -> str:
    """Every MERGE on a shared DLQ names its own source, so actions never touch each other's rows."""
    return f"{target}._dlq_source_table = '{source_table}' AND {target}._dlq_sk = {source}._dlq_sk"
