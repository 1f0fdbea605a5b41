"""Alerts: a sensor per DLQ that posts what is new to a webhook, once each, and a run-failure sensor.

The message is JSON (`{"kind", "dlq_table", "source_table", "reason", "rows", "message"}`), or Slack's
incoming-webhook body (`{"text": ...}`); the webhook is the `alert_webhook` resource.
"""

from __future__ import annotations

from dagster import (
    RunFailureSensorContext,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    run_failure_sensor,
    sensor,
)
from deltalake.exceptions import TableNotFoundError

from quarantine_assets.config.models import DataQualityAction, files_table, metrics_table
from quarantine_assets.defs.resources import WEBHOOK_VARIABLE, AlertWebhook, HealthThresholds, WarehouseResource
from quarantine_assets.defs.sensors import TICK_SECONDS, sensor_default_status
from quarantine_assets.engine.lake.alerts import (
    Alert,
    AlertCursor,
    backlog_alerts,
    file_alerts,
    first_cursor,
    inbox_alerts,
)

RUN_FAILURE_SENSOR = "dlq_run_failure_alerts"


def alert_sensor(dlq_table: str, actions: list[DataQualityAction]) -> SensorDefinition:
    """Notices, once each: a reason never seen before for a source, rows reaching `exhausted`, a source file set
    aside whole, and a source whose oldest quarantined row is older than `oldest_quarantined_warn_hours` (as its
    latest metrics row says)."""
    sources = sorted(action.quarantine.source_table for action in actions)

    @sensor(
        name=f"{dlq_table.replace('.', '_')}_alerts",
        minimum_interval_seconds=TICK_SECONDS,
        default_status=sensor_default_status(),
        description=f"Posts to the alert webhook what is new in {dlq_table}: reasons, exhausted rows, files set aside, "
        "stale backlogs.",
    )
    def alerts(
        context: SensorEvaluationContext,
        warehouse: WarehouseResource,
        alert_webhook: AlertWebhook,
        thresholds: HealthThresholds,
    ):
        if not alert_webhook.url:
            return SkipReason(f"no alert webhook: set {WEBHOOK_VARIABLE}, or the alert_webhook resource's url")
        try:
            inbox = warehouse.table(dlq_table).load()
        except TableNotFoundError:
            return SkipReason(f"inbox {dlq_table} does not exist yet")
        try:
            metrics = warehouse.table(metrics_table(dlq_table)).load()
        except TableNotFoundError:
            metrics = None
        cursor = AlertCursor.model_validate_json(context.cursor) if context.cursor else first_cursor(inbox, metrics)
        found, cursor = inbox_alerts(inbox, dlq_table, cursor)
        try:
            files = warehouse.table(files_table(dlq_table)).load()
        except TableNotFoundError:
            files = None
        set_aside, cursor = file_alerts(files, dlq_table, cursor)
        found += set_aside
        if metrics is not None:
            limit = thresholds.oldest_quarantined_warn_hours * 3600
            stale, cursor = backlog_alerts(metrics, dlq_table, {source: limit for source in sources}, cursor)
            found += stale
        # Posted before the cursor moves: a tick that fails to post is tried again, never lost.
        alert_webhook.post(found)
        return SensorResult(
            skip_reason=None if found else f"nothing new in {dlq_table} up to version {cursor.version}",
            cursor=cursor.model_dump_json(),
        )

    return alerts


def run_failure_alerts() -> SensorDefinition:
    """A failed run, with its error: a blocking check that failed, a batch over its reject limit, a coded error."""

    @run_failure_sensor(
        name=RUN_FAILURE_SENSOR,
        default_status=sensor_default_status(),
        description="Posts each failed run, with its error, to the alert webhook.",
    )
    def failed(context: RunFailureSensorContext, alert_webhook: AlertWebhook):
        if not alert_webhook.url:
            return
        steps = [event.event_specific_data.error for event in context.get_step_failure_events()]
        errors = [_cause(error) for error in steps if error is not None] or [context.failure_event.message]
        message = f"run {context.dagster_run.run_id} of {context.dagster_run.job_name} failed: {' | '.join(errors)}"
        alert_webhook.post([Alert("run_failure", "", "", message, 0, context.dagster_run.job_name)])

    return failed


def _cause(error) -> str:
    """The error a step raised (a serialized error and its causes), under Dagster's wrappers: a coded one says its
    code."""
    while error.cause is not None:
        error = error.cause
    return error.message.strip()
