"""A fix of many rows at once: a Spark SQL predicate selects them, SQL expressions give their new values, and a
dry run tells, before anything is written, how many would land and which rules the others would fail again.

The predicate and the expressions read the payload's fields, typed as the validated table's columns (as the
recycled stream types them), and the row's `_dlq_` columns, such as `_dlq_failed_rules.name`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, NullType, NumericType, StructType

from quarantine_assets import codes
from quarantine_assets.config.models import DataQualityAction
from quarantine_assets.engine.lake.dlq_schema import (
    COLUMN_PREFIX,
    FAILED_RULES,
    KEY,
    RUN_ID,
    SOURCE_TABLE,
    STATUS,
    TIMESTAMP,
    UPDATED_AT,
)
from quarantine_assets.engine.lake.statuses import QUARANTINED
from quarantine_assets.engine.lake.tables import Warehouse
from quarantine_assets.engine.spark.inbox import quote
from quarantine_assets.engine.spark.operator import (
    OperatorResult,
    checked_fields,
    fix_rows,
    marked_fixed,
    payload_with_changes,
    refuse_bad_limit,
    refuse_redacted_fields_left_out,
    update_open_rows,
)
from quarantine_assets.engine.spark.payload_types import PAYLOAD, sql_string, typed_columns
from quarantine_assets.engine.spark.recycled import judged_payloads
from quarantine_assets.engine.spark.validated import payload_schema
from quarantine_assets.engine.spark.verdict import judged_once
from quarantine_assets.errors import OperatorError

EXAMPLES = 5
_CHANGES = "_changes"
_READ_UPDATED_AT = "_read_updated_at"  # the row's `_dlq_updated_at` when it was selected


@dataclass(frozen=True)
class Selection:
    """The rows of one source whose payload fields and `_dlq_` columns meet `where`; the `limit` oldest of them."""

    where: str
    limit: int | None = None


@dataclass(frozen=True)
class FieldChanges:
    expressions: dict[str, str] = field(default_factory=dict)  # field: Spark SQL over the same as `where`
    values: dict[str, Any] = field(default_factory=dict)  # field: a value, as JSON gives it

    @property
    def fields(self) -> list[str]:
        return [*self.expressions, *self.values]


@dataclass(frozen=True)
class DryRun:
    """What a fix would do, judged by the rules in force as the recycled stream will judge the fixed rows."""

    rows_matched: int  # by `where`
    rows_to_fix: int  # of those, within `limit`
    rows_landing: int
    rows_failing_again: int  # back to the inbox, or exhausted at the attempt cap
    failures_per_rule: dict[str, int]
    examples: list[dict[str, Any]]  # a few rows that would fail again: their key and failed rules


def field_expressions(items: Iterable[str]) -> dict[str, str]:
    """`field = <SQL>` items as a mapping; refuses one without `=` or that names a field twice."""
    expressions: dict[str, str] = {}
    for item in items:
        name, sep, expression = item.partition("=")
        name, expression = name.strip().strip("`"), expression.strip()
        if not sep or not name or not expression:
            raise OperatorError(
                codes.BAD_FIELD_ASSIGNMENT, f"--set-expr takes field = <SQL>, got {item!r}", field="--set-expr"
            )
        if name in expressions:
            raise OperatorError(codes.BAD_FIELD_ASSIGNMENT, f"--set-expr sets {name} twice", field="--set-expr")
        expressions[name] = expression
    return expressions


def required(changes: FieldChanges) -> FieldChanges:
    """A fix sets fields; a selection sent back with its payload as it is, is a redrive."""
    if not changes.fields:
        raise OperatorError(codes.FIX_NEEDS_ONE_CHANGE, "give fields to set (--set or --set-expr)")
    return changes


def redrive_selection(
    rule: str | None = None,
    run_id: str | None = None,
    since: datetime | None = None,
    where: str | None = None,
    limit: int | None = None,
) -> Selection:
    """The quarantined rows that failed `rule`, were quarantined by the run `run_id`, since `since`, and meet
    `where`: sent back through the recycle path as they are (`fix_where` with no change), to be judged by the
    rules configured now."""
    conditions = [f"{STATUS} = '{QUARANTINED}'"]
    if rule is not None:
        conditions.append(f"array_contains({FAILED_RULES}.name, {sql_string(rule)})")
    if run_id is not None:
        conditions.append(f"{RUN_ID} = {sql_string(run_id)}")
    if since is not None:
        conditions.append(f"{TIMESTAMP} >= TIMESTAMP {sql_string(since.isoformat(sep=' '))}")
    if where is not None:
        conditions.append(f"({where})")
    return Selection(" AND ".join(conditions), limit)


def fix_where(
    spark: SparkSession,
    warehouse: Warehouse,
    action: DataQualityAction,
    selection: Selection,
    changes: FieldChanges,
    *,
    by: str,
) -> OperatorResult:
    """Sets the fields of every selected row (none, for a redrive) and marks it fixed, in one commit; all or
    nothing.

    The selection is read again by the MERGE, so it changes the rows as they are when it commits; a row that
    another writer changed since (its `_dlq_updated_at` moved) or that is no longer quarantined is left as it is,
    and the result counts only the rows changed."""
    fields = payload_schema(spark, warehouse, action)
    _, chosen, new_values = _checked(spark, warehouse, action, selection, changes, fields)
    read = [F.col(UPDATED_AT).alias(_READ_UPDATED_AT)] if UPDATED_AT in chosen.columns else []
    fixed = {name: F.expr(value) for name, value in marked_fixed(by).items()}
    updates = chosen.select(KEY, new_values.alias(_CHANGES), *read).withColumns(fixed)
    unchanged = f"dlq.{STATUS} = '{QUARANTINED}'" + (
        f" AND dlq.{UPDATED_AT} <=> new.{_READ_UPDATED_AT}" if read else ""
    )
    computed = {PAYLOAD: payload_with_changes(f"dlq.{PAYLOAD}", f"new.{_CHANGES}")}
    return update_open_rows(spark, warehouse, action, updates, by, computed, also=unchanged)


def dry_run_fix(
    spark: SparkSession, warehouse: Warehouse, action: DataQualityAction, selection: Selection, changes: FieldChanges
) -> DryRun:
    """The checks and counts of `fix_where`, with nothing written."""
    fields = payload_schema(spark, warehouse, action)
    matched, chosen, new_values = _checked(spark, warehouse, action, selection, changes, fields)
    fixed = chosen.select(KEY, PAYLOAD, new_values.alias(_CHANGES)).select(
        KEY, F.expr(payload_with_changes(PAYLOAD, _CHANGES)).alias(PAYLOAD)
    )
    judged = judged_payloads(fixed, action, fields, KEY).select(KEY, F.col(f"{FAILED_RULES}.name").alias("rules"))
    fails = F.size("rules") > 0
    # One verdict for the counts and the examples, also under rules that read the clock.
    with judged_once(judged) as once:
        total, failing = once.agg(F.count(F.lit(1)), F.count_if(fails)).first()
        per_rule = once.select(F.explode("rules").alias("rule")).groupBy("rule").count().collect()
        examples = once.where(fails).orderBy(KEY).limit(EXAMPLES).collect()
    return DryRun(
        rows_matched=matched.count(),
        rows_to_fix=total,
        rows_landing=total - failing,
        rows_failing_again=failing,
        failures_per_rule={row["rule"]: row["count"] for row in sorted(per_rule, key=lambda row: -row["count"])},
        examples=[{"key": row[KEY], "failed_rules": list(row["rules"])} for row in examples],
    )


def _checked(
    spark: SparkSession,
    warehouse: Warehouse,
    action: DataQualityAction,
    selection: Selection,
    changes: FieldChanges,
    fields: StructType,
) -> tuple[DataFrame, DataFrame, Column]:
    """The rows the predicate matches, those to fix (oldest first) and their new values as a map of variants,
    once every check passed: fields that exist and are supplied where redacted, a predicate over quarantined
    rows only, and values that fit their fields' types on every row to fix."""
    both = sorted(set(changes.expressions) & set(changes.values))
    if both:
        raise OperatorError(codes.BAD_FIELD_ASSIGNMENT, f"{both} are given by --set and by --set-expr", field=both[0])
    checked_fields({name: None for name in changes.expressions} | changes.values, fields.fieldNames())
    refuse_redacted_fields_left_out(action, set(fields.fieldNames()), changes.fields)
    matched = _matched(spark, warehouse, action, selection, fields)
    values = {
        name: _typed_value(matched, name, sql, fields[name].dataType) for name, sql in changes.expressions.items()
    }
    _refuse_closed_rows(matched, selection)
    chosen = matched.orderBy(TIMESTAMP, KEY)
    chosen = chosen.limit(selection.limit) if selection.limit is not None else chosen
    _refuse_values_that_do_not_fit(chosen, values, changes)
    entries = [part for name, (value, _) in values.items() for part in (F.lit(name), value.cast("variant"))]
    literal = F.variant_get(F.parse_json(F.lit(json.dumps(changes.values))), "$", "map<string, variant>")
    return matched, chosen, F.map_concat(literal, F.create_map(*entries).cast("map<string, variant>"))


