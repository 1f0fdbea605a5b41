"""The reference's `operational_metadata`: audit columns defined in `lhp.yaml`, chosen per flowgroup or action.

Expressions are the reference's PySpark text (`F.current_timestamp()`, `F.col('_metadata.file_path')`).
They are never executed as Python: only calls of `pyspark.sql.functions` on literals and on each other
are accepted, and anything else is named in a coded warning and left out.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from pyspark.sql import functions

from quarantine_assets.codes import REFERENCE_KEY_IGNORED, STRUCTURE
from quarantine_assets.config.models import MetadataColumn
from quarantine_assets.config.yaml_files import child
from quarantine_assets.errors import Problem

DEFAULT_APPLIES_TO = ("streaming_table", "materialized_view")
# The reference's built-in columns, used when lhp.yaml defines none.
BUILT_IN = {
    "_ingestion_timestamp": ("F.current_timestamp()", ("view", "streaming_table", "materialized_view")),
    "_source_file": ("F.input_file_name()", ("view",)),
    "_pipeline_name": ('F.lit("${pipeline_name}")', ("view", "streaming_table", "materialized_view")),
    "_flowgroup_name": ('F.lit("${flowgroup_name}")', ("view", "streaming_table", "materialized_view")),
}


def defined_columns(block: Any, file: Path) -> tuple[dict[str, tuple[str, tuple[str, ...]]], list[Problem]]:
    """`operational_metadata.columns` of lhp.yaml: name -> (expression, applies_to)."""
    if block is None:
        return dict(BUILT_IN), []
    columns = block.get("columns") if isinstance(block, dict) else None
    if not isinstance(columns, dict):
        return {}, [Problem(STRUCTURE, "operational_metadata needs columns: {name: expression}", file=file)]
    defined, problems = {}, []
    for name, spec in columns.items():
        field = child("operational_metadata.columns", name)
        expression = spec.get("expression") if isinstance(spec, dict) else spec
        applies_to = spec.get("applies_to", DEFAULT_APPLIES_TO) if isinstance(spec, dict) else DEFAULT_APPLIES_TO
        if not isinstance(expression, str) or not isinstance(applies_to, list | tuple):
            problems.append(
                Problem(STRUCTURE, "a column needs an expression and a list applies_to", file=file, field=field)
            )
        elif isinstance(spec, dict) and spec.get("enabled") is False:
            continue
        else:
            defined[str(name)] = (expression, tuple(applies_to))
    return defined, problems


def selected_columns(
    defined: dict[str, tuple[str, tuple[str, ...]]],
    selections: list[Any],
    names: dict[str, str],
    file: Path,
    field: str,
) -> tuple[tuple[MetadataColumn, ...], list[Problem]]:
    """The union of the flowgroup's and the actions' lists; `false` on an action turns them all off."""
    if any(selection is False for selection in selections):
        return (), []
    chosen = dict.fromkeys(name for selection in selections if isinstance(selection, list) for name in selection)
    columns, problems = [], []
    for name in chosen:
        if name not in defined:
            message = f"operational_metadata column {name!r} is not defined in lhp.yaml; it is not added"
            problems.append(Problem(REFERENCE_KEY_IGNORED, message, file=file, field=field, severity="warning"))
            continue
        expression, applies_to = defined[name]
        for token, value in names.items():
            expression = expression.replace("${" + token + "}", value)
        reason = unsupported(expression)
        if reason:
            message = f"operational_metadata column {name!r} ({expression}) is not added: {reason}"
            problems.append(Problem(REFERENCE_KEY_IGNORED, message, file=file, field=field, severity="warning"))
            continue
        columns.append(MetadataColumn(name=name, expression=expression, applies_to=applies_to))
    return tuple(columns), problems


def unsupported(expression: str) -> str | None:
    """Why an expression cannot be evaluated here, or None when it can."""
    try:
        tree = ast.parse(expression, mode="eval").body
    except SyntaxError as error:
        return f"it does not parse: {error.msg}"
    return _unsupported(tree)


def _unsupported(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant):
        return None
    if not (isinstance(node, ast.Call) and function_name(node) is not None):
        return "only calls of pyspark.sql.functions (F.name(...)) on literals are evaluated here"
    if not hasattr(functions, function_name(node)):
        return f"pyspark.sql.functions has no {function_name(node)}"
    return next(filter(None, map(_unsupported, [*node.args, *(k.value for k in node.keywords)])), None)


def function_name(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "F":
        return func.attr
    return None
