"""Records a CSV or JSON source's parser could not read: their reason code, and what is wrong in words.

Spark's permissive parsers keep a bad record's raw text but not their message. So the raw text is
parsed again, by the same parser with the source's own options: once as text, once as the declared
columns. Where a value is present as text but missing as its column's type, that value does not fit.
Each parse runs once, and only for records that did not parse, inside the branch that builds their message.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from quarantine_assets.config.models import DeltaSource, FileSource
from quarantine_assets.engine.lake.dlq_schema import ARRIVED_AT, SOURCE_FILE
from quarantine_assets.engine.spark.payload_types import SHOWN_VALUE_CHARS, sql_string
from quarantine_assets.engine.spark.rules import RECORD_PARSES, SPARK_RESCUED_DATA, passes
from quarantine_assets.engine.spark.source import RESCUING_FORMATS

# Options that decide what happens to a bad record, not how a record is read.
_BAD_RECORD_OPTIONS = {"mode", "columnnameofcorruptrecord"}
# Appended as one more field, it lands where the record's fields end: that position counts them.
_END_MARK = "\u0001"
# Where Python's parser accepts a line Spark's does not, it has no message to give.
_NOT_JSON = "it holds what Spark's JSON does not allow, such as NaN or a key given twice"


@dataclass(frozen=True)
class RecordParsing:
    """How a source's records are parsed: its format, the columns it declares and its read options."""

    format: str
    columns: StructType
    options: dict[str, str]
    shows_values: bool = True  # False where the action has sensitive columns: a value may be one of theirs

    @property
    def codes(self) -> tuple[str, ...]:
        """The reason codes a record of this format that did not parse can get."""
        if self.format == "json":
            return ("json_parse_error", "json_schema_mismatch")
        return (f"{self.format}_schema_mismatch",)


def record_parsing(
    source: FileSource | DeltaSource, read: StructType, *, shows_values: bool = True
) -> RecordParsing | None:
    """For a source whose bad records are kept as raw text; `read` is the schema its stream reads."""
    if not isinstance(source, FileSource) or source.format not in RESCUING_FORMATS:
        return None
    columns = StructType([field for field in read if field.name not in (SPARK_RESCUED_DATA, SOURCE_FILE, ARRIVED_AT)])
    options = {name: value for name, value in source.options.items() if name.lower() not in _BAD_RECORD_OPTIONS}
    return RecordParsing(source.format, columns, options, shows_values)


def parse_reason(parsing: RecordParsing) -> tuple[Column, Column]:
    """The reason code and message of a record that did not parse, read off its raw text."""
    if parsing.format == "json":
        parse_error, schema_mismatch = parsing.codes
        not_json = F.try_parse_json(F.col(SPARK_RESCUED_DATA)).isNull()
        syntax_error = F.concat(
            F.lit("the line is not a JSON document: "),
            F.coalesce(_json_syntax_error(F.when(not_json, F.col(SPARK_RESCUED_DATA))), F.lit(_NOT_JSON)),
        )
        message = F.when(not_json, syntax_error).otherwise(F.expr(_json_message(parsing)))
        return F.when(not_json, F.lit(parse_error)).otherwise(F.lit(schema_mismatch)), message
    (schema_mismatch,) = parsing.codes
    return F.lit(schema_mismatch), F.expr(_csv_message(parsing))


def parse_code_counts(parsing: RecordParsing) -> list[Column]:
    """Rows per parse reason code, as aggregates named `parse_<code>`."""
    code, _ = parse_reason(parsing)
    unparsed = ~passes(RECORD_PARSES)
    return [F.sum((unparsed & (code == name)).cast("long")).alias(f"parse_{name}") for name in parsing.codes]


def parse_codes_from(aggregates: dict, parsing: RecordParsing) -> dict[str, int]:
    return {name: int(aggregates[f"parse_{name}"] or 0) for name in parsing.codes}


def _json_message(parsing: RecordParsing) -> str:
    raw = SPARK_RESCUED_DATA
    options = _options_sql(parsing.options)
    # Spark reads any JSON value into a STRING as its text: the values as they were written, by key.
    parses = f"named_struct('written', from_json({raw}, 'map<string,string>'{options}), "
    parses += f"'typed', from_json({raw}, {sql_string(parsing.columns.json())}{options}))"
    misfits = [
        _misfit(
            field,
            f"element_at(parsed.written, {sql_string(field.name)})",
            f"parsed.typed.{_identifier(field.name)}",
            parsing.shows_values,
        )
        for field in parsing.columns
        if not isinstance(field.dataType, StringType)
    ]
    explained = (
        "CASE WHEN parsed.written IS NULL THEN 'the line is JSON but not an object, so it has no fields for the "
        f"columns' ELSE {_listed(misfits, 'the JSON object does not fit the declared columns')} END"
    )
    return _with_value("parsed", parses, explained)


