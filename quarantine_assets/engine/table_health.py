"""Is a DLQ table set up so that no row is lost? Answered from the Delta log with delta-rs, never a JVM.

A finding with severity ERROR means rows would be lost or stuck (the split and the recycle path
refuse to run); WARN means the DLQ works but less well (slower, conflicting or with less context).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError

from quarantine_assets.config.models import OUTBOX_SUFFIX, DataQualityAction
from quarantine_assets.engine.delta_log import (
    CHANGE_DATA_FEED_PROPERTY,
    change_feed_start,
    clustering_columns,
    is_true,
)
from quarantine_assets.engine.tables import (
    CLUSTERING_COLUMN,
    INBOX_CONTEXT_COLUMNS,
    INBOX_CORE_COLUMNS,
    INBOX_PROPERTIES,
    OUTBOX_CONTEXT_COLUMNS,
    OUTBOX_CORE_COLUMNS,
    OUTBOX_PROPERTIES,
    Warehouse,
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
SINGLE_SOURCE_OWNER = "single_source_owner"

CREATE_TABLES_COMMAND = "quarantine-assets create-tables"
DDL_COMMAND = "quarantine-assets ddl"
OWNER_COLUMN = "_dlq_action"


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


INBOX_ROLE = DlqRole("inbox", INBOX_CORE_COLUMNS, INBOX_CONTEXT_COLUMNS, INBOX_PROPERTIES)
OUTBOX_ROLE = DlqRole("outbox", OUTBOX_CORE_COLUMNS, OUTBOX_CONTEXT_COLUMNS, OUTBOX_PROPERTIES)


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
        "seed 000 requires it: rows keep their identity across MERGE and UPDATE rewrites, "
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
class _TableState:
    """One snapshot of a table's log, read once per inspection."""

    table: str
    path: Path
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
    state = _read_table(warehouse, table)
    if state is None:
        return _missing_table(warehouse, table, role, check)
    return _CHECKS[check](state, role)


def table_findings(warehouse: Warehouse, table: str, role: DlqRole) -> list[Finding]:
    """Every check of the role from one read of the log; a missing table is the only finding."""
    state = _read_table(warehouse, table)
    if state is None:
        return [_missing_table(warehouse, table, role, EXISTS)]
    return [_CHECKS[check](state, role) for check in checks_for(role)]


def outbox_exists(warehouse: Warehouse, dlq_table: str) -> Finding:
    """The outbox is not configured: its name is always derived from the inbox's."""
    outbox = dlq_table + OUTBOX_SUFFIX
    if not DeltaTable.is_deltatable(str(warehouse.path(outbox))):
        return _missing_table(warehouse, outbox, OUTBOX_ROLE, OUTBOX_EXISTS)
    return Finding(
        OUTBOX_EXISTS,
        True,
        ERROR,
        f"outbox {outbox} exists",
        {"table": outbox, "path": str(warehouse.path(outbox))},
    )


def data_losing_problems(warehouse: Warehouse, action: DataQualityAction) -> list[Finding]:
    """The failed ERROR findings of the action's inbox and outbox: the ones that would lose rows."""
    if action.quarantine is None:
        return []
    findings = table_findings(warehouse, action.quarantine.dlq_table, INBOX_ROLE)
    findings += table_findings(warehouse, action.quarantine.outbox_table, OUTBOX_ROLE)
    return [finding for finding in findings if not finding.passed and finding.severity == ERROR]


def require_healthy_dlq(warehouse: Warehouse, action: DataQualityAction) -> None:
    """Fail before anything is written when the DLQ tables are missing or would lose rows."""
    problems = data_losing_problems(warehouse, action)
    missing = [problem for problem in problems if problem.name == EXISTS]
    if missing:
        raise MissingTableError(
            "QA-TBL-001",
            "; ".join(problem.description for problem in missing),
            file=action.config_file,
            field="quarantine.dlq_table",
        )
    if problems:
        raise UnhealthyTableError(
            "QA-TBL-003",
            f"DLQ tables of {action.owner} would lose rows: "
            + "; ".join(f"[{problem.name}] {problem.description}" for problem in problems),
            file=action.config_file,
            field="quarantine.dlq_table",
        )


