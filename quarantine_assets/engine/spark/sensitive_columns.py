"""Sensitive columns checked against the source before anything is written."""

from __future__ import annotations

from pyspark.sql.types import StructType

from quarantine_assets import codes
from quarantine_assets.config.models import DataQualityAction
from quarantine_assets.errors import Problem


def sensitive_column_problems(action: DataQualityAction, schema: StructType) -> list[Problem]:
    """Each sensitive column the source does not have (matched as `redacted` matches them): a misspelt name or
    a nested field (`customer.email`) would redact nothing, silently, and its values would reach the DLQ."""
    if action.quarantine is None:
        return []
    columns = {name.lower() for name in schema.fieldNames()}
    return [
        Problem(
            codes.SENSITIVE_COLUMN_UNKNOWN,
            f"sensitive column {name!r} of {action.name} is not a column of its source, so it would redact "
            f"nothing; the source's columns are {schema.fieldNames()}. Name top-level columns: a nested field "
            "is redacted with the column that holds it",
            file=action.config_file,
            field="quarantine.sensitive_columns",
        )
        for name in action.quarantine.sensitive_columns
        if name.lower() not in columns
    ]
