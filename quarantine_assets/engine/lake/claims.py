"""Who owns each slice of a DLQ, read from `<dlq_table>_claims` without a JVM (the writes are in
`engine.spark.claims`)."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow.compute as pc

from quarantine_assets.config.models import claims_table
from quarantine_assets.engine.lake.dlq_schema import CLAIMED_BY, OWNER, SOURCE_TABLE
from quarantine_assets.engine.lake.tables import Warehouse


@dataclass(frozen=True)
class Claim:
    source_table: str
    owner: str
    claimed_by: str | None


def claims(warehouse: Warehouse, inbox_table: str) -> dict[str, Claim]:
    """Every claim on the DLQ, by source_table; empty while nobody has claimed anything."""
    table = claims_table(inbox_table)
    if not warehouse.is_delta_table(table):
        return {}
    columns = [SOURCE_TABLE, OWNER, CLAIMED_BY]
    rows = warehouse.delta_table(table).to_pyarrow_table(columns=columns)
    return {
        source: Claim(source, owner, by)
        for source, owner, by in zip(
            *(pc.cast(rows[name], "string").to_pylist() for name in rows.column_names), strict=True
        )
    }
