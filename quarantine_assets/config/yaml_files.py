"""Reading YAML into plain data, and naming places inside it as dotted field paths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from quarantine_assets.codes import YAML_UNREADABLE
from quarantine_assets.errors import Problem

_SHAPE_NAMES = {dict: "a mapping", list: "a list", type(None): "empty"}


def read_yaml(path: Path, *, top_level: tuple[type, ...] = (dict,)) -> tuple[Any, Problem | None]:
    """Parse one YAML file; a file that does not parse, or has the wrong top-level shape, is a problem."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        return None, Problem(YAML_UNREADABLE, f"YAML does not parse: {_describe(error)}", file=path)
    except (OSError, UnicodeDecodeError) as error:
        return None, Problem(YAML_UNREADABLE, f"cannot read file: {error}", file=path)
    if not isinstance(data, top_level):
        expected = " or ".join(_SHAPE_NAMES[kind] for kind in top_level)
        found = _SHAPE_NAMES.get(type(data), type(data).__name__)
        return None, Problem(YAML_UNREADABLE, f"top level must be {expected}, found {found}", file=path)
    return data, None


def child(field: str, key: object) -> str:
    """`actions[1]` + `quarantine` -> `actions[1].quarantine`; integer keys become list indexes."""
    if isinstance(key, int) and not isinstance(key, bool):
        return f"{field}[{key}]"
    return f"{field}.{key}" if field else str(key)


def is_text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _describe(error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None)
    reason = getattr(error, "problem", None) or str(error)
    return f"{reason} at line {mark.line + 1}, column {mark.column + 1}" if mark else reason