def source_owners(inbox_path: Path, source_table: str) -> set[str]:
    """Every `_dlq_action` that inserted rows for `source_table` since the change feed was last turned on.

    The change feed, not the current rows: delta-rs cannot read rows of a table with deletion
    vectors, and an owner whose rows were since deleted still shares the slice. Empty when the
    table has no `_dlq_action` column (rows do not say who wrote them); raises DeltaError when
    the change feed is off or unreadable.
    """
    delta_table = DeltaTable(str(inbox_path))
    if OWNER_COLUMN not in _columns(delta_table):
        return set()
    quoted = source_table.replace("'", "''")
    changes = delta_table.load_cdf(
        starting_version=change_feed_start(inbox_path, delta_table.version()),
        columns=[CLUSTERING_COLUMN, OWNER_COLUMN],
        predicate=f"_change_type = 'insert' AND {CLUSTERING_COLUMN} = '{quoted}'",
    )
    # Nulls dropped before unique(): on string_view columns pyarrow turns a null into "".
    return set(pc.drop_null(pa.table(changes).column(OWNER_COLUMN)).unique().to_pylist())


def source_owner(warehouse: Warehouse, action: DataQualityAction) -> Finding:
    """A source_table has one owner across every code location and deployment sharing the DLQ."""
    dlq_table, source_table = action.quarantine.dlq_table, action.quarantine.source_table
    state = _read_table(warehouse, dlq_table)
    if state is None:
        return _missing_table(warehouse, dlq_table, INBOX_ROLE, SINGLE_SOURCE_OWNER)
    seen = _seen(state) | {"source_table": source_table, "expected_owner": action.owner, "owners_seen": []}

    def unverifiable(reason: str) -> Finding:
        return Finding(
            SINGLE_SOURCE_OWNER, False, WARN, f"ownership of {source_table} cannot be verified: {reason}", seen
        )

    if OWNER_COLUMN not in state.columns:
        return unverifiable(
            f"{dlq_table} has no {OWNER_COLUMN} column, so rows do not say which action wrote them; "
            f"add it with: ALTER TABLE delta.`{state.path}` ADD COLUMNS ({OWNER_COLUMN} STRING)"
        )
    if not is_true(state.properties.get(CHANGE_DATA_FEED_PROPERTY)):
        return unverifiable(f"the change feed of {dlq_table} is off (see the {CHANGE_DATA_FEED} check)")
    try:
        owners = source_owners(state.path, source_table)
    except DeltaError as error:
        return unverifiable(f"the change feed of {dlq_table} is unreadable: {error}")
    others = sorted(owners - {action.owner})
    seen |= {"owners_seen": sorted(owners)}
    if others:
        return Finding(
            SINGLE_SOURCE_OWNER,
            False,
            ERROR,
            f"{dlq_table} holds rows for {source_table} written by {others}, not only by {action.owner}: "
            "both actions recycle the same slice, so each one's fixed rows can reach the other's target. "
            "Give each action its own quarantine.source_table",
            seen,
        )
    return Finding(SINGLE_SOURCE_OWNER, True, ERROR, f"only {action.owner} writes {source_table} in {dlq_table}", seen)


def _read_table(warehouse: Warehouse, table: str) -> _TableState | None:
    path = warehouse.path(table)
    try:
        delta_table = DeltaTable(str(path))
    except TableNotFoundError:
        return None
    metadata, protocol = delta_table.metadata(), delta_table.protocol()
    return _TableState(
        table=table,
        path=path,
        version=delta_table.version(),
        properties=dict(metadata.configuration),
        table_features=sorted(set(protocol.reader_features or []) | set(protocol.writer_features or [])),
        partition_columns=list(metadata.partition_columns),
        columns=_columns(delta_table),
    )


def _missing_table(warehouse: Warehouse, table: str, role: DlqRole, name: str) -> Finding:
    path = warehouse.path(table)
    return Finding(
        name,
        False,
        ERROR,
        f"DLQ {role.name} table {table} does not exist (expected a Delta table at {path}); "
        f"create it with: {CREATE_TABLES_COMMAND}",
        {"table": table, "path": str(path), "exists": False},
    )


