"""The asset factory: per DLQ, the split step that yields each of its actions' validated and inbox; per action, the
recycle path (outbox and recycled)."""

import html
import re
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass

from dagster import (
    AssetCheckKey,
    AssetCheckResult,
    AssetExecutionContext,
    AssetKey,
    AssetMaterialization,
    AssetSpec,
    MaterializeResult,
    MetadataValue,
    asset,
    multi_asset,
)

from quarantine_assets.config.models import DataQualityAction
from quarantine_assets.defs.data_checks import (
    outbox_check_result,
    outbox_check_spec,
    recycled_check_result,
    recycled_check_spec,
    reject_rate,
    split_check_results,
    split_check_specs,
)
from quarantine_assets.defs.keys import INBOX, OUTBOX, RECYCLED, VALIDATED, asset_key
from quarantine_assets.defs.resources import HealthThresholds, SparkResource, WarehouseResource
from quarantine_assets.engine.lake.dlq_schema import FAILED_RULES, KEY, SOURCE_TABLE
from quarantine_assets.engine.spark.metrics import record_step
from quarantine_assets.engine.spark.operator import examples_by_rule
from quarantine_assets.engine.spark.outbox import duplicate_outbox_keys, run_outbox
from quarantine_assets.engine.spark.recycled import run_recycled
from quarantine_assets.engine.spark.split import SplitReport, run_split

# The inbox materialization's examples: a few rows of the run for each of its top failed rules, each cut short.
EXAMPLE_RULES = 3
EXAMPLES_PER_RULE = 3
EXAMPLE_CHARACTERS = 200


def _common(action: DataQualityAction) -> dict:
    """One group per action: the graph frames each action's validated, inbox, outbox and recycled assets
    under the action's name, so nodes of two actions with the same roles are told apart at a glance."""
    return {"group_name": action.key, "kinds": {"spark", "delta"}}


def dlq_pool(action: DataQualityAction) -> str | None:
    """Writers of one DLQ share a concurrency pool: with a limit of 1 their runs queue instead of conflicting."""
    return f"dlq/{action.quarantine.inbox_table}" if action.quarantine is not None else None


def _split_specs(action: DataQualityAction) -> list[AssetSpec]:
    common = _common(action)
    specs = [
        AssetSpec(
            asset_key(action, VALIDATED),
            description=f"Rows of {action.name} that passed every rule, in {action.target_table}.",
            metadata={"dagster/table_name": action.target_table, "config_file": str(action.config_file)},
            **common,
        )
    ]
    if action.quarantine is not None:
        specs.append(
            AssetSpec(
                asset_key(action, INBOX),
                description=(
                    f"This action's slice of the DLQ inbox {action.quarantine.inbox_table} "
                    f"({SOURCE_TABLE} = {action.quarantine.source_table}): rows that failed a rule."
                ),
                metadata={
                    "dagster/table_name": action.quarantine.inbox_table,
                    "source_table": action.quarantine.source_table,
                },
                **common,
            )
        )
    return specs


def _split_metadata(action: DataQualityAction, report: SplitReport) -> dict:
    metadata = {
        "batches": report.batches,
        "rows_read": report.rows_read,
        "rows_validated": report.rows_validated,
        "rows_quarantined": report.rows_quarantined,
        "rows_dropped": report.rows_dropped,
        "files_set_aside": len(report.files_set_aside),
        # A float per materialization: the UI plots the reject rate over time.
        "reject_rate": round(reject_rate(report), 4),
    }
    # Every rule of the action, failed or not, and the rules the split adds (`record_parses`) where they failed.
    failures = {rule.name: 0 for rule in action.rules} | dict(report.failures_per_rule)
    metadata.update({f"failures: {name}": count for name, count in failures.items()})
    # Numbers, so the UI plots each over time: failures by error type, and records that did not parse by reason.
    metadata.update({f"errors: {kind}": count for kind, count in report.failures_by_error_type().items()})
    metadata.update({f"errors: {code}": count for code, count in report.parse_errors.items()})
    return metadata


def _reported(context: AssetExecutionContext, warnings: list[str]) -> dict:
    """Warnings about a DLQ's missing context columns go to the run's log and to the metadata."""
    for warning in warnings:
        context.log.warning(warning)
    return _warnings_metadata(warnings)


def _warnings_metadata(warnings: list[str]) -> dict:
    return {"dlq_warnings": MetadataValue.md("\n".join(f"- {w}" for w in warnings))} if warnings else {}