def _matched(
    spark: SparkSession, warehouse: Warehouse, action: DataQualityAction, selection: Selection, fields: StructType
) -> DataFrame:
    """The source's inbox rows, every status, that meet the predicate, with their payload `fields` as columns."""
    inbox = spark.read.format("delta").load(warehouse.path(action.quarantine.inbox_table))
    rows = inbox.where(F.col(SOURCE_TABLE) == action.quarantine.source_table)
    dlq_columns = [name for name in inbox.columns if name.startswith(COLUMN_PREFIX) or name == PAYLOAD]
    payload = [typed for column, typed in zip(fields, typed_columns(fields)) if column.name not in dlq_columns]
    return rows_meeting(rows.select(*[quote(name) for name in dlq_columns], *payload), selection.where)


def rows_meeting(view: DataFrame, where: str) -> DataFrame:
    """The rows of `view` that meet `where`, once it is known to be a condition over `view`'s columns."""
    predicate = _analyzed(lambda: view.select(F.expr(where)).schema[0].dataType, where, "--where")
    if not isinstance(predicate, (BooleanType, NullType)):
        raise OperatorError(
            codes.BAD_EXPRESSION,
            f"--where {where!r} gives {predicate.simpleString()}, not true or false",
            field="--where",
        )
    return view.where(F.expr(where))


