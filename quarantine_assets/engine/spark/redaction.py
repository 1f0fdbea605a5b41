"""Sensitive columns never reach the DLQ as they were: masked or hashed before the inbox write.

A NULL stays NULL, so a row rejected for a missing value still says so. A record that did not
parse may hold any column's value anywhere in its raw text, so for an action with sensitive
columns the raw text is redacted as a whole.

An operator gives the values back in a fix, and the row carries them to the validated table. Once it has
landed or failed again, the recycled step redacts them in its inbox and outbox rows (`redacted_payload`);
their earlier images stay in files the tables no longer hold until `purge --physically` removes those
(`holds_clear_values` finds them).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from quarantine_assets.config.models import REDACTION_METHODS
from quarantine_assets.engine.spark.inbox import quote
from quarantine_assets.engine.spark.payload_types import sql_string
from quarantine_assets.engine.spark.rules import SPARK_RESCUED_DATA

MASK, SHA256 = REDACTION_METHODS
MASKED = "[redacted]"


def redacted(rows: DataFrame, sensitive_columns: Sequence[str], method: str) -> DataFrame:
    """`rows` with each sensitive column (matched as Spark resolves names, ignoring case) and the raw
    text of unparsed records replaced by `[redacted]` or `sha256:<hex>`; every other column as it is."""
    if not sensitive_columns:
        return rows
    wanted = {name.lower() for name in sensitive_columns}
    hidden = [name for name in rows.columns if name.lower() in wanted or name == SPARK_RESCUED_DATA]
    return rows.withColumns({name: _redact(quote(name), method) for name in hidden})


def _redact(value: Column, method: str) -> Column:
    replacement = F.lit(MASKED) if method == MASK else F.concat(F.lit(f"{SHA256}:"), F.sha2(value.cast("string"), 256))
    return F.when(value.isNull(), F.lit(None).cast("string")).otherwise(replacement)


def redacted_payload(payload: str, sensitive_columns: Sequence[str], method: str) -> str:
    """SQL: `payload` (a variant object) with each sensitive field's value redacted as the split redacts its
    column. NULLs and values already redacted stay as they are, so redacting twice changes nothing."""
    return (
        f"to_variant_object(transform_values(variant_get({payload}, '$', 'map<string, variant>'), "
        f"(name, value) -> CASE WHEN {_in_clear('name', 'value', sensitive_columns, method)} "
        f"THEN CAST({_replacement(_text('value'), method)} AS VARIANT) ELSE value END))"
    )


def holds_clear_values(payload: str, sensitive_columns: Sequence[str], method: str) -> str:
    """SQL: whether `payload` (a variant object) holds a sensitive field's value as it was given."""
    return (
        f"exists(map_entries(variant_get({payload}, '$', 'map<string, variant>')), "
        f"field -> {_in_clear('field.key', 'field.value', sensitive_columns, method)})"
    )


def _text(value: str) -> str:
    """A field's value as text: a scalar as Spark casts it (as the split hashes it), anything else as JSON."""
    return f"coalesce(try_variant_get({value}, '$', 'string'), to_json({value}))"


def _in_clear(name: str, value: str, sensitive_columns: Sequence[str], method: str) -> str:
    names = ", ".join(sql_string(column.lower()) for column in sensitive_columns)
    text = _text(value)
    redacted = f"{text} = '{MASKED}'" if method == MASK else f"startswith({text}, '{SHA256}:')"
    return f"lower({name}) IN ({names}) AND NOT is_variant_null({value}) AND NOT {redacted}"


def _replacement(text: str, method: str) -> str:
    return f"'{MASKED}'" if method == MASK else f"concat('{SHA256}:', sha2({text}, 256))"
