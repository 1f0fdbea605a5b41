"""Operational metadata columns (the reference's audit columns) as Spark Columns."""

from __future__ import annotations

import ast

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from quarantine_assets.config.models import MetadataColumn
from quarantine_assets.config.operational_metadata import function_name

VIEW = "view"
TABLE = "streaming_table"


def with_view_columns(rows: DataFrame, columns: tuple[MetadataColumn, ...]) -> DataFrame:
    """Columns the reference adds to the load's view: they are part of each row, payloads included."""
    return _with(rows, [column for column in columns if VIEW in column.applies_to])


def with_table_columns(rows: DataFrame, columns: tuple[MetadataColumn, ...]) -> DataFrame:
    """Columns the reference adds to the target table only, evaluated when a row is written there."""
    return _with(rows, [column for column in columns if VIEW not in column.applies_to and TABLE in column.applies_to])


def table_column_names(columns: tuple[MetadataColumn, ...]) -> set[str]:
    return {column.name for column in columns if VIEW not in column.applies_to and TABLE in column.applies_to}


def _with(rows: DataFrame, columns: list[MetadataColumn]) -> DataFrame:
    added = [_column(column.expression).alias(column.name) for column in columns if column.name not in rows.columns]
    return rows.select("*", *added) if added else rows


def _column(expression: str) -> Column:
    """Config loading accepted only calls of pyspark.sql.functions on literals and on each other."""
    return _evaluate(ast.parse(expression, mode="eval").body)


def _evaluate(node: ast.AST):
    if isinstance(node, ast.Constant):
        return node.value
    arguments = [_evaluate(argument) for argument in node.args]
    keywords = {keyword.arg: _evaluate(keyword.value) for keyword in node.keywords}
    return getattr(F, function_name(node))(*arguments, **keywords)