def _refuse_closed_rows(matched: DataFrame, selection: Selection) -> None:
    """A fix changes quarantined rows only: a predicate that also matches others would be read one way and
    written another, so it is refused, with what it matched."""
    statuses = {row[STATUS]: row["count"] for row in matched.groupBy(STATUS).count().collect()}
    others = {status: count for status, count in statuses.items() if status != QUARANTINED}
    if others:
        found = ", ".join(f"{count} {status}" for status, count in sorted(others.items()))
        raise OperatorError(
            codes.SELECTION_NOT_QUARANTINED,
            f"--where {selection.where!r} matches rows that are not quarantined ({found}); add "
            f"`AND {STATUS} = '{QUARANTINED}'` to fix only the quarantined ones. Nothing was written",
            field="--where",
        )


def _typed_value(rows: DataFrame, name: str, sql: str, wanted) -> tuple[Column, Column | None]:
    """The expression's value in its field's type, and where a numeric value would change on the way (NULL
    where it cannot): refused unless the expression is of that type, NULL, or numeric into a numeric field."""
    given = _analyzed(lambda: rows.select(F.expr(sql)).schema[0].dataType, sql, "--set-expr")
    value = F.expr(sql)
    if given == wanted:
        return value, None
    if isinstance(given, NullType):
        return value.cast(wanted), None
    if isinstance(given, NumericType) and isinstance(wanted, NumericType):
        kept = value.try_cast(wanted)
        return kept, value.isNotNull() & ~F.coalesce(kept == value, F.lit(False))
    raise OperatorError(
        codes.EXPRESSION_DOES_NOT_FIT,
        f"--set-expr {name} = {sql!r} gives {given.simpleString()}, but {name} is {wanted.simpleString()}: "
        f"write CAST(... AS {wanted.simpleString().upper()}) if that is meant. Nothing was written",
        field=name,
    )


