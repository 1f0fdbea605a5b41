"""Payload values back into their columns' types, exactly, or a `payload_type` failure naming where and what.

Spark's variant casts round and truncate without a word: `12.345` into DECIMAL(10,2) gives 12.35,
`1.5` into INT gives 1, a JSON text into BINARY gives the text's bytes, `"2024-01-01 10:00"` into
DATE drops the time. A recycled value lands only if it comes back unchanged, at any nesting depth.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    DateType,
    DecimalType,
    IntegralType,
    MapType,
    StringType,
    StructType,
    VariantType,
)

from quarantine_assets.engine.lake.dlq_schema import ROW_DATA

PAYLOAD_TYPE_RULE = "payload_type"
PAYLOAD = ROW_DATA
SHOWN_VALUE_CHARS = 200
# Integral values are compared as decimals wide enough for a LONG and for fractions that a cast would drop.
INTEGRAL_COMPARISON = DecimalType(38, 18)


def variant_path(field: str) -> str:
    """A quoted path, so column names with dots, spaces or quotes still resolve.

    Spark's variant paths have no escapes: a name holding a single quote goes in double quotes.
    """
    return f'$["{field}"]' if "'" in field else f"$['{field}']"


def unstorable_fields(data_type: DataType, path: str = "") -> list[str]:
    """Paths of the maps whose keys are not strings: a variant object, and so a payload, keys by text only."""
    if isinstance(data_type, StructType):
        return [found for field in data_type for found in unstorable_fields(field.dataType, f"{path}.{field.name}")]
    if isinstance(data_type, ArrayType):
        return unstorable_fields(data_type.elementType, f"{path}[]")
    if isinstance(data_type, MapType):
        own = [] if isinstance(data_type.keyType, StringType) else [path.lstrip(".")]
        return own + unstorable_fields(data_type.valueType, f"{path}[]")
    return []


def typed_columns(schema: StructType) -> list[Column]:
    return [F.try_variant_get(PAYLOAD, variant_path(f.name), f.dataType.simpleString()).alias(f.name) for f in schema]


def payload_type_failures(schema: StructType, sensitive_columns: Sequence[str] = ()) -> Column:
    """One failed-rule entry per payload value that does not come back exactly as its column's type; it shows
    the value, except within a sensitive column (matched ignoring case), whose value an operator supplied.

    Written as one SQL expression, parsed by Spark at once: built from `functions`, a thousand-column
    schema takes tens of thousands of JVM round trips.
    """
    hidden = {name.lower() for name in sensitive_columns}
    problems = _flattened(
        _problems(
            f"variant_get({PAYLOAD}, {sql_string(variant_path(column.name))}, 'variant')",
            column.dataType,
            sql_string(column.name),
            depth=0,
            shows_values=column.name.lower() not in hidden,
        )
        for column in schema
    )
    return F.expr(
        f"transform({problems}, problem -> named_struct('name', {sql_string(PAYLOAD_TYPE_RULE)}, 'rule', problem))"
    )


def sql_string(text: str) -> str:
    """`text` as a Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


_NO_PROBLEMS = "cast(array() as array<string>)"


def _flattened(arrays) -> str:
    return f"flatten(array({', '.join(arrays)}))"


def _problems(raw: str, data_type: DataType, label: str, depth: int, shows_values: bool) -> str:
    """What does not round-trip in `raw` (a variant) as `data_type`: an array of messages, empty when exact.
    `raw` and `label` are SQL expressions; `depth` keeps nested lambdas' variables apart."""
    if isinstance(data_type, VariantType):
        return _NO_PROBLEMS
    absent = f"({raw} IS NULL OR is_variant_null({raw}))"
    if isinstance(data_type, StructType):
        fields = f"try_variant_get({raw}, '$', 'map<string,variant>')"
        names = f"array({', '.join(sql_string(field.name) for field in data_type)})"
        extra = f"extra_{depth}"
        inner = _flattened(
            [
                *(
                    _problems(
                        f"variant_get({raw}, {sql_string(variant_path(field.name))}, 'variant')",
                        field.dataType,
                        f"concat({label}, '.', {sql_string(field.name)})",
                        depth + 1,
                        shows_values,
                    )
                    for field in data_type
                ),
                f"transform(array_except(map_keys({fields}), {names}), {extra} -> concat({label}, '.', {extra}, "
                f"' is not a field of ', {sql_string(data_type.simpleString())}))",
            ]
        )
        return _when_present(absent, f"{fields} IS NULL", raw, data_type, label, inner, shows_values)
    if isinstance(data_type, ArrayType):
        elements = f"try_variant_get({raw}, '$', 'array<variant>')"
        element, index = f"element_{depth}", f"index_{depth}"
        each = _problems(
            element,
            data_type.elementType,
            f"concat({label}, '[', cast({index} as string), ']')",
            depth + 1,
            shows_values,
        )
        inner = f"flatten(transform({elements}, ({element}, {index}) -> {each}))"
        return _when_present(absent, f"{elements} IS NULL", raw, data_type, label, inner, shows_values)
    if isinstance(data_type, MapType):
        entries = f"try_variant_get({raw}, '$', 'map<string,variant>')"
        entry = f"entry_{depth}"
        each = _problems(
            f"{entry}.value", data_type.valueType, f"concat({label}, '[', {entry}.key, ']')", depth + 1, shows_values
        )
        inner = f"flatten(transform(map_entries({entries}), {entry} -> {each}))"
        return _when_present(absent, f"{entries} IS NULL", raw, data_type, label, inner, shows_values)
    typed = f"try_variant_get({raw}, '$', {sql_string(data_type.simpleString())})"
    wrong = f"({typed} IS NULL OR NOT {_exact(raw, typed, data_type)})"
    return _when_present(absent, wrong, raw, data_type, label, _NO_PROBLEMS, shows_values)


def _exact(raw: str, typed: str, data_type: DataType) -> str:
    """Whether the cast value equals the payload value, for the types whose casts lose something silently."""
    if isinstance(data_type, IntegralType | DecimalType):
        comparison = (
            DecimalType(38, 38 - (data_type.precision - data_type.scale))
            if isinstance(data_type, DecimalType)
            else INTEGRAL_COMPARISON
        ).simpleString()
        return f"coalesce(try_variant_get({raw}, '$', '{comparison}') = cast({typed} as {comparison}), false)"
    if isinstance(data_type, DateType):
        return f"coalesce(try_variant_get({raw}, '$', 'timestamp_ntz') = cast({typed} as timestamp_ntz), false)"
    if isinstance(data_type, BinaryType):
        return f"(schema_of_variant({raw}) = 'BINARY')"
    return "true"


def _when_present(
    absent: str, wrong: str, raw: str, data_type: DataType, label: str, inner: str, shows_values: bool
) -> str:
    """No problem where the value is absent; this level's problem where it is wrong; else the inner ones."""
    shown = f"' = ', substring(to_json({raw}), 1, {SHOWN_VALUE_CHARS}), " if shows_values else ""
    problem = f"array(concat({label}, {shown}' is not exactly ', {sql_string(data_type.simpleString())}))"
    return f"CASE WHEN {absent} THEN {_NO_PROBLEMS} WHEN {wrong} THEN {problem} ELSE cast({inner} as array<string>) END"