def _examples(session, warehouse, action: DataQualityAction, run_id: str, report: SplitReport) -> dict:
    """A few rows of this run per top failed rule, as a table: what failed, without a shell. The payload is the
    inbox's, whose sensitive columns the split already masked."""
    top = [name for name, count in report.failures_per_rule.most_common(EXAMPLE_RULES) if count]
    if not report.rows_quarantined or not top:
        return {}
    found = examples_by_rule(session, warehouse, action, run_id, top, EXAMPLES_PER_RULE)
    lines = ["| failed rule | key | failed rules | payload |", "| --- | --- | --- | --- |"]
    for rule, rows in found.items():
        for row in rows:
            failed = ", ".join(failure["name"] for failure in row[FAILED_RULES])
            lines.append(f"| {_cell(rule)} | {_cell(row[KEY])} | {_cell(failed)} | {_cell(row['payload'])} |")
    return {"examples": MetadataValue.md("\n".join(lines))} if len(lines) > 2 else {}


@contextmanager
def _recorded_beside(
    session, warehouse, action: DataQualityAction, run_id: str, step: str, *counts
) -> Iterator[Future]:
    """The step's metrics row (`record_step`), written while the block reads what else the step shows: Spark
    runs the two side by side. The future gives the backlog it recorded."""
    with ThreadPoolExecutor(max_workers=1) as beside:
        yield beside.submit(record_step, session, warehouse, action, run_id, step, *counts)


def _cell(text: str) -> str:
    """Text for one markdown table cell: short, on one line, its pipes and markup escaped."""
    text = text if len(text) <= EXAMPLE_CHARACTERS else text[:EXAMPLE_CHARACTERS] + "…"
    return html.escape(" ".join(text.split()), quote=False).replace("|", "\\|")


class SplitsFailed(Exception):
    """Several actions of one DLQ failed their split in one step: each one's error (and code), a line each."""

    def __init__(self, errors: list[BaseException]):
        super().__init__("\n".join(f"{type(error).__name__}: {error}" for error in errors))


@dataclass(frozen=True)
class _Split:
    """What one action's split shows: its materializations and check results, and the warnings for the run's log."""

    events: list[MaterializeResult | AssetCheckResult]
    warnings: list[str]


def _split(session, warehouse, action: DataQualityAction, run_id: str, thresholds: HealthThresholds) -> _Split:
    report = run_split(session, action, warehouse, run_id)
    metadata = _split_metadata(action, report) | _warnings_metadata(report.warnings)
    validated = MaterializeResult(
        asset_key=asset_key(action, VALIDATED),
        metadata=metadata | {"path": MetadataValue.path(str(warehouse.path(action.target_table)))},
    )
    if action.quarantine is None:
        return _Split([validated], report.warnings)
    rows = {
        "read": report.rows_read,
        "validated": report.rows_validated,
        "quarantined": report.rows_quarantined,
        "dropped": report.rows_dropped,
        "files_set_aside": len(report.files_set_aside),
    }
    failures = (report.failures_per_rule, report.failures_by_reason())
    with _recorded_beside(session, warehouse, action, run_id, "split", rows, *failures) as recorded:
        examples = _examples(session, warehouse, action, run_id, report)
        backlog = recorded.result()
    inbox = MaterializeResult(
        asset_key=asset_key(action, INBOX),
        metadata=metadata | examples | {"path": MetadataValue.path(str(warehouse.path(action.quarantine.inbox_table)))},
    )
    checks = split_check_results(action, report, backlog.oldest_quarantined_age, thresholds)
    return _Split([validated, inbox, *checks], report.warnings)


def split_asset(actions: list[DataQualityAction]):
    """One step splits the actions of one DLQ (`split_groups`), side by side: each split mostly waits on Spark,
    so two of them overlap, and the DLQ's pool would queue them one after the other as steps of their own.

    A selection of some of the actions splits those; one that holds one of an action's two assets still splits
    the action, which writes both, and records the other's materialization all the same."""
    first = actions[0]
    names = ", ".join(action.name for action in actions)
    description = (
        first.description
        if len(actions) == 1 and first.description
        else f"Split {names}: validated rows and quarantined rows, one scan each."
    )

    @multi_asset(
        name=f"{first.key}_split" if len(actions) == 1 else f"{_dlq_name(first)}_split",
        specs=[spec for action in actions for spec in _split_specs(action)],
        check_specs=[spec for action in actions for spec in split_check_specs(action)],
        description=description,
        pool=dlq_pool(first),
        can_subset=len(actions) > 1,
    )
    def split(
        context: AssetExecutionContext,
        spark: SparkResource,
        warehouse: WarehouseResource,
        thresholds: HealthThresholds,
    ) -> Iterator[MaterializeResult | AssetCheckResult | AssetMaterialization]:
        selected = context.selected_asset_keys | context.selected_asset_check_keys
        chosen = [action for action in actions if _split_keys(action) & selected]
        if not chosen:
            return
        sessions = spark.spark_sessions(warehouse.warehouse, len(chosen))
        run_id = context.run.run_id
        with ThreadPoolExecutor(max_workers=len(chosen)) as side_by_side:
            running = [
                side_by_side.submit(_split, session, warehouse.warehouse, action, run_id, thresholds)
                for session, action in zip(sessions, chosen)
            ]
            try:
                wait(running)
            except BaseException:  # the run was stopped: so are the streams, and with them their threads
                for session in sessions:
                    for query in session.streams.active:
                        query.stop()
                raise
        failed = [future.exception() for future in running if future.exception() is not None]
        for future in running:
            if future.exception() is None:
                for warning in future.result().warnings:
                    context.log.warning(warning)
                yield from _as_selected(context, future.result().events)
        if len(failed) == 1:
            raise failed[0]
        if failed:
            raise SplitsFailed(failed)

    return split