def _refuse_values_that_do_not_fit(
    chosen: DataFrame, values: dict[str, tuple[Column, Column | None]], changes: FieldChanges
) -> None:
    """Every new value computed once over the selected rows, before anything is written: a value that fails
    (a cast of text that is no number) or that its field cannot hold (an overflow, a fraction into an integer)."""
    if not values:
        return
    checks = [F.count(value) for value, _ in values.values()]
    checks += [F.count_if(misfit) if misfit is not None else F.lit(0) for _, misfit in values.values()]
    try:
        counted = chosen.agg(*checks).first()
    except PySparkException as error:
        raise OperatorError(
            codes.EXPRESSION_DOES_NOT_FIT,
            f"a --set-expr fails on a selected row: {_first_line(error)}. Nothing was written",
            field="--set-expr",
        ) from None
    for index, name in enumerate(values):
        misfits = counted[len(values) + index]
        if misfits:
            raise OperatorError(
                codes.EXPRESSION_DOES_NOT_FIT,
                f"--set-expr {name} = {changes.expressions[name]!r} gives {misfits} selected row(s) a value that "
                f"{name}'s type cannot hold as it is (out of range, or a fraction cut off). Nothing was written",
                field=name,
            )


def _analyzed(analyze, sql: str, option: str):
    try:
        return analyze()
    except PySparkException as error:
        raise OperatorError(
            codes.BAD_EXPRESSION,
            f"{option} {sql!r}: {_first_line(error)}. Nothing was written",
            field=option,
        ) from None


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0][:300]


@dataclass(frozen=True)
class FixCommand:
    """What an operator asks of rows of one source, from the CLI or the operator job: fix them (fields, SQL
    expressions or a whole payload) or redrive them (`redrive`, with `rule`, `run_id` and `since`), named by
    `keys` or selected by `where` (the `limit` oldest); `dry_run` counts and writes nothing."""

    keys: tuple[str, ...] = ()
    where: str | None = None
    changes: FieldChanges = FieldChanges()
    payload: dict[str, Any] | None = None
    limit: int | None = None
    dry_run: bool = False
    redrive: bool = False
    rule: str | None = None
    run_id: str | None = None
    since: datetime | None = None

    @property
    def selects(self) -> bool:
        return self.where is not None or self.redrive


def apply_fix(
    spark: SparkSession, warehouse: Warehouse, action: DataQualityAction, command: FixCommand, *, by: str
) -> OperatorResult | DryRun:
    """Runs the command, once its parts are known to go together; a dry run's report, else what was written."""
    if bool(command.keys) == command.selects:
        raise OperatorError(codes.FIX_NEEDS_ONE_SELECTION, "name the rows by key or select them with where, not both")
    refuse_bad_limit(command.limit, "limit")
    if not command.selects:
        if command.changes.expressions or command.limit is not None or command.dry_run:
            raise OperatorError(
                codes.FIX_NEEDS_ONE_SELECTION, "set expressions, a limit and a dry run work on rows selected by where"
            )
        values = command.changes.values or None
        return fix_rows(spark, warehouse, action, list(command.keys), set_fields=values, payload=command.payload, by=by)
    if command.payload is not None:
        raise OperatorError(codes.FIX_NEEDS_ONE_CHANGE, "a payload replaces one row's payload: name the row by key")
    if command.redrive and command.changes.fields:
        raise OperatorError(codes.REDRIVE_CHANGES_NOTHING, "a redrive sets no field: fix the rows instead")
    if command.redrive:
        selection = redrive_selection(command.rule, command.run_id, command.since, command.where, command.limit)
    else:
        selection = Selection(command.where, command.limit)
    changes = command.changes if command.redrive else required(command.changes)
    if command.dry_run:
        return dry_run_fix(spark, warehouse, action, selection, changes)
    return fix_where(spark, warehouse, action, selection, changes, by=by)
