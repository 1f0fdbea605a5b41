"""Rule evaluation: a rule passes only when it is TRUE; NULL is a failure like FALSE."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from quarantine_assets import codes
from quarantine_assets.config.models import Rule
from quarantine_assets.engine.lake.dlq_schema import ERRORS, FAILED_RULES, PARSE_CODE, PARSE_MESSAGE, RESCUED_DATA
from quarantine_assets.errors import Problem

EXPECTATION, PARSE = "expectation", "parse"
SPARK_RESCUED_DATA = "_rescued_data"
_RESCUED_DATA_REFERENCE = re.compile(rf"\b{SPARK_RESCUED_DATA}\b")
# Spark leaves NULLs where a record it could not parse had values, and keeps the raw text aside.
RECORD_PARSES = Rule(
    name="record_parses",
    expression=f"{SPARK_RESCUED_DATA} IS NULL",
    message=f"the record did not parse into the source's columns; its raw text is in {RESCUED_DATA}",
)


def applicable_rules(rules: Sequence[Rule], columns: Sequence[str]) -> list[Rule]:
    """Rules about `_rescued_data` only apply where the rows carry it (not to recycled payloads)."""
    if SPARK_RESCUED_DATA in columns:
        return list(rules)
    return [rule for rule in rules if not _RESCUED_DATA_REFERENCE.search(rule.expression)]


def with_record_parses(rules: Sequence[Rule], columns: Sequence[str]) -> list[Rule]:
    """Where rows carry `_rescued_data`, a record that did not parse is rejected, never landed with its
    values silently NULL, unless one of the user's own rules already judges it."""
    if SPARK_RESCUED_DATA in columns and not any(_RESCUED_DATA_REFERENCE.search(rule.expression) for rule in rules):
        return [*rules, RECORD_PARSES]
    return list(rules)


def passes(rule: Rule) -> Column:
    """TRUE or FALSE, never NULL: a rule whose result is NULL has failed."""
    return F.coalesce(F.expr(rule.expression), F.lit(False))


def passes_all(rules: Sequence[Rule]) -> Column:
    """A plain boolean per row, cheap enough for the full scan; rows with no rules pass."""
    return reduce(lambda both, rule: both & passes(rule), rules, F.lit(True))


def outcome(rule: Rule, outcomes: Mapping[str, Column] | None) -> Column:
    """Whether a row passed `rule`: as judged before (`outcomes`, by rule name), else evaluated now."""
    return outcomes[rule.name] if outcomes is not None else passes(rule)


def failed_rules_column(rules: Sequence[Rule], outcomes: Mapping[str, Column] | None = None) -> Column:
    """An array of the `{name, rule}` structs a row fails; built only for rows that failed one."""
    return _failures(
        rules, outcomes, lambda rule: F.struct(F.lit(rule.name).alias("name"), F.lit(rule.expression).alias("rule"))
    )


def _failures(rules: Sequence[Rule], outcomes: Mapping[str, Column] | None, entry: Callable[[Rule], Column]) -> Column:
    """The `entry` of each rule the row fails, in the rules' order."""
    failures = [F.when(~outcome(rule, outcomes), entry(rule)) for rule in rules]
    return F.filter(F.array(*failures), lambda failure: failure.isNotNull())


def with_failed_rules(
    rows: DataFrame,
    rules: Sequence[Rule],
    outcomes: Mapping[str, Column],
    parse_reason: tuple[Column, Column] | None = None,
) -> DataFrame:
    """The failed rules as the reference declares them, and beside them each failure's type, code and message,
    both from `outcomes`, the rules as judged before (a rule is not evaluated again). Built per rule from
    literals, not looked up per failure: the split writes them for every rejected row."""
    failed = rows.withColumn(FAILED_RULES, failed_rules_column(rules, outcomes))
    if parse_reason is None:
        return failed.withColumn(ERRORS, _failures(rules, outcomes, _expectation))
    # Bound as columns first: the message may call a Python function, evaluated once per row.
    code, message = parse_reason
    reasoned = failed.withColumn(PARSE_CODE, code).withColumn(PARSE_MESSAGE, message)
    parse = _error_detail(PARSE, F.col(PARSE_CODE), F.col(PARSE_MESSAGE))
    explained = reasoned.withColumn(
        ERRORS,
        _failures(rules, outcomes, lambda rule: parse if rule.name == RECORD_PARSES.name else _expectation(rule)),
    )
    return explained.drop(PARSE_CODE, PARSE_MESSAGE)


def _expectation(rule: Rule) -> Column:
    return _error_detail(EXPECTATION, F.lit(rule.name), F.lit(_message(rule)))


