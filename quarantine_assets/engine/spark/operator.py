"""What an operator does to the DLQ: look, count, fix, discard. Every change is scoped to one source."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from quarantine_assets import codes
from quarantine_assets.config.models import DataQualityAction
from quarantine_assets.engine.lake.dlq_columns import DlqColumns
from quarantine_assets.engine.lake.dlq_schema import (
    ATTEMPT,
    FAILED_RULES,
    KEY,
    REASON,
    RESOLVED_AT,
    RESOLVED_BY,
    ROW_DATA,
    RUN_ID,
    SOURCE_TABLE,
    STATUS,
    TIMESTAMP,
    UPDATED_AT,
    UPDATED_BY,
)
from quarantine_assets.engine.lake.statuses import DISCARDED, FIXED, QUARANTINED
from quarantine_assets.engine.lake.tables import Warehouse
from quarantine_assets.engine.spark.claims import before_writing
from quarantine_assets.engine.spark.inbox import scoped_key_condition, scoped_source
from quarantine_assets.engine.spark.merge import merge_into, update_where, when_matched_update
from quarantine_assets.engine.spark.payload_types import sql_string
from quarantine_assets.engine.spark.validated import validated_schema
from quarantine_assets.errors import OperatorError

# Rows an operator may still change; recycled, discarded and exhausted rows are history.
OPEN_STATUSES = (QUARANTINED, FIXED)
LISTED_COLUMNS = (
    KEY,
    SOURCE_TABLE,
    STATUS,
    ATTEMPT,
    TIMESTAMP,
    FAILED_RULES,
    REASON,
)


@dataclass(frozen=True)
class RowFilter:
    source_table: str | None = None
    status: str | None = None
    rule: str | None = None
    older_than: timedelta | None = None


def inbox_rows(spark: SparkSession, warehouse: Warehouse, inbox_table: str, row_filter: RowFilter) -> DataFrame:
    rows = spark.read.format("delta").load(warehouse.path(inbox_table))
    if row_filter.source_table:
        rows = rows.where(F.col(SOURCE_TABLE) == row_filter.source_table)
    if row_filter.status:
        rows = rows.where(F.col(STATUS) == row_filter.status)
    if row_filter.rule:
        rows = rows.where(F.exists(FAILED_RULES, lambda failure: failure["name"] == row_filter.rule))
    if row_filter.older_than:
        cutoff = F.current_timestamp() - F.make_dt_interval(secs=F.lit(row_filter.older_than.total_seconds()))
        rows = rows.where(F.col(TIMESTAMP) < cutoff)
    return rows


# Spark counts a query's rows, and so its limit, in a signed 32-bit whole number.
MAX_ROWS = 2**31 - 1


def refuse_bad_limit(limit: int | None, field: str) -> None:
    if limit is not None and not 1 <= limit <= MAX_ROWS:
        raise OperatorError(
            codes.BAD_ROW_LIMIT, f"{field} must be a whole number from 1 to {MAX_ROWS}, got {limit}", field=field
        )


def listing(
    spark: SparkSession, warehouse: Warehouse, inbox_table: str, row_filter: RowFilter, limit: int
) -> DataFrame:
    """The filtered rows, oldest first, at most `limit`, with the payload as JSON text."""
    refuse_bad_limit(limit, "limit")
    rows = inbox_rows(spark, warehouse, inbox_table, row_filter)
    listed = [column for column in LISTED_COLUMNS if column in rows.columns]
    return rows.select(*listed, F.to_json(ROW_DATA).alias("payload")).orderBy(TIMESTAMP).limit(limit)


def inbox_row(spark: SparkSession, warehouse: Warehouse, inbox_table: str, key: str) -> dict[str, Any]:
    """Every column of one row, the payload as JSON text."""
    rows = inbox_rows(spark, warehouse, inbox_table, RowFilter()).where(F.col(KEY) == key)
    row = rows.withColumn(ROW_DATA, F.to_json(ROW_DATA)).first()
    if row is None:
        raise OperatorError(codes.UNKNOWN_KEY, f"no DLQ row with key {key} in {inbox_table}", field=key)
    return row.asDict()


def examples_by_rule(
    spark: SparkSession, warehouse: Warehouse, action: DataQualityAction, run_id: str, rules: list[str], each: int
) -> dict[str, list[Row]]:
    """Up to `each` rows the run `run_id` quarantined for each of `rules`: key, failed rules and payload as JSON
    text. One bounded read: it stops once it holds enough rows, never a scan of the whole inbox for its own sake."""
    inbox = spark.read.format("delta").load(warehouse.path(action.quarantine.inbox_table))
    if RUN_ID not in inbox.columns or not rules:
        return {}
    rows = (
        inbox.where((F.col(SOURCE_TABLE) == action.quarantine.source_table) & (F.col(RUN_ID) == run_id))
        .where(F.exists(FAILED_RULES, lambda failure: failure["name"].isin(rules)))
        .select(KEY, FAILED_RULES, F.to_json(ROW_DATA).alias("payload"))
        .limit(each * len(rules) * 4)
        .collect()
    )
    return {
        rule: [row for row in rows if rule in {failure["name"] for failure in row[FAILED_RULES]}][:each]
        for rule in rules
    }


@dataclass(frozen=True)
class QueueStats:
    counts: list[Row]  # one per (source, failed rule, status); a row failing two rules counts under both
    oldest_quarantined_age: timedelta | None


def queue_stats(spark: SparkSession, warehouse: Warehouse, inbox_table: str, row_filter: RowFilter) -> QueueStats:
    rows = inbox_rows(spark, warehouse, inbox_table, row_filter)
    counts = (
        rows.select(SOURCE_TABLE, STATUS, F.explode_outer(f"{FAILED_RULES}.name").alias("rule"))
        .groupBy(SOURCE_TABLE, "rule", STATUS)
        .count()
        .orderBy(SOURCE_TABLE, "rule", STATUS)
    )
    return QueueStats(counts.collect(), oldest_quarantined_age(rows))


def oldest_quarantined_age(rows: DataFrame) -> timedelta | None:
    oldest, now = rows.where(F.col(STATUS) == QUARANTINED).agg(F.min(TIMESTAMP), F.current_timestamp()).first()
    return None if oldest is None else now - oldest


def _open_payloads(spark: SparkSession, warehouse: Warehouse, action: DataQualityAction, keys: list[str]) -> dict:
    """Current payload per key, after refusing unknown keys, other sources' keys and closed rows."""
    source_table = action.quarantine.source_table
    repeated = sorted(key for key, count in Counter(keys).items() if count > 1)
    if repeated:
        raise OperatorError(
            codes.KEY_REPEATED,
            f"key(s) {repeated} are given more than once; name each row once. Nothing was written",
            field=repeated[0],
        )
    found = {
        row[KEY]: row
        for row in spark.read.format("delta")
        .load(warehouse.path(action.quarantine.inbox_table))
        .where(F.col(KEY).isin(keys))
        .select(KEY, SOURCE_TABLE, STATUS, F.to_json(ROW_DATA).alias("payload"))
        .collect()
    }
    for key in keys:
        row = found.get(key)
        if row is None:
            raise OperatorError(
                codes.UNKNOWN_KEY, f"no DLQ row with key {key} in {action.quarantine.inbox_table}", field=key
            )
        if row[SOURCE_TABLE] != source_table:
            raise OperatorError(
                codes.OTHER_SOURCES_ROW,
                f"row {key} belongs to {row[SOURCE_TABLE]}, not {source_table}; an update is scoped to one source",
                field=key,
            )
        if row[STATUS] not in OPEN_STATUSES:
            raise OperatorError(
                codes.ROW_CLOSED,
                f"row {key} is {row[STATUS]}; only {' or '.join(OPEN_STATUSES)} rows can change",
                field=key,
            )
    return {key: json.loads(found[key]["payload"]) for key in keys}


