"""Sensitive columns never reach the DLQ as they were: masked or hashed before the inbox write.

A NULL stays NULL, so a row rejected for a missing value still says so. A record that did not
parse may hold any column's value anywhere in its raw text, so for an action with sensitive
columns the raw text is redacted as a whole.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from quarantine_assets.config.models import REDACTION_METHODS
from quarantine_assets.engine.inbox import quote
from quarantine_assets.engine.rules import RESCUED_DATA

MASK, SHA256 = REDACTION_METHODS
MASKED = "[redacted]"


def redacted(rows: DataFrame, sensitive_columns: Sequence[str], method: str) -> DataFrame:
    """`rows` with each sensitive column (matched as Spark resolves names, ignoring case) and the raw
    text of unparsed records replaced by `[redacted]` or `sha256:<hex>`; every other column as it is."""
    if not sensitive_columns:
        return rows
    wanted = {name.lower() for name in sensitive_columns}
    hidden = [name for name in rows.columns if name.lower() in wanted or name == RESCUED_DATA]
    return rows.withColumns({name: _redact(quote(name), method) for name in hidden})


def _redact(value: Column, method: str) -> Column:
    replacement = F.lit(MASKED) if method == MASK else F.concat(F.lit(f"{SHA256}:"), F.sha2(value.cast("string"), 256))
    return F.when(value.isNull(), F.lit(None).cast("string")).otherwise(replacement)
