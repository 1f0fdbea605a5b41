"""Data checks evaluated inside the runs that write the data, so they cost no extra JVM or scan of the source."""

from datetime import timedelta
from typing import Optional

from dagster import AssetCheckResult, AssetCheckSeverity, AssetCheckSpec, MetadataValue

from quarantine_assets.commands import FILES_COMMAND
from quarantine_assets.config.models import DataQualityAction, FileSource
from quarantine_assets.defs.keys import INBOX, OUTBOX, RECYCLED, asset_key
from quarantine_assets.defs.resources import HealthThresholds
from quarantine_assets.engine.spark.recycled import RecycleReport
from quarantine_assets.engine.spark.split import SplitReport

ROWS_ACCOUNTED_FOR = "rows_accounted_for"
REJECT_RATE = "reject_rate"
OLDEST_QUARANTINED = "oldest_quarantined_age"
OUTBOX_KEYS_UNIQUE = "outbox_keys_unique"
RECYCLED_LANDS_ONCE = "recycled_lands_once"
SOURCE_FILES_READ = "source_files_read"
TOP_REASONS = 3


def reject_rate(report: SplitReport) -> float:
    return report.rows_quarantined / report.rows_read if report.rows_read else 0.0


def top_reasons(report: SplitReport) -> str:
    """The reasons (rules, parse codes) that rejected the most rows, most first: where an operator starts."""
    failed = sorted((-count, reason) for reason, count in report.failures_by_reason().items() if count)
    return ", ".join(f"{reason}: {-count}" for count, reason in failed[:TOP_REASONS]) or "none"


def split_check_specs(action: DataQualityAction) -> list[AssetCheckSpec]:
    if action.quarantine is None:
        return []
    inbox = asset_key(action, INBOX)
    return [
        AssetCheckSpec(
            ROWS_ACCOUNTED_FOR,
            asset=inbox,
            description="Every row the run read is in the validated table or, by key and payload, in the inbox.",
        ),
        AssetCheckSpec(
            REJECT_RATE, asset=inbox, description="Share of the run's rows quarantined, against thresholds."
        ),
        AssetCheckSpec(
            OLDEST_QUARANTINED,
            asset=inbox,
            description="Age of the oldest row still quarantined: the metric that catches a DLQ nobody reads.",
        ),
    ] + (
        [
            AssetCheckSpec(
                SOURCE_FILES_READ,
                asset=inbox,
                description="Every source file of the run could be read; those that could not are set aside whole "
                f"(`{FILES_COMMAND}`), to be redriven once fixed.",
            )
        ]
        if isinstance(action.source, FileSource)
        else []
    )


def split_check_results(
    action: DataQualityAction, report: SplitReport, oldest: Optional[timedelta], thresholds: HealthThresholds
) -> list[AssetCheckResult]:
    inbox = asset_key(action, INBOX)
    accounted = report.rows_validated + report.rows_held_in_inbox
    rate = reject_rate(report)
    severity = AssetCheckSeverity.ERROR if rate > thresholds.reject_rate_error else AssetCheckSeverity.WARN
    age_hours = oldest.total_seconds() / 3600 if oldest is not None else 0.0
    return [
        AssetCheckResult(
            asset_key=inbox,
            check_name=ROWS_ACCOUNTED_FOR,
            passed=accounted == report.rows_read,
            metadata={
                "rows_read": report.rows_read,
                "rows_validated": report.rows_validated,
                "rows_held_in_inbox": report.rows_held_in_inbox,
                "rows_missing": report.rows_read - accounted,
            },
        ),
        AssetCheckResult(
            asset_key=inbox,
            check_name=REJECT_RATE,
            passed=rate <= thresholds.reject_rate_warn,
            severity=severity,
            metadata={
                "reject_rate": round(rate, 4),
                "warn_above": thresholds.reject_rate_warn,
                "error_above": thresholds.reject_rate_error,
                "rows_read": report.rows_read,
                "rows_quarantined": report.rows_quarantined,
                "top_reasons": top_reasons(report),
            },
        ),
        AssetCheckResult(
            asset_key=inbox,
            check_name=OLDEST_QUARANTINED,
            passed=age_hours <= thresholds.oldest_quarantined_warn_hours,
            severity=AssetCheckSeverity.WARN,
            metadata={
                "oldest_quarantined_hours": round(age_hours, 3),
                "warn_above_hours": thresholds.oldest_quarantined_warn_hours,
            },
        ),
    ] + (
        [
            AssetCheckResult(
                asset_key=inbox,
                check_name=SOURCE_FILES_READ,
                passed=not report.files_set_aside,
                severity=AssetCheckSeverity.WARN,
                metadata={
                    "files_set_aside": len(report.files_set_aside),
                    "files": MetadataValue.json(report.files_set_aside),
                },
            )
        ]
        if isinstance(action.source, FileSource)
        else []
    )


def outbox_check_spec(action: DataQualityAction) -> AssetCheckSpec:
    return AssetCheckSpec(
        OUTBOX_KEYS_UNIQUE,
        asset=asset_key(action, OUTBOX),
        description="No key appears twice in the outbox for one attempt; each would recycle twice.",
    )


def outbox_check_result(action: DataQualityAction, duplicate_keys: int) -> AssetCheckResult:
    return AssetCheckResult(
        asset_key=asset_key(action, OUTBOX),
        check_name=OUTBOX_KEYS_UNIQUE,
        passed=duplicate_keys == 0,
        metadata={"duplicate_keys": duplicate_keys},
    )


def recycled_check_spec(action: DataQualityAction) -> AssetCheckSpec:
    return AssetCheckSpec(
        RECYCLED_LANDS_ONCE,
        asset=asset_key(action, RECYCLED),
        description=(
            "Every re-validated row either landed in the validated table by this run, was already landed "
            "(and was not appended again), or is back in the inbox: no key lands twice and none is lost. The "
            "run itself fails (QA-DQ-003) on a row it cannot account for; this check holds the rows it landed "
            "against what the validated table's commits wrote, by Delta's count."
        ),
    )


def recycled_check_result(action: DataQualityAction, report: RecycleReport) -> AssetCheckResult:
    return AssetCheckResult(
        asset_key=asset_key(action, RECYCLED),
        check_name=RECYCLED_LANDS_ONCE,
        passed=report.rows_appended == report.rows_landed,
        metadata={
            "rows_landed": report.rows_landed,
            "rows_appended": report.rows_appended,
            "rows_already_landed": report.rows_already_landed,
        },
    )