def checked_fields(fields: dict[str, Any], allowed: list[str]) -> dict[str, Any]:
    unknown = sorted(set(fields) - set(allowed))
    if unknown:
        raise OperatorError(
            codes.UNKNOWN_FIELD,
            f"unknown field(s) {unknown}; the validated table has {allowed}",
            field=",".join(unknown),
        )
    not_finite = sorted(name for name, value in fields.items() if not _finite(value))
    if not_finite:
        raise OperatorError(
            codes.NOT_A_FINITE_NUMBER,
            f"field(s) {not_finite} are set to NaN or an infinity, which a payload (JSON) cannot hold. "
            "Nothing was written",
            field=",".join(not_finite),
        )
    return fields


def _finite(value: Any) -> bool:
    """Whether `value`, and everything nested in it, is free of NaN and infinities."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(item) for item in value.values())
    if isinstance(value, list):
        return all(_finite(item) for item in value)
    return True


def fix_rows(
    spark: SparkSession,
    warehouse: Warehouse,
    action: DataQualityAction,
    keys: list[str],
    *,
    set_fields: dict[str, Any] | None = None,
    payload: dict[str, Any] | None = None,
    by: str,
) -> OperatorResult:
    """Set fields in, or replace, each row's payload and mark it fixed. All or nothing."""
    if (set_fields is None) == (payload is None):
        raise OperatorError(
            codes.FIX_NEEDS_ONE_CHANGE, "give either fields to set or a whole payload, not both or neither"
        )
    current = _open_payloads(spark, warehouse, action, keys)
    allowed = validated_schema(spark, warehouse, action).fieldNames()
    changes = checked_fields(payload if payload is not None else set_fields, allowed)
    refuse_redacted_fields_left_out(action, {name for fields in current.values() for name in fields}, changes)
    row_data = fixed_row_data(changes, whole_payload=payload is not None)
    return update_open_keys(spark, warehouse, action, keys, {ROW_DATA: row_data, **marked_fixed(by)}, by)