def _json_syntax_error(text: Column) -> Column:
    """Where and why a line is not JSON, in the words of Python's `json` parser: Spark's own parser keeps
    no message, and SQL has no way to catch one. Defined here, not at module level, so that Spark ships
    the function itself to its Python workers and they need no copy of this package."""

    def syntax_error(line: str | None) -> str | None:
        import json

        if line is None:
            return None
        try:
            json.loads(line)
        except json.JSONDecodeError as error:
            return f"{error.msg} at column {error.colno}"
        except RecursionError:
            return "its values nest too deep"
        return None

    return F.udf(syntax_error, StringType(), useArrow=False)(text)


def _csv_message(parsing: RecordParsing) -> str:
    raw, declared = SPARK_RESCUED_DATA, len(parsing.columns)
    options = _options_sql(parsing.options)
    # One text column more than declared: a surplus field fills it, and the end mark finds the field count;
    # a quote left open swallows the end mark into its value.
    texts = StructType([StructField(f"f{index}", StringType()) for index in range(declared + 1)])
    separator = _separator(parsing.options)
    marked = f"from_csv(concat({raw}, {sql_string(separator + _END_MARK)}), {sql_string(_ddl(texts))}{options})"
    parses = f"named_struct('marked', {marked}, 'typed', from_csv({raw}, {sql_string(_ddl(parsing.columns))}{options}))"
    fields = f"array({', '.join(f'parsed.marked.f{index}' for index in range(declared + 1))})"
    counted = f"array_position({fields}, {sql_string(_END_MARK)}) - 1"
    unclosed = f"exists({fields}, text -> endswith(text, {sql_string(_END_MARK)}))"
    misfits = [
        _misfit(field, f"parsed.marked.f{index}", f"parsed.typed.{_identifier(field.name)}", parsing.shows_values)
        for index, field in enumerate(parsing.columns)
        if not isinstance(field.dataType, StringType)
    ]
    explained = (
        f"CASE WHEN {counted} BETWEEN 0 AND {declared - 1} THEN concat('the record has ', "
        f"cast({counted} as string), ' field(s); {declared} columns are declared') "
        f"WHEN {counted} < 0 AND {unclosed} THEN 'a quoted value is not closed before the record ends' "
        f"WHEN {counted} < 0 THEN 'the record has more than {declared} fields; {declared} columns are declared' "
        f"ELSE {_listed(misfits, 'the record does not fit the declared columns')} END"
    )
    return _with_value("parsed", parses, explained)


def _with_value(name: str, value: str, body: str) -> str:
    """`body` with `name` bound to `value`, evaluated once: SQL has no `let`, but a lambda's variable is one."""
    return f"element_at(transform(array({value}), {name} -> {body}), 1)"


def _misfit(field: StructField, written: str, typed: str, shows_values: bool) -> str:
    """The field's message where its value was written but does not parse as its type, else NULL."""
    shown = f"concat(' = ', substring({written}, 1, {SHOWN_VALUE_CHARS}))" if shows_values else "''"
    return (
        f"CASE WHEN {written} IS NOT NULL AND {typed} IS NULL THEN concat({sql_string(field.name)}, {shown}, "
        f"{sql_string(' is not a valid ' + field.dataType.simpleString())}) END"
    )


def _listed(messages: list[str], otherwise: str) -> str:
    """The non-NULL messages joined, or `otherwise` where there are none."""
    if not messages:
        return sql_string(otherwise)
    found = f"concat_ws('; ', {', '.join(messages)})"
    return _with_value("found", found, f"CASE WHEN found = '' THEN {sql_string(otherwise)} ELSE found END")


def _options_sql(options: dict[str, str]) -> str:
    pairs = ", ".join(f"{sql_string(name)}, {sql_string(str(value))}" for name, value in options.items())
    return f", map({pairs})" if options else ""


def _separator(options: dict[str, str]) -> str:
    separator = next((value for name, value in options.items() if name.lower() in ("sep", "delimiter")), ",")
    return "\t" if separator == "\\t" else separator


def _ddl(columns: StructType) -> str:
    return ", ".join(f"{_identifier(field.name)} {field.dataType.simpleString()}" for field in columns)


def _identifier(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"