def split_groups(actions: list[DataQualityAction]) -> list[list[DataQualityAction]]:
    """The actions split in one step: those of one DLQ; an action without one (dqe mode) alone."""
    groups: dict[str, list[DataQualityAction]] = {}
    for action in actions:
        groups.setdefault(action.quarantine.inbox_table if action.quarantine else action.key, []).append(action)
    return list(groups.values())


def _dlq_name(action: DataQualityAction) -> str:
    return re.sub(r"\W", "_", action.quarantine.inbox_table)


def _split_keys(action: DataQualityAction) -> set[AssetKey | AssetCheckKey]:
    """The keys of the action's assets and checks that its split materializes and evaluates."""
    return {spec.key for spec in _split_specs(action)} | {spec.key for spec in split_check_specs(action)}


def _as_selected(context: AssetExecutionContext, events: list) -> Iterator:
    """The events of a split, as Dagster takes them from a step run for a selection: an asset outside it, which
    the split wrote all the same, as a materialization event; a check outside it, not at all."""
    for event in events:
        if isinstance(event, AssetCheckResult):
            if AssetCheckKey(event.asset_key, event.check_name) in context.selected_asset_check_keys:
                yield event
        elif event.asset_key in context.selected_asset_keys:
            yield event
        else:
            yield AssetMaterialization(asset_key=event.asset_key, metadata=event.metadata)


def outbox_asset(action: DataQualityAction):
    quarantine = action.quarantine

    @asset(
        key=asset_key(action, OUTBOX),
        deps=[asset_key(action, INBOX)],
        description=(
            f"Rows of {quarantine.source_table} an operator marked fixed, read from the inbox change feed "
            f"and sent once per attempt to {quarantine.outbox_table}."
        ),
        metadata={"dagster/table_name": quarantine.outbox_table, "source_table": quarantine.source_table},
        check_specs=[outbox_check_spec(action)],
        pool=dlq_pool(action),
        **_common(action),
    )
    def outbox(context: AssetExecutionContext, spark: SparkResource, warehouse: WarehouseResource):
        session = spark.spark_session(warehouse.warehouse)
        report = run_outbox(session, action, warehouse.warehouse, context.run.run_id)
        sent = {"sent": report.rows_sent}
        with _recorded_beside(session, warehouse.warehouse, action, context.run.run_id, "outbox", sent) as recorded:
            duplicates = duplicate_outbox_keys(session, warehouse.warehouse, action)
            recorded.result()
        return MaterializeResult(
            metadata={
                "batches": report.batches,
                "rows_sent": report.rows_sent,
                "path": MetadataValue.path(str(warehouse.warehouse.path(quarantine.outbox_table))),
            }
            | _reported(context, report.warnings),
            check_results=[outbox_check_result(action, duplicates)],
        )

    return outbox


def recycled_asset(action: DataQualityAction):
    @asset(
        key=asset_key(action, RECYCLED),
        deps=[asset_key(action, OUTBOX)],
        description=(
            f"Outbox rows turned back into {action.target_table}'s columns and re-validated: passing rows are "
            "appended to the validated table once, failing rows go back to the inbox with attempt + 1."
        ),
        metadata={
            "dagster/table_name": action.target_table,
            "max_attempts": action.quarantine.max_attempts,
            # Dagster cannot draw an edge back to the validated asset, which the split materializes.
            "lands_in": MetadataValue.text(asset_key(action, VALIDATED).to_user_string()),
        },
        check_specs=[recycled_check_spec(action)],
        pool=dlq_pool(action),
        **_common(action),
    )
    def recycled(context: AssetExecutionContext, spark: SparkResource, warehouse: WarehouseResource):
        session = spark.spark_session(warehouse.warehouse)
        report = run_recycled(session, action, warehouse.warehouse, context.run.run_id)
        outcomes = {
            "landed": report.rows_landed,
            "requarantined": report.rows_requarantined,
            "exhausted": report.rows_exhausted,
            "already_landed": report.rows_already_landed,
        }
        record_step(session, warehouse.warehouse, action, context.run.run_id, "recycled", outcomes)
        return MaterializeResult(
            metadata={
                "batches": report.batches,
                "rows_landed": report.rows_landed,
                "rows_requarantined": report.rows_requarantined,
                "rows_exhausted": report.rows_exhausted,
                "rows_already_landed": report.rows_already_landed,
            }
            | _reported(context, report.warnings),
            check_results=[recycled_check_result(action, report)],
        )

    return recycled
