"""Payload values back into their columns' types, exactly, or a `payload_type` failure naming where and what.

Spark's variant casts round and truncate without a word: `12.345` into DECIMAL(10,2) gives 12.35,
`1.5` into INT gives 1, a JSON text into BINARY gives the text's bytes, `"2024-01-01 10:00"` into
DATE drops the time. A recycled value lands only if it comes back unchanged, at any nesting depth.
"""

from __future__ import annotations

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

PAYLOAD_TYPE_RULE = "payload_type"
PAYLOAD = "_row_data"
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


def payload_type_failures(schema: StructType) -> Column:
    """One failed-rule entry per payload value that does not come back exactly as its column's type."""
    problems = F.flatten(
        F.array(
            *(
                _problems(F.variant_get(PAYLOAD, variant_path(column.name), "variant"), column.dataType, column.name)
                for column in schema
            )
        )
    )
    return F.transform(
        problems, lambda problem: F.struct(F.lit(PAYLOAD_TYPE_RULE).alias("name"), problem.alias("rule"))
    )


def _problems(raw: Column, data_type: DataType, label: Column | str) -> Column:
    """What does not round-trip in `raw` (a variant) as `data_type`: an array of messages, empty when exact."""
    label = F.lit(label) if isinstance(label, str) else label
    if isinstance(data_type, VariantType):
        return F.array().cast("array<string>")
    absent = raw.isNull() | F.is_variant_null(raw)
    if isinstance(data_type, StructType):
        fields = F.try_variant_get(raw, "$", "map<string,variant>")
        names = F.array(*(F.lit(field.name) for field in data_type))
        inner = F.flatten(
            F.array(
                *(
                    _problems(
                        F.variant_get(raw, variant_path(field.name), "variant"),
                        field.dataType,
                        F.concat(label, F.lit("."), F.lit(field.name)),
                    )
                    for field in data_type
                ),
                F.transform(
                    F.array_except(F.map_keys(fields), names),
                    lambda extra: F.concat(
                        label, F.lit("."), extra, F.lit(" is not a field of "), F.lit(data_type.simpleString())
                    ),
                ),
            )
        )
        return _when_present(absent, fields.isNull(), raw, data_type, label, inner)
    if isinstance(data_type, ArrayType):
        elements = F.try_variant_get(raw, "$", "array<variant>")
        inner = F.flatten(
            F.transform(
                elements,
                lambda element, index: _problems(
                    element, data_type.elementType, F.concat(label, F.lit("["), index.cast("string"), F.lit("]"))
                ),
            )
        )
        return _when_present(absent, elements.isNull(), raw, data_type, label, inner)
    if isinstance(data_type, MapType):
        entries = F.try_variant_get(raw, "$", "map<string,variant>")
        inner = F.flatten(
            F.transform(
                F.map_entries(entries),
                lambda entry: _problems(
                    entry["value"], data_type.valueType, F.concat(label, F.lit("["), entry["key"], F.lit("]"))
                ),
            )
        )
        return _when_present(absent, entries.isNull(), raw, data_type, label, inner)
    typed = F.try_variant_get(raw, "$", data_type.simpleString())
    return _when_present(absent, typed.isNull() | ~_exact(raw, typed, data_type), raw, data_type, label, F.array())


def _exact(raw: Column, typed: Column, data_type: DataType) -> Column:
    """Whether the cast value equals the payload value, for the types whose casts lose something silently."""
    if isinstance(data_type, IntegralType | DecimalType):
        comparison = (
            DecimalType(38, 38 - (data_type.precision - data_type.scale))
            if isinstance(data_type, DecimalType)
            else INTEGRAL_COMPARISON
        )
        return F.coalesce(
            F.try_variant_get(raw, "$", comparison.simpleString()) == typed.cast(comparison), F.lit(False)
        )
    if isinstance(data_type, DateType):
        same = F.try_variant_get(raw, "$", "timestamp_ntz") == typed.cast("timestamp_ntz")
        return F.coalesce(same, F.lit(False))
    if isinstance(data_type, BinaryType):
        return F.schema_of_variant(raw) == F.lit("BINARY")
    return F.lit(True)


def _when_present(
    absent: Column, wrong: Column, raw: Column, data_type: DataType, label: Column, inner: Column
) -> Column:
    """No problem where the value is absent; this level's problem where it is wrong; else the inner ones."""
    shown = F.substring(F.to_json(raw), 1, SHOWN_VALUE_CHARS)
    problem = F.array(F.concat(label, F.lit(" = "), shown, F.lit(" is not exactly "), F.lit(data_type.simpleString())))
    return F.when(absent, F.array().cast("array<string>")).when(wrong, problem).otherwise(inner.cast("array<string>"))
