"""Assembles the Definitions from the project config; nobody keeps a hand-written asset list."""

from __future__ import annotations

from pathlib import Path

from dagster import (
    AssetSelection,
    DagsterInvalidDefinitionError,
    Definitions,
    define_asset_job,
    in_process_executor,
)

from quarantine_assets.config.loader import load_project
from quarantine_assets.config.models import Project
from quarantine_assets.defs.alerts import alert_sensor, run_failure_alerts
from quarantine_assets.defs.assets import outbox_asset, recycled_asset, split_asset, split_groups
from quarantine_assets.defs.erasure_job import forget_job
from quarantine_assets.defs.file_redrive_job import redrive_file_job
from quarantine_assets.defs.operator_job import operator_job
from quarantine_assets.defs.resources import default_resources
from quarantine_assets.defs.retention_job import purge_job, purge_schedule
from quarantine_assets.defs.sensors import recycle_sensor
from quarantine_assets.defs.table_checks import dlq_table_checks, source_owner_check
from quarantine_assets.errors import QuarantineError

SPLIT_JOB = "split_all"
RECYCLE_JOB = "recycle_all"
TABLE_CHECKS_JOB = "dlq_table_checks"


def build_definitions(project: Project | None = None, resources: dict | None = None) -> Definitions:
    project = project or load_project()
    split_assets = [split_asset(actions) for actions in split_groups(project.actions)]
    quarantined = [action for action in project.actions if action.quarantine is not None]
    recycle_assets = [build(action) for action in quarantined for build in (outbox_asset, recycled_asset)]
    table_checks = [check for action in quarantined for check in dlq_table_checks(action)]
    table_checks += [source_owner_check(action) for action in quarantined]
    purge = purge_job(quarantined)
    inbox_tables = sorted({action.quarantine.inbox_table for action in quarantined})
    return Definitions(
        assets=split_assets + recycle_assets,
        asset_checks=table_checks,
        jobs=[
            define_asset_job(SPLIT_JOB, selection=AssetSelection.assets(*split_assets)),
            define_asset_job(RECYCLE_JOB, selection=AssetSelection.assets(*recycle_assets)),
            # Reads only Delta logs through delta-rs: runs in a second, without a JVM.
            define_asset_job(TABLE_CHECKS_JOB, selection=AssetSelection.checks(*table_checks)),
            operator_job(quarantined),
            forget_job(quarantined),
            redrive_file_job(quarantined),
            *([purge] if purge else []),
        ],
        schedules=[purge_schedule(purge)] if purge else [],
        sensors=[recycle_sensor(action) for action in quarantined]
        + [alert_sensor(dlq, [a for a in quarantined if a.quarantine.inbox_table == dlq]) for dlq in inbox_tables]
        + [run_failure_alerts()],
        resources=resources or default_resources(),
        # One process per run: a process per step would import Dagster and attach to Spark once per step.
        executor=in_process_executor,
    )


class CodeLocationConfigError(DagsterInvalidDefinitionError):
    """A code location whose pipeline config is invalid, with the config's codes in its message.

    Dagster wraps whatever a code location raises while loading in a generic `DagsterUserCodeLoadError`
    and shows the cause only behind "View error"; its own errors it passes on as they are, so this one
    puts the code and the message on top of the UI's load error.
    """


def load_definitions(
    config_dir: Path | None = None, env: str | None = None, warehouse_root: str | None = None
) -> Definitions:
    """The Definitions of a code location: the project's config, resources on the same warehouse."""
    try:
        project = load_project(config_dir, env, warehouse_root)
        resources = default_resources(warehouse_root)
    except QuarantineError as error:
        raise CodeLocationConfigError(str(error)) from None
    return build_definitions(project, resources)