def fixed_row_data(changes: dict[str, Any], *, whole_payload: bool) -> str:
    """A fixed row's payload, as SQL on the row (`dlq`): `changes` as the whole payload, or the row's payload
    with the fields of `changes` set."""
    given = f"parse_json({sql_string(json.dumps(changes))})"
    if whole_payload:
        return given
    return payload_with_changes(f"dlq.{ROW_DATA}", f"variant_get({given}, '$', 'map<string, variant>')")


def marked_fixed(by: str) -> dict[str, str]:
    """The columns of a row an operator fixed, as SQL. The fixer resolves the row once it lands; a failed recycle
    clears the name again."""
    return {STATUS: f"'{FIXED}'", REASON: "CAST(NULL AS STRING)", RESOLVED_BY: sql_string(by)}


def refuse_redacted_fields_left_out(action: DataQualityAction, fields: set[str], changed: Iterable[str]) -> None:
    """The DLQ holds a sensitive column's value masked or hashed: only the operator can give it back. `fields`:
    those of the payloads to change."""
    sensitive = {name.lower() for name in action.quarantine.sensitive_columns}
    supplied = {name.lower() for name in changed}
    missing = sorted({name for name in fields if name.lower() in sensitive - supplied})
    if missing:
        raise OperatorError(
            codes.SENSITIVE_FIELDS_NOT_SUPPLIED,
            f"{action.quarantine.source_table} redacts {missing} in its DLQ rows, so their values are gone: "
            f"give each one in the fix (--set {missing[0]}=<value>, or null), or the row would land without it",
            field="--set",
        )


def discard_rows(
    spark: SparkSession, warehouse: Warehouse, action: DataQualityAction, keys: list[str], *, reason: str, by: str
) -> OperatorResult:
    if not reason.strip():
        raise OperatorError(codes.DISCARD_NEEDS_REASON, "a discard needs a reason")
    _open_payloads(spark, warehouse, action, keys)
    closed = {
        STATUS: f"'{DISCARDED}'",
        REASON: sql_string(reason),
        RESOLVED_AT: "current_timestamp()",
        RESOLVED_BY: sql_string(by),
    }
    return update_open_keys(spark, warehouse, action, keys, closed, by)


@dataclass(frozen=True)
class OperatorResult:
    rows_changed: int  # by the commit: a row closed by a racing writer since the checks is not counted
    warnings: list[str]  # what this DLQ loses without its missing context columns


