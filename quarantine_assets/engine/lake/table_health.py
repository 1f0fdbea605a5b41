"""Is a DLQ table set up so that no row is lost? Answered from the Delta log with delta-rs, never a JVM.

A finding with severity ERROR means rows would be lost or stuck (the split and the recycle path
refuse to run); WARN means the DLQ works but less well (slower, conflicting or with less context).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from deltalake.exceptions import TableNotFoundError
from pyarrow.fs import FileSystem

from quarantine_assets import codes
from quarantine_assets.commands import CREATE_TABLES_COMMAND, DDL_COMMAND, UPGRADE_TABLES_COMMAND
from quarantine_assets.config.models import DataQualityAction, outbox_table
from quarantine_assets.engine.lake.delta_log import CHANGE_DATA_FEED_PROPERTY, clustering_columns, is_true
from quarantine_assets.engine.lake.dlq_columns import DlqColumns
from quarantine_assets.engine.lake.dlq_schema import (
    CLUSTERING_COLUMN,
    INBOX_CONTEXT_COLUMNS,
    INBOX_CONTEXT_LOSSES,
    INBOX_CORE_COLUMNS,
    OUTBOX_CONTEXT_COLUMNS,
    OUTBOX_CONTEXT_LOSSES,
    OUTBOX_CORE_COLUMNS,
)
from quarantine_assets.engine.lake.schema_types import column_types, expected_column, render_column
from quarantine_assets.engine.lake.tables import (
    INBOX_PROPERTIES,
    OUTBOX_PROPERTIES,
    Warehouse,
    table_reference,
)
from quarantine_assets.errors import MissingTableError, UnhealthyTableError

ERROR = "ERROR"
WARN = "WARN"

# Check names: one per Dagster asset check, and the `name` of the finding it reports.
EXISTS = "exists"
CHANGE_DATA_FEED = "change_data_feed"
ROW_TRACKING = "row_tracking"
DELETION_VECTORS = "deletion_vectors"
LAYOUT = "clustered_by_source_table"
SCHEMA = "schema"
OUTBOX_EXISTS = "outbox_exists"


@dataclass(frozen=True)
class Finding:
    name: str
    passed: bool
    severity: str  # ERROR | WARN: what a failure costs, see the module docstring
    description: str
    metadata: dict


@dataclass(frozen=True)
class DlqRole:
    """What one kind of DLQ table must look like; the shapes themselves live in tables.py."""

    name: str
    core_columns: dict[str, str]
    context_columns: dict[str, str]
    properties: dict[str, str]
    context_losses: dict[str, str]  # what the DLQ loses without each context column


INBOX_ROLE = DlqRole("inbox", INBOX_CORE_COLUMNS, INBOX_CONTEXT_COLUMNS, INBOX_PROPERTIES, INBOX_CONTEXT_LOSSES)
OUTBOX_ROLE = DlqRole("outbox", OUTBOX_CORE_COLUMNS, OUTBOX_CONTEXT_COLUMNS, OUTBOX_PROPERTIES, OUTBOX_CONTEXT_LOSSES)


@dataclass(frozen=True)
class _PropertyRequirement:
    check: str
    feature: str
    why: str


_PROPERTY_REQUIREMENTS = {
    CHANGE_DATA_FEED_PROPERTY: _PropertyRequirement(
        CHANGE_DATA_FEED,
        "changeDataFeed",
        "the outbox reads fixed rows from the inbox change feed, so without it no fixed row is ever recycled",
    ),
    "delta.enableRowTracking": _PropertyRequirement(
        ROW_TRACKING,
        "rowTracking",
        "Lakehouse Plumber's DDL requires it: rows keep their identity across MERGE and UPDATE rewrites, "
        "and the reference recycle stream fails at runtime without it",
    ),
    "delta.enableDeletionVectors": _PropertyRequirement(
        DELETION_VECTORS,
        "deletionVectors",
        "without them, MERGEs of actions sharing this DLQ rewrite whole files and fail with "
        "ConcurrentAppendException when their commits overlap",
    ),
}


@dataclass(frozen=True)
class TableState:
    """One snapshot of a table's log, read once per inspection."""

    table: str
    path: str
    log: FileSystem
    version: int
    properties: dict[str, str]
    table_features: list[str]
    partition_columns: list[str]
    columns: dict[str, tuple[str, bool]]  # name -> (type as Spark prints it, nullable)


