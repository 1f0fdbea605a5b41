"""Asset checks on each action's DLQ inbox and outbox, read from the Delta log: no check starts a JVM."""

# No `from __future__ import annotations`: Dagster reads the check functions' annotations at runtime.

import time
from collections.abc import Callable, Iterator

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetKey,
    multi_asset_check,
)

from quarantine_assets.config.models import DataQualityAction
from quarantine_assets.defs.keys import INBOX, OUTBOX, asset_key
from quarantine_assets.defs.resources import WarehouseResource
from quarantine_assets.engine.lake.dlq_schema import CLUSTERING_COLUMN
from quarantine_assets.engine.lake.ownership import SINGLE_SOURCE_OWNER, source_owner
from quarantine_assets.engine.lake.table_health import (
    CHANGE_DATA_FEED,
    DELETION_VECTORS,
    INBOX_ROLE,
    LAYOUT,
    OUTBOX_EXISTS,
    OUTBOX_ROLE,
    ROW_TRACKING,
    SCHEMA,
    DlqRole,
    Finding,
    checks_for,
    outbox_exists,
    run_check,
)
from quarantine_assets.engine.lake.tables import Warehouse

Evaluate = Callable[[Warehouse], Finding]

_DESCRIPTIONS = {
    CHANGE_DATA_FEED: "Change data feed is on: the outbox finds fixed rows in the inbox change feed.",
    ROW_TRACKING: "Row tracking is on, as Lakehouse Plumber's DDL requires.",
    DELETION_VECTORS: "Deletion vectors are on, so MERGEs of actions sharing the DLQ do not conflict.",
    LAYOUT: f"Clustered or partitioned by {CLUSTERING_COLUMN}, so each source's rows sit in their own files.",
    SCHEMA: "Every reference column with its type and nullability (ERROR); every context column (WARN).",
    OUTBOX_EXISTS: "The outbox, `<dlq_table>_outbox`, exists.",
    SINGLE_SOURCE_OWNER: "No other action, in any code location or deployment, wrote rows for this source_table.",
}


def dlq_table_checks(action: DataQualityAction) -> list[AssetChecksDefinition]:
    """Property, layout and schema checks on the inbox and outbox assets of a quarantine action."""
    if action.quarantine is None:
        return []
    inbox_table, outbox_table = action.quarantine.inbox_table, action.quarantine.outbox_table
    inbox_checks = _table_checks(inbox_table, INBOX_ROLE)
    inbox_checks[OUTBOX_EXISTS] = lambda warehouse: outbox_exists(warehouse, inbox_table)
    return [
        _checks(f"{action.key}_inbox_checks", asset_key(action, INBOX), inbox_checks),
        _checks(f"{action.key}_outbox_checks", asset_key(action, OUTBOX), _table_checks(outbox_table, OUTBOX_ROLE)),
    ]


def source_owner_check(action: DataQualityAction) -> AssetChecksDefinition:
    """Fails when an owner other than this action wrote rows for its source_table.

    Apart from the table checks because it reads the inbox change feed, whose cost grows with
    the table's history.
    """
    return _checks(
        f"{action.key}_source_owner_check",
        asset_key(action, INBOX),
        {SINGLE_SOURCE_OWNER: lambda warehouse: source_owner(warehouse, action)},
    )


def _table_checks(table: str, role: DlqRole) -> dict[str, Evaluate]:
    def evaluate(check: str) -> Evaluate:
        return lambda warehouse: run_check(warehouse, table, role, check)

    return {check: evaluate(check) for check in checks_for(role)}


def _checks(name: str, key: AssetKey, evaluations: dict[str, Evaluate]) -> AssetChecksDefinition:
    specs = [
        # A badly laid out DLQ only makes writers conflict and retry; every other failure loses rows.
        AssetCheckSpec(check, asset=key, description=_DESCRIPTIONS[check], blocking=check != LAYOUT)
        for check in evaluations
    ]

    @multi_asset_check(name=name, specs=specs, can_subset=True)
    def checks(context: AssetCheckExecutionContext, warehouse: WarehouseResource) -> Iterator[AssetCheckResult]:
        for spec in specs:
            if spec.key in context.selected_asset_check_keys:
                yield _result(spec, evaluations[spec.name], warehouse.warehouse)

    return checks


def _result(spec: AssetCheckSpec, evaluate: Evaluate, warehouse: Warehouse) -> AssetCheckResult:
    started = time.perf_counter()
    finding = evaluate(warehouse)
    elapsed_ms = (time.perf_counter() - started) * 1000
    return AssetCheckResult(
        asset_key=spec.asset_key,
        check_name=spec.name,
        passed=finding.passed,
        severity=AssetCheckSeverity(finding.severity),
        description=finding.description,
        metadata=finding.metadata | {"elapsed_ms": round(elapsed_ms, 1)},
    )
