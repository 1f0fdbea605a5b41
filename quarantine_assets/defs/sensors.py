"""Sensors: one per quarantine action, watching its inbox slice through dagster-deltalake, never a JVM."""

import os

from dagster import (
    AssetSelection,
    DefaultSensorStatus,
    RunRequest,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)
from deltalake.exceptions import TableNotFoundError

from quarantine_assets.config.models import DataQualityAction
from quarantine_assets.defs.keys import OUTBOX, RECYCLED, asset_key
from quarantine_assets.defs.resources import WarehouseResource
from quarantine_assets.engine.lake.inbox_feed import fixed_since

# Dagster's daemon evaluates sensors on a 5 s loop and skips a sensor whose last tick is younger than its
# minimum interval. A 5 s interval is never quite reached by the next loop, so the sensor would tick every
# other loop (10 s); at 1 s it ticks on every loop, 0-5 s after an operator's fix.
TICK_SECONDS = 1


def sensor_default_status() -> DefaultSensorStatus:
    """`QUARANTINE_SENSORS=running` starts the recycle and alert sensors with the daemon, as the demo does."""
    running = os.environ.get("QUARANTINE_SENSORS", "").lower() == "running"
    return DefaultSensorStatus.RUNNING if running else DefaultSensorStatus.STOPPED


def recycle_sensor(action: DataQualityAction) -> SensorDefinition:
    quarantine = action.quarantine

    @sensor(
        name=f"{action.key}_recycle_sensor",
        asset_selection=AssetSelection.assets(asset_key(action, OUTBOX), asset_key(action, RECYCLED)),
        minimum_interval_seconds=TICK_SECONDS,
        default_status=sensor_default_status(),
        description=f"Requests the recycle of {quarantine.source_table} when an operator marks rows fixed.",
    )
    def recycle(context: SensorEvaluationContext, warehouse: WarehouseResource):
        inbox = warehouse.table(quarantine.inbox_table)
        try:
            loaded = inbox.load()
        except TableNotFoundError:
            return SkipReason(f"inbox {quarantine.inbox_table} does not exist yet at {inbox.url}")
        after = int(context.cursor) if context.cursor else -1
        feed = fixed_since(loaded, quarantine.source_table, after)
        if feed.latest_version <= after:
            return SkipReason(f"no commit on {quarantine.inbox_table} after version {after}")
        if not feed.rows_fixed:
            return SensorResult(
                skip_reason=f"no row of {quarantine.source_table} fixed in versions {after + 1}..{feed.latest_version}",
                cursor=str(feed.latest_version),
            )
        return SensorResult(
            run_requests=[
                RunRequest(
                    # Stable per inbox version: a re-evaluated tick never requests the same recycle twice.
                    run_key=f"{action.key}-fixed-through-v{feed.latest_version}",
                    tags={
                        "quarantine/source_table": quarantine.source_table,
                        "quarantine/rows_fixed": str(feed.rows_fixed),
                    },
                )
            ],
            cursor=str(feed.latest_version),
        )

    return recycle