def checks_for(role: DlqRole) -> tuple[str, ...]:
    """The checks a table of this role gets, in the order they are reported."""
    properties = tuple(_PROPERTY_REQUIREMENTS[key].check for key in role.properties)
    return (*properties, LAYOUT, SCHEMA)


def run_check(warehouse: Warehouse, table: str, role: DlqRole, check: str) -> Finding:
    """One check on its own: reads the log once; a missing table fails it with the fix."""
    state = read_table_state(warehouse, table)
    if state is None:
        return missing_table_finding(warehouse, table, role, check)
    return _CHECKS[check](state, role)


def table_findings(warehouse: Warehouse, table: str, role: DlqRole) -> list[Finding]:
    """Every check of the role from one read of the log; a missing table is the only finding."""
    return _findings(warehouse, table, role, read_table_state(warehouse, table))


def _findings(warehouse: Warehouse, table: str, role: DlqRole, state: TableState | None) -> list[Finding]:
    if state is None:
        return [missing_table_finding(warehouse, table, role, EXISTS)]
    return [_CHECKS[check](state, role) for check in checks_for(role)]


def outbox_exists(warehouse: Warehouse, inbox_table: str) -> Finding:
    """The outbox is not configured: its name is always derived from the inbox's."""
    outbox = outbox_table(inbox_table)
    if not warehouse.is_delta_table(outbox):
        return missing_table_finding(warehouse, outbox, OUTBOX_ROLE, OUTBOX_EXISTS)
    return Finding(
        OUTBOX_EXISTS,
        True,
        ERROR,
        f"outbox {outbox} exists",
        {"table": outbox, "path": warehouse.path(outbox)},
    )


def data_losing_problems(warehouse: Warehouse, action: DataQualityAction) -> list[Finding]:
    """The failed ERROR findings of the action's inbox and outbox: the ones that would lose rows."""
    return _data_losing_problems(warehouse, _dlq_states(warehouse, action))


def require_healthy_dlq(warehouse: Warehouse, action: DataQualityAction) -> DlqColumns:
    """Fail before anything is written when the DLQ tables are missing or would lose rows.

    Otherwise, the columns they have: writers adapt to a DLQ that lacks context columns.
    """
    states = _dlq_states(warehouse, action)
    problems = _data_losing_problems(warehouse, states)
    missing = [problem for problem in problems if problem.name == EXISTS]
    if missing:
        raise MissingTableError(
            codes.DLQ_TABLE_MISSING,
            "; ".join(problem.description for problem in missing),
            file=action.config_file,
            field="quarantine.dlq_table",
        )
    if problems:
        raise UnhealthyTableError(
            codes.DLQ_WOULD_LOSE_ROWS,
            f"DLQ tables of {action.owner} would lose rows: "
            + "; ".join(f"[{problem.name}] {problem.description}" for problem in problems),
            file=action.config_file,
            field="quarantine.dlq_table",
        )
    inbox, outbox = (frozenset(state.columns) for _, _, state in states)
    return DlqColumns(inbox=inbox, outbox=outbox)


def _dlq_states(warehouse: Warehouse, action: DataQualityAction) -> list[tuple[str, DlqRole, TableState | None]]:
    tables = ((action.quarantine.inbox_table, INBOX_ROLE), (action.quarantine.outbox_table, OUTBOX_ROLE))
    return [(table, role, read_table_state(warehouse, table)) for table, role in tables]


def _data_losing_problems(warehouse: Warehouse, states) -> list[Finding]:
    findings = [finding for table, role, state in states for finding in _findings(warehouse, table, role, state)]
    return [finding for finding in findings if not finding.passed and finding.severity == ERROR]


def read_table_state(warehouse: Warehouse, table: str) -> TableState | None:
    try:
        delta_table = warehouse.delta_table(table)
    except TableNotFoundError:
        return None
    metadata, protocol = delta_table.metadata(), delta_table.protocol()
    return TableState(
        table=table,
        path=warehouse.path(table),
        log=warehouse.log(table),
        version=delta_table.version(),
        properties=dict(metadata.configuration),
        table_features=sorted(set(protocol.reader_features or []) | set(protocol.writer_features or [])),
        partition_columns=list(metadata.partition_columns),
        columns=column_types(delta_table),
    )