def _property_check(key: str) -> Callable[[_TableState, DlqRole], Finding]:
    requirement = _PROPERTY_REQUIREMENTS[key]

    def check(state: _TableState, role: DlqRole) -> Finding:
        value = state.properties.get(key)
        seen = _seen(state) | {
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
            f"ALTER TABLE delta.`{state.path}` SET TBLPROPERTIES ('{key}' = 'true')",
            seen,
        )

    return check


def _layout_finding(state: _TableState, role: DlqRole) -> Finding:
    clustering = clustering_columns(state.path, state.version)
    seen = _seen(state) | {"clustering_columns": clustering, "partition_columns": state.partition_columns}
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
        f"ALTER TABLE delta.`{state.path}` CLUSTER BY ({CLUSTERING_COLUMN})",
        seen,
    )


def _schema_finding(state: _TableState, role: DlqRole) -> Finding:
    all_columns = role.core_columns | role.context_columns
    expected = {name: _expected_column(sql_type) for name, sql_type in all_columns.items()}
    wrong = {
        name: f"{_render(state.columns[name])}, expected {_render(column)}"
        for name, column in expected.items()
        if name in state.columns and state.columns[name] != column
    }
    missing_core = [name for name in role.core_columns if name not in state.columns]
    missing_context = [name for name in role.context_columns if name not in state.columns]
    seen = _seen(state) | {
        "columns": {name: _render(column) for name, column in state.columns.items()},
        "wrong_columns": wrong,
        "missing_core_columns": missing_core,
        "missing_context_columns": missing_context,
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
        additions = ", ".join(f"{name} {role.context_columns[name]}" for name in missing_context)
        return Finding(
            SCHEMA,
            False,
            WARN,
            f"{state.table} lacks context columns {missing_context}; rows are kept but without that context. "
            f"Add them with: ALTER TABLE delta.`{state.path}` ADD COLUMNS ({additions})",
            seen,
        )
    return Finding(SCHEMA, True, ERROR, f"{state.table} has every {role.name} column with the expected type", seen)


_CHECKS: dict[str, Callable[[_TableState, DlqRole], Finding]] = {
    **{requirement.check: _property_check(key) for key, requirement in _PROPERTY_REQUIREMENTS.items()},
    LAYOUT: _layout_finding,
    SCHEMA: _schema_finding,
}


def _seen(state: _TableState) -> dict:
    return {"table": state.table, "path": str(state.path), "version": state.version}


# --- schema types, compared the way Spark prints them ----------------------------------------

_TYPE_SYNONYMS = {"integer": "int", "long": "bigint", "short": "smallint", "byte": "tinyint"}
_NOT_NULL = " NOT NULL"


def _columns(delta_table: DeltaTable) -> dict[str, tuple[str, bool]]:
    fields = json.loads(delta_table.schema().to_json())["fields"]
    return {field["name"]: (_delta_type(field["type"]), field["nullable"]) for field in fields}


def _delta_type(delta_type: str | dict) -> str:
    """A Delta schema JSON type as Spark DDL prints it; nested nullability is not part of the contract."""
    if isinstance(delta_type, str):
        return _normalise(delta_type)
    kind = delta_type["type"]
    if kind == "array":
        return f"array<{_delta_type(delta_type['elementType'])}>"
    if kind == "map":
        return f"map<{_delta_type(delta_type['keyType'])},{_delta_type(delta_type['valueType'])}>"
    fields = ",".join(f"{field['name'].lower()}:{_delta_type(field['type'])}" for field in delta_type["fields"])
    return f"struct<{fields}>"


def _expected_column(sql_type: str) -> tuple[str, bool]:
    not_null = sql_type.upper().endswith(_NOT_NULL)
    return _normalise(sql_type[: -len(_NOT_NULL)] if not_null else sql_type), not not_null


def _normalise(sql_type: str) -> str:
    compact = re.sub(r"\s+", "", sql_type.lower())
    return re.sub(r"[a-z_]+", lambda word: _TYPE_SYNONYMS.get(word[0], word[0]), compact)


def _render(column: tuple[str, bool]) -> str:
    sql_type, nullable = column
    return sql_type if nullable else sql_type + _NOT_NULL.lower()