def payload_with_changes(payload: str, changes: str) -> str:
    """SQL for the `payload` (a variant object) with the fields of `changes` (a map of variants) set. Every other
    field keeps its variant value as it is, since a trip through JSON would turn binary into text and -0.0 into 0."""
    return (
        f"to_variant_object(map_concat(map_filter(variant_get({payload}, '$', 'map<string, variant>'), "
        f"(name, value) -> NOT array_contains(map_keys({changes}), name)), {changes}))"
    )


def update_open_rows(
    spark: SparkSession,
    warehouse: Warehouse,
    action: DataQualityAction,
    updates: DataFrame,
    by: str,
    computed: dict[str, str] | None = None,
    also: str | None = None,
) -> OperatorResult:
    """Each key's row takes the values of `updates`' columns that the inbox has, and of `computed` (SQL on the
    row, `dlq`, and its update, `new`). Scoped to the source and to open rows meeting `also` (SQL on the same),
    and retried on commit conflicts, so a running split never fails. SQL, not Delta's Python API, so that it
    runs the same on a Spark Connect server."""
    columns = before_writing(spark, warehouse, action, by=by)
    new = updates.withColumns({UPDATED_AT: F.current_timestamp(), UPDATED_BY: F.lit(by)})
    assignments = columns.inbox_values({name: f"new.{name}" for name in new.columns if name != KEY})
    assignments |= columns.inbox_values(computed or {})
    metrics = merge_into(
        warehouse.path(action.quarantine.inbox_table),
        new,
        scoped_key_condition("dlq", "new", action.quarantine.source_table),
        [when_matched_update(_still_open(also), assignments)],
    )
    return OperatorResult(metrics["num_updated_rows"], _warnings(columns, action))


def update_open_keys(
    spark: SparkSession,
    warehouse: Warehouse,
    action: DataQualityAction,
    keys: list[str],
    values: dict[str, str],
    by: str,
) -> OperatorResult:
    """Each key's row takes `values` (SQL on the row, `dlq`), scoped to the source and to open rows, retried on
    commit conflicts. The same values for every key make it an UPDATE, which spares Delta the MERGE's source to
    materialize and join: about a second of a one-row fix."""
    columns = before_writing(spark, warehouse, action, by=by)
    assignments = columns.inbox_values(values | {UPDATED_AT: "current_timestamp()", UPDATED_BY: sql_string(by)})
    named = ", ".join(sql_string(key) for key in keys)
    metrics = update_where(
        spark,
        warehouse.path(action.quarantine.inbox_table),
        assignments,
        f"{scoped_source('dlq', action.quarantine.source_table)} AND dlq.{KEY} IN ({named}) AND {_still_open()}",
    )
    return OperatorResult(metrics["num_affected_rows"], _warnings(columns, action))


def _still_open(also: str | None = None) -> str:
    """The row is open when the commit reads it, and meets `also` (SQL on the row, `dlq`, and its update, `new`)."""
    statuses = ", ".join(f"'{status}'" for status in OPEN_STATUSES)
    return f"dlq.{STATUS} IN ({statuses})" + (f" AND ({also})" if also else "")


def _warnings(columns: DlqColumns, action: DataQualityAction) -> list[str]:
    return columns.warnings(action.quarantine.inbox_table, action.quarantine.outbox_table)


def action_for_source(actions: list[DataQualityAction], source_table: str) -> DataQualityAction:
    for action in actions:
        if action.quarantine is not None and action.quarantine.source_table == source_table:
            return action
    known = sorted(a.quarantine.source_table for a in actions if a.quarantine is not None)
    raise OperatorError(codes.UNKNOWN_SOURCE, f"no quarantine action owns source table {source_table}; known: {known}")


def parse_json_object(text: str, field: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise OperatorError(codes.NOT_A_JSON_OBJECT, f"{field} is not valid JSON: {error}", field=field) from None
    if not isinstance(value, dict):
        raise OperatorError(
            codes.NOT_A_JSON_OBJECT, f"{field} must be a JSON object, got {type(value).__name__}", field=field
        )
    return value
