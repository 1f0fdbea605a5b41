"""The inbox change feed read with delta-rs: cheap enough for a sensor tick, and no JVM."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from quarantine_assets.engine.lake.dlq_schema import SOURCE_TABLE, STATUS
from quarantine_assets.engine.lake.statuses import FIXED, POST_IMAGES


@dataclass(frozen=True)
class FixedSince:
    latest_version: int  # the inbox version read up to; the next read starts after it
    rows_fixed: int  # row images set to fixed for the source in the versions read


def fixed_since(inbox: DeltaTable, source_table: str, after_version: int) -> FixedSince:
    """Count the source's rows set to `fixed` in the commits after `after_version`."""
    latest = inbox.version()
    if latest <= after_version:
        return FixedSince(latest, 0)
    changes = pa.table(
        inbox.load_cdf(
            starting_version=after_version + 1,
            ending_version=latest,
            columns=[SOURCE_TABLE, STATUS, "_change_type"],
        )
    )
    # delta-rs hands out string views, which not every Arrow kernel takes.
    column = {name: changes[name].cast(pa.string()) for name in changes.column_names}
    fixed = pc.and_(
        pc.is_in(column["_change_type"], pa.array(POST_IMAGES)),
        pc.and_(pc.equal(column[SOURCE_TABLE], source_table), pc.equal(column[STATUS], FIXED)),
    )
    return FixedSince(latest, pc.sum(fixed.cast(pa.int64())).as_py() or 0)
