"""Delta schema types compared the way Spark prints them: `integer` is `int`, nested nullability aside."""

from __future__ import annotations

import json
import re

from deltalake import DeltaTable

_TYPE_SYNONYMS = {"integer": "int", "long": "bigint", "short": "smallint", "byte": "tinyint"}
_NOT_NULL = " NOT NULL"


def column_types(delta_table: DeltaTable) -> dict[str, tuple[str, bool]]:
    fields = json.loads(delta_table.schema().to_json())["fields"]
    return {field["name"]: (_delta_type(field["type"]), field["nullable"]) for field in fields}


def _delta_type(delta_type: str | dict) -> str:
    """A Delta schema JSON type as Spark DDL prints it; nested nullability is not part of the contract."""
    if isinstance(delta_type, str):
        return _normalise(delta_type)
    kind = delta_type["type"]
    if kind == "array":
        return f"array<{_delta_type(delta_type['elementType'])}>"
    if kind == "map":
        return f"map<{_delta_type(delta_type['keyType'])},{_delta_type(delta_type['valueType'])}>"
    fields = ",".join(f"{field['name'].lower()}:{_delta_type(field['type'])}" for field in delta_type["fields"])
    return f"struct<{fields}>"


def expected_column(sql_type: str) -> tuple[str, bool]:
    not_null = sql_type.upper().endswith(_NOT_NULL)
    return _normalise(sql_type[: -len(_NOT_NULL)] if not_null else sql_type), not not_null


def _normalise(sql_type: str) -> str:
    compact = re.sub(r"\s+", "", sql_type.lower())
    return re.sub(r"[a-z_]+", lambda word: _TYPE_SYNONYMS.get(word[0], word[0]), compact)


def render_column(column: tuple[str, bool]) -> str:
    sql_type, nullable = column
    return sql_type if nullable else sql_type + _NOT_NULL.lower()
