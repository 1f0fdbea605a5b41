"""Retention as a Dagster job and a daily schedule: one op per action that sets `quarantine.retention_days`."""

from datetime import timedelta

from dagster import (
    AssetObservation,
    Config,
    DefaultScheduleStatus,
    JobDefinition,
    MetadataValue,
    OpDefinition,
    OpExecutionContext,
    ScheduleDefinition,
    job,
    op,
)

from quarantine_assets.config.models import DataQualityAction
from quarantine_assets.defs.assets import dlq_pool
from quarantine_assets.defs.erasure_job import file_removal_metadata
from quarantine_assets.defs.keys import INBOX, asset_key
from quarantine_assets.defs.resources import SparkResource, WarehouseResource
from quarantine_assets.engine.spark.metrics import record_step
from quarantine_assets.engine.spark.retention import PurgeReport, purge_resolved

PURGE_JOB = "dlq_purge"
PURGE_SCHEDULE = "dlq_purge_daily"


class PurgeConfig(Config):
    """`dry_run`: count what would be deleted, delete nothing. `physically`: also remove the deleted rows from
    the inbox's files, once no stream still reads them (time travel to before then fails)."""

    dry_run: bool = False
    physically: bool = False


def purge_metadata(report: PurgeReport) -> dict:
    files = report.files
    return {
        "rows_purged": report.rows,
        "rows_purged_by_status": MetadataValue.json(report.rows_by_status),
        "file_records_purged": report.file_records,
        "resolved_before": MetadataValue.timestamp(report.cutoff),
        "dry_run": report.dry_run,
    } | (file_removal_metadata(files.files_removed, files.files_pending) if files else {})


def _purge_op(action: DataQualityAction) -> OpDefinition:
    retention = timedelta(days=action.quarantine.retention_days)

    @op(
        name=f"{action.key}_purge",
        pool=dlq_pool(action),
        description=f"Deletes rows of {action.quarantine.source_table} resolved over {retention.days} days ago.",
    )
    def purge(
        context: OpExecutionContext, config: PurgeConfig, spark: SparkResource, warehouse: WarehouseResource
    ) -> None:
        session = spark.spark_session(warehouse.warehouse)
        report = purge_resolved(
            session,
            warehouse.warehouse,
            action,
            retention,
            dry_run=config.dry_run,
            by=f"dagster-run:{context.run_id}",
            physically=config.physically,
        )
        if not report.dry_run:
            purged = {f"purged_{status}": count for status, count in report.rows_by_status.items()}
            record_step(session, warehouse.warehouse, action, context.run_id, "purge", {"purged": report.rows} | purged)
        for warning in report.warnings:
            context.log.warning(warning)
        # An observation, not a materialization: the split alone writes the inbox's rows.
        context.log_event(AssetObservation(asset_key=asset_key(action, INBOX), metadata=purge_metadata(report)))
        verb = "would delete" if report.dry_run else "deleted"
        context.log.info(f"{verb} {report.rows} resolved row(s) of {action.quarantine.source_table}")

    return purge


def purge_job(actions: list[DataQualityAction]) -> JobDefinition | None:
    """None when no action keeps its resolved rows for a limited time."""
    retained = [action for action in actions if action.quarantine.retention_days is not None]
    if not retained:
        return None
    ops = [_purge_op(action) for action in retained]

    @job(name=PURGE_JOB, description="Deletes resolved DLQ rows older than each action's retention_days.")
    def dlq_purge():
        for purge in ops:
            purge()

    return dlq_purge


def purge_schedule(purge: JobDefinition) -> ScheduleDefinition:
    # Running from the start: setting retention_days is the decision to purge.
    return ScheduleDefinition(
        name=PURGE_SCHEDULE,
        job=purge,
        cron_schedule="0 3 * * *",
        default_status=DefaultScheduleStatus.RUNNING,
        description="Every day at 03:00: the dlq_purge job.",
    )
