"""Follow a flowgroup's view chain from a data_quality action back to its load and forward to its write.

Actions chain by view names: an action's `target` view is the next action's `source`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from quarantine_assets.codes import STRUCTURE
from quarantine_assets.config.file_sources import file_source
from quarantine_assets.config.models import QUALIFIED_NAME, DeltaSource, FileSource
from quarantine_assets.config.yaml_files import child
from quarantine_assets.errors import Problem

SUPPORTED_SOURCE_TYPES = ("cloudfiles", "delta")


def resolve_source(
    actions: list[dict[str, Any]], view: str, config_dir: Path, file: Path, field: str
) -> tuple[FileSource | DeltaSource | None, list[Problem]]:
    """The load behind `view`; `field` is the data_quality action's `source`, blamed when the chain breaks."""
    producers = [index for index, action in enumerate(actions) if action.get("target") == view]
    if len(producers) != 1 or actions[producers[0]].get("type") != "load":
        found = "no action" if not producers else ", ".join(_describe(actions[index]) for index in producers)
        message = f"view {view!r} must be the target of exactly one load action; produced by {found}"
        return None, [Problem(STRUCTURE, message, file=file, field=field)]
    load_field = child(child("actions", producers[0]), "source")
    return _load_source(actions[producers[0]].get("source"), config_dir, file, load_field)


def resolve_target_table(
    actions: list[dict[str, Any]], view: str, file: Path, field: str
) -> tuple[str | None, list[Problem]]:
    """The table written from `view`; `field` is the data_quality action's `target`, blamed when the chain breaks."""
    writers = [
        index
        for index, action in enumerate(actions)
        if action.get("type") == "write" and view in _views(action.get("source"))
    ]
    if len(writers) != 1:
        found = "none" if not writers else ", ".join(_describe(actions[index]) for index in writers)
        message = f"view {view!r} must be the source of exactly one write action; found {found}"
        return None, [Problem(STRUCTURE, message, file=file, field=field)]
    write_field = child(child("actions", writers[0]), "write_target")
    return _qualified_table(actions[writers[0]].get("write_target"), file, write_field)


def chain_actions(actions: list[dict[str, Any]], action: dict[str, Any]) -> list[dict[str, Any]]:
    """The load that produces the action's source view and the writes that take its target view."""
    return [
        other
        for other in actions
        if isinstance(other, dict)
        and (
            (other.get("type") == "load" and other.get("target") == action.get("source"))
            or (other.get("type") == "write" and action.get("target") in _views(other.get("source")))
        )
    ]


def _load_source(
    source: Any, config_dir: Path, file: Path, field: str
) -> tuple[FileSource | DeltaSource | None, list[Problem]]:
    if not isinstance(source, dict):
        return None, [Problem(STRUCTURE, "load source must be a mapping with a type", file=file, field=field)]
    options, problems = _options(source.get("options"), file, child(field, "options"))
    kind = source.get("type")
    if kind == "cloudfiles":
        model, source_problems = file_source(source, options, config_dir, file, field)
        return model, problems + source_problems
    if kind == "delta":
        table, table_problems = _qualified_table(source, file, field)
        problems += table_problems
        return (None, problems) if problems else (DeltaSource(table=table, options=options), [])
    supported = ", ".join(SUPPORTED_SOURCE_TYPES)
    return None, [
        Problem(
            STRUCTURE,
            f"load source type {kind!r} is not supported here (use {supported})",
            file=file,
            field=child(field, "type"),
        )
    ]


def _qualified_table(block: Any, file: Path, field: str) -> tuple[str | None, list[Problem]]:
    """`catalog` + `schema` + `table`, or `database: catalog.schema` + `table`, as one catalog.schema.table."""
    if not isinstance(block, dict):
        return None, [Problem(STRUCTURE, "must be a mapping naming the table", file=file, field=field)]
    namespaces = set()
    if "catalog" in block or "schema" in block:
        namespaces.add(f"{block.get('catalog')}.{block.get('schema')}")
    if "database" in block:
        namespaces.add(str(block["database"]))
    if len(namespaces) != 1:
        message = "name the table's namespace once: catalog + schema, or database: catalog.schema"
        return None, [Problem(STRUCTURE, message, file=file, field=field)]
    table = f"{namespaces.pop()}.{block.get('table')}"
    if not QUALIFIED_NAME.match(table):
        return None, [
            Problem(STRUCTURE, f"table must resolve to catalog.schema.table, got {table!r}", file=file, field=field)
        ]
    return table, []


def _options(options: Any, file: Path, field: str) -> tuple[dict[str, str], list[Problem]]:
    """Reader options as Spark takes them: strings, with YAML booleans spelled the way Spark spells them."""
    if options is None:
        return {}, []
    if not isinstance(options, dict):
        return {}, [Problem(STRUCTURE, "options must map option names to values", file=file, field=field)]
    spark_options, problems = {}, []
    for key, value in options.items():
        if isinstance(value, (dict, list)) or value is None:
            problems.append(Problem(STRUCTURE, "an option must be a single value", file=file, field=child(field, key)))
        else:
            spark_options[str(key)] = str(value).lower() if isinstance(value, bool) else str(value)
    return spark_options, problems


def _views(source: Any) -> list[Any]:
    # A write may name one source view or several.
    return source if isinstance(source, list) else [source]


def _describe(action: dict[str, Any]) -> str:
    return f"{action.get('type')} action {action.get('name')!r}"