def _error_detail(kind: str, code: Column, message: Column) -> Column:
    """One entry of `_dlq_errors`: what kind of failure (an expectation, a record that did not parse), its
    code and its message."""
    return F.struct(F.lit(kind).alias("type"), code.alias("code"), message.alias("message"))


def _message(rule: Rule) -> str:
    return rule.message or f"`{rule.expression}` is not true"


def error_details(failed_rules: Column, rules: Sequence[Rule]) -> Column:
    """One `{type, code, message}` per entry of `failed_rules`: a rule's code is its name and its message the
    expectations file's."""
    message_of = (
        F.create_map(*(F.lit(part) for rule in rules for part in (rule.name, _message(rule)))) if rules else None
    )

    def detail(failure: Column) -> Column:
        # Entries that are no rule of the file (a recycled value of the wrong type) carry their message.
        message = (
            F.coalesce(F.element_at(message_of, failure["name"]), failure["rule"])
            if message_of is not None
            else failure["rule"]
        )
        return _error_detail(EXPECTATION, failure["name"], message)

    return F.transform(failed_rules, detail)


@dataclass(frozen=True)
class BatchCounts:
    rows: int
    kept: int  # passed every `drop` rule: bound for the validated table
    fail_rule_violations: int  # rows failing a `fail` rule (dqe mode only: quarantine coerces to drop)
    failures_per_rule: dict[str, int]


def failure_columns(rules: Sequence[Rule], outcomes: Mapping[str, Column] | None = None) -> list[Column]:
    """Rows failing each rule, as aggregates named `rule_<index>`."""
    return [F.sum((~outcome(rule, outcomes)).cast("long")).alias(f"rule_{index}") for index, rule in enumerate(rules)]


def failures_from(aggregates: dict, rules: Sequence[Rule]) -> dict[str, int]:
    """The values of `failure_columns`, by rule name; sums over no rows are NULL."""
    return {rule.name: int(aggregates[f"rule_{index}"] or 0) for index, rule in enumerate(rules)}


def count_columns(rules: Sequence[Rule]) -> list[Column]:
    """Everything the materialization reports about a batch, as aggregates over its evaluated rows."""
    return [
        F.count(F.lit(1)).alias("rows"),
        F.sum(passes_all(with_failure_action(rules, "drop")).cast("long")).alias("kept"),
        F.sum((~passes_all(with_failure_action(rules, "fail"))).cast("long")).alias("fail_rule_violations"),
        *failure_columns(rules),
    ]


def counts_from(aggregates: dict, rules: Sequence[Rule]) -> BatchCounts:
    """The values of `count_columns`, by name; sums over no rows are NULL."""
    return BatchCounts(
        rows=int(aggregates["rows"]),
        kept=int(aggregates["kept"] or 0),
        fail_rule_violations=int(aggregates["fail_rule_violations"] or 0),
        failures_per_rule=failures_from(aggregates, rules),
    )


def batch_counts(evaluated: DataFrame, rules: Sequence[Rule]) -> BatchCounts:
    """The counts in a Spark action of their own, for when no write can carry them."""
    return counts_from(evaluated.agg(*count_columns(rules)).first().asDict(), rules)


def rule_column_problems(spark: SparkSession, schema: StructType, rules: Sequence[Rule], file: Path) -> list[Problem]:
    """Each rule resolved against the source's columns, as Spark's analyzer sees them, before any row is read."""
    from pyspark.errors import AnalysisException

    columns = spark.createDataFrame([], schema)
    problems = []
    for rule in applicable_rules(rules, schema.fieldNames()):
        try:
            columns.select(F.expr(rule.expression))
        except AnalysisException as error:
            if not (error.getCondition() or "").startswith("UNRESOLVED_COLUMN"):
                raise
            missing = error.getMessageParameters().get("objectName", "?")
            problems.append(
                Problem(
                    codes.RULE_COLUMN_MISSING,
                    f"rule {rule.name!r} ({rule.expression}) names {missing}, which the source does not have; "
                    f"its columns are {schema.fieldNames()}{_headerless_hint(schema)}",
                    file=file,
                    field=rule.name,
                )
            )
    return problems


def _headerless_hint(schema: StructType) -> str:
    """Spark names the columns of a CSV file read without its header _c0, _c1, ..."""
    if schema.fieldNames() and all(re.fullmatch(r"_c\d+", name) for name in schema.fieldNames()[:1]):
        return "; the file was read without its header: set the load's options header: true"
    return ""


def with_failure_action(rules: Sequence[Rule], failure_action: str) -> list[Rule]:
    return [rule for rule in rules if rule.failure_action == failure_action]
