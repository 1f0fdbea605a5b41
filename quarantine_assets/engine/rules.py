"""Rule evaluation: every rule once per row; a rule passes only when it is TRUE."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from quarantine_assets.config.models import Rule

FAILED_RULES = "_dlq_failed_rules"
RESCUED_DATA = "_rescued_data"
_RESCUED_DATA_REFERENCE = re.compile(rf"\b{RESCUED_DATA}\b")


def applicable_rules(rules: Sequence[Rule], columns: Sequence[str]) -> list[Rule]:
    """Rules about `_rescued_data` only apply where the rows carry it (not to recycled payloads)."""
    if RESCUED_DATA in columns:
        return list(rules)
    return [rule for rule in rules if not _RESCUED_DATA_REFERENCE.search(rule.expression)]


def failed_rules_column(rules: Sequence[Rule]) -> Column:
    """An array of the `{name, rule}` structs a row fails; NULL results count as failures."""
    outcomes = [
        F.when(F.coalesce(F.expr(rule.expression), F.lit(False)), F.lit(None)).otherwise(
            F.struct(F.lit(rule.name).alias("name"), F.lit(rule.expression).alias("rule"))
        )
        for rule in rules
    ]
    return F.filter(F.array(*outcomes), lambda outcome: outcome.isNotNull())


def with_failed_rules(rows: DataFrame, rules: Sequence[Rule]) -> DataFrame:
    return rows.withColumn(FAILED_RULES, failed_rules_column(applicable_rules(rules, rows.columns)))


def fails_any(rule_names: Sequence[str]) -> Column:
    names = F.array(*[F.lit(name) for name in rule_names]) if rule_names else F.array().cast("array<string>")
    return F.exists(F.col(FAILED_RULES), lambda failure: F.array_contains(names, failure["name"]))


@dataclass(frozen=True)
class BatchCounts:
    rows: int
    kept: int  # passed every `drop` rule: bound for the validated table
    fail_rule_violations: int  # rows failing a `fail` rule (dqe mode only: quarantine coerces to drop)
    failures_per_rule: dict[str, int]


def batch_counts(evaluated: DataFrame, rules: Sequence[Rule]) -> BatchCounts:
    """Everything the materialization reports about a batch, in one Spark action."""
    per_rule = [F.sum(fails_any([rule.name]).cast("long")).alias(f"rule_{index}") for index, rule in enumerate(rules)]
    row = evaluated.agg(
        F.count(F.lit(1)).alias("rows"),
        F.sum((~fails_any(names_with_action(rules, "drop"))).cast("long")).alias("kept"),
        F.sum(fails_any(names_with_action(rules, "fail")).cast("long")).alias("fail_rule_violations"),
        *per_rule,
    ).first()
    return BatchCounts(
        rows=int(row["rows"]),
        kept=int(row["kept"] or 0),
        fail_rule_violations=int(row["fail_rule_violations"] or 0),
        failures_per_rule={rule.name: int(row[f"rule_{index}"] or 0) for index, rule in enumerate(rules)},
    )


def names_with_action(rules: Sequence[Rule], action: str) -> list[str]:
    return [rule.name for rule in rules if rule.action == action]
