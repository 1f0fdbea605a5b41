"""One owner per source_table in a shared DLQ, read from the inbox change feed with delta-rs."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from deltalake.exceptions import DeltaError

from quarantine_assets.commands import RELEASE_COMMAND, TRANSFER_COMMAND, UPGRADE_TABLES_COMMAND
from quarantine_assets.config.models import DataQualityAction
from quarantine_assets.engine.lake.claims import claims
from quarantine_assets.engine.lake.delta_log import CHANGE_DATA_FEED_PROPERTY, change_feed_start, is_true
from quarantine_assets.engine.lake.dlq_schema import CLUSTERING_COLUMN, OWNER
from quarantine_assets.engine.lake.schema_types import column_types
from quarantine_assets.engine.lake.table_health import (
    CHANGE_DATA_FEED,
    ERROR,
    INBOX_ROLE,
    WARN,
    Finding,
    missing_table_finding,
    read_table_state,
    state_metadata,
)
from quarantine_assets.engine.lake.tables import Warehouse

SINGLE_SOURCE_OWNER = "single_source_owner"


def source_owners(warehouse: Warehouse, inbox_table: str, source_table: str) -> set[str]:
    """Every `_dlq_action` that inserted rows for `source_table` since the change feed was last turned on.

    The change feed, not the current rows: delta-rs cannot read rows of a table with deletion
    vectors, and an owner whose rows were since deleted still shares the slice. Empty when the
    table has no `_dlq_action` column (rows do not say who wrote them); raises DeltaError when
    the change feed is off or unreadable.
    """
    delta_table = warehouse.delta_table(inbox_table)
    if OWNER not in column_types(delta_table):
        return set()
    quoted = source_table.replace("'", "''")
    changes = delta_table.load_cdf(
        starting_version=change_feed_start(warehouse.log(inbox_table), delta_table.version()),
        columns=[CLUSTERING_COLUMN, OWNER],
        predicate=f"_change_type = 'insert' AND {CLUSTERING_COLUMN} = '{quoted}'",
    )
    # delta-rs may hand out string views, which pyarrow's filter (drop_null) cannot take, and whose unique() turns a
    # null into "": plain strings, nulls dropped.
    owners = pa.table(changes).column(OWNER).cast(pa.string())
    return set(pc.drop_null(owners).unique().to_pylist())


def source_owner(warehouse: Warehouse, action: DataQualityAction) -> Finding:
    """A source_table has one owner across every code location and deployment sharing the DLQ."""
    inbox_table, source_table = action.quarantine.inbox_table, action.quarantine.source_table
    state = read_table_state(warehouse, inbox_table)
    if state is None:
        return missing_table_finding(warehouse, inbox_table, INBOX_ROLE, SINGLE_SOURCE_OWNER)
    claim = claims(warehouse, inbox_table).get(source_table)
    seen = state_metadata(state) | {
        "source_table": source_table,
        "expected_owner": action.owner,
        "claimed_by": claim.owner if claim else None,
        "owners_seen": [],
    }
    if claim is not None and claim.owner != action.owner:
        return Finding(
            SINGLE_SOURCE_OWNER,
            False,
            ERROR,
            f"{source_table} in {inbox_table} is claimed by {claim.owner}, not by {action.owner}, so every write of "
            f"{action.owner} to it is refused. Release the claim with `{RELEASE_COMMAND} {source_table}` or hand "
            f"it over with `{TRANSFER_COMMAND} {source_table} --to {action.owner}`",
            seen,
        )

    def unverifiable(reason: str) -> Finding:
        return Finding(
            SINGLE_SOURCE_OWNER, False, WARN, f"ownership of {source_table} cannot be verified: {reason}", seen
        )

    if OWNER not in state.columns:
        return unverifiable(
            f"{inbox_table} has no {OWNER} column, so rows do not say which action wrote them; "
            f"add it in place with: {UPGRADE_TABLES_COMMAND}"
        )
    if not is_true(state.properties.get(CHANGE_DATA_FEED_PROPERTY)):
        return unverifiable(f"the change feed of {inbox_table} is off (see the {CHANGE_DATA_FEED} check)")
    try:
        owners = source_owners(warehouse, inbox_table, source_table)
    except DeltaError as error:
        return unverifiable(f"the change feed of {inbox_table} is unreadable: {error}")
    others = sorted(owners - {action.owner})
    seen |= {"owners_seen": sorted(owners)}
    if others:
        return Finding(
            SINGLE_SOURCE_OWNER,
            False,
            ERROR,
            f"{inbox_table} holds rows for {source_table} written by {others}, not only by {action.owner}"
            f"{' (the claimed owner)' if claim else ''}: "
            "both actions recycle the same slice, so each one's fixed rows can reach the other's target. "
            "Give each action its own quarantine.source_table",
            seen,
        )
    return Finding(
        SINGLE_SOURCE_OWNER, True, ERROR, f"only {action.owner} writes {source_table} in {inbox_table}", seen
    )