def missing_table_finding(warehouse: Warehouse, table: str, role: DlqRole, name: str) -> Finding:
    path = warehouse.path(table)
    return Finding(
        name,
        False,
        ERROR,
        f"DLQ {role.name} table {table} does not exist (expected a Delta table at {path}); "
        f"create it with: {CREATE_TABLES_COMMAND}",
        {"table": table, "path": path, "exists": False},
    )


def _property_check(key: str) -> Callable[[TableState, DlqRole], Finding]:
    requirement = _PROPERTY_REQUIREMENTS[key]

    def check(state: TableState, role: DlqRole) -> Finding:
        value = state.properties.get(key)
        seen = state_metadata(state) | {
            key: value if value is not None else "unset",
            "table_features": state.table_features,
            "feature_present": requirement.feature in state.table_features,
        }
        if is_true(value):
            return Finding(requirement.check, True, ERROR, f"{state.table}: {key} is true", seen)
        return Finding(
            requirement.check,
            False,
            ERROR,
            f"{state.table}: {key} is {value or 'unset'}; {requirement.why}. Fix: "
            f"ALTER TABLE {table_reference(state.path)} SET TBLPROPERTIES ('{key}' = 'true')",
            seen,
        )

    return check


def _layout_finding(state: TableState, role: DlqRole) -> Finding:
    clustering = clustering_columns(state.log, state.version)
    seen = state_metadata(state) | {"clustering_columns": clustering, "partition_columns": state.partition_columns}
    # Either layout keeps one source's rows in their own files, so scoped MERGEs of different
    # sources touch disjoint files; clustering on more columns mixes sources within a file.
    if clustering == [CLUSTERING_COLUMN] or CLUSTERING_COLUMN in state.partition_columns:
        return Finding(LAYOUT, True, WARN, f"{state.table}: rows are laid out by {CLUSTERING_COLUMN}", seen)
    return Finding(
        LAYOUT,
        False,
        WARN,
        f"{state.table} is clustered by {clustering or 'nothing'} and partitioned by "
        f"{state.partition_columns or 'nothing'}: concurrent MERGEs for different sources read the "
        f"same files and conflict (they retry, so runs slow down). Fix: "
        f"ALTER TABLE {table_reference(state.path)} CLUSTER BY ({CLUSTERING_COLUMN})",
        seen,
    )


def _schema_finding(state: TableState, role: DlqRole) -> Finding:
    all_columns = role.core_columns | role.context_columns
    expected = {name: expected_column(sql_type) for name, sql_type in all_columns.items()}
    wrong = {
        name: f"{render_column(state.columns[name])}, expected {render_column(column)}"
        for name, column in expected.items()
        if name in state.columns and state.columns[name] != column
    }
    missing_core = [name for name in role.core_columns if name not in state.columns]
    missing_context = [name for name in role.context_columns if name not in state.columns]
    seen = state_metadata(state) | {
        "columns": {name: render_column(column) for name, column in state.columns.items()},
        "wrong_columns": wrong,
        "missing_core_columns": missing_core,
        "missing_context_columns": missing_context,
        "lost_without_context_columns": {name: role.context_losses[name] for name in missing_context},
    }
    # A present context column is written like a core one, so a wrong type breaks writes just the same.
    if wrong or missing_core:
        problems = [f"{name} is {mismatch}" for name, mismatch in wrong.items()]
        problems += [f"{name} is missing" for name in missing_core]
        return Finding(
            SCHEMA,
            False,
            ERROR,
            f"{state.table} does not have the {role.name} schema: {'; '.join(problems)}. "
            f"The expected DDL is printed by: {DDL_COMMAND}",
            seen,
        )
    if missing_context:
        losses = "; ".join(f"without {name}, {role.context_losses[name]}" for name in missing_context)
        return Finding(
            SCHEMA,
            False,
            WARN,
            f"{state.table} has the reference columns, so every command and asset works, but it lacks "
            f"{missing_context}: {losses}. Add them in place (nothing is rewritten) with: {UPGRADE_TABLES_COMMAND}",
            seen,
        )
    return Finding(SCHEMA, True, ERROR, f"{state.table} has every {role.name} column with the expected type", seen)


_CHECKS: dict[str, Callable[[TableState, DlqRole], Finding]] = {
    **{requirement.check: _property_check(key) for key, requirement in _PROPERTY_REQUIREMENTS.items()},
    LAYOUT: _layout_finding,
    SCHEMA: _schema_finding,
}


def state_metadata(state: TableState) -> dict:
    return {"table": state.table, "path": state.path, "version": state.version}
