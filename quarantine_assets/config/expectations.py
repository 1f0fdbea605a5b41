"""Expectations files, in both of the reference's shapes, to typed rules.

Mapping shape: `<constraint>: {action: drop|warn|fail, name: <rule name>}`.
List shape: `[{name, expression | constraint, failureAction | type | action, message}]`,
optionally wrapped as `{expectations: [...], version: ..., table: ...}`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quarantine_assets.codes import (
    ACTION_COERCED_TO_DROP,
    EXPECTATION_MALFORMED,
    EXPECTATIONS_EMPTY,
    EXPECTATIONS_MISSING,
    RULE_NAME_NOT_CODE_LIKE,
)
from quarantine_assets.config.models import Rule
from quarantine_assets.config.yaml_files import child, is_text, read_yaml
from quarantine_assets.errors import Problem

# The reference's list shape also names actions by their DLT decorator.
_ACTIONS = {
    "drop": "drop",
    "warn": "warn",
    "fail": "fail",
    "expect": "warn",
    "expect_or_drop": "drop",
    "expect_or_fail": "fail",
}
# A rule's name is the code of its failures (`_dlq_errors.code`): grep- and alert-friendly.
CODE_LIKE = re.compile(r"[a-z][a-z0-9_]*")
_ACTION_KEYS = ("failureAction", "type", "action")  # the first one present wins, as in the reference
_DEFAULT_ACTION = "warn"  # the reference's default: DLT's plain `expect`


@dataclass(frozen=True)
class _Entry:
    name: str
    expression: str
    action: str
    action_key: str | None  # None when defaulted: only an explicit warn/fail deserves a coercion warning
    message: str | None
    field: str


def _names_a_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # a name the file system cannot take (too long, say) names no file
        return False


def load_expectations(
    path: Path, mode: str, *, cited_in: Path, cited_field: str
) -> tuple[tuple[Rule, ...], list[Problem]]:
    """Rules from one expectations file. `cited_in`/`cited_field` locate the reference when the file is missing.

    In quarantine mode every failing row goes to the DLQ, so `warn` and `fail` act as `drop`.
    """
    if not _names_a_file(path):
        return (), [
            Problem(EXPECTATIONS_MISSING, f"expectations file not found: {path}", file=cited_in, field=cited_field)
        ]
    data, problem = read_yaml(path, top_level=(dict, list, type(None)))
    if problem:
        return (), [problem]
    entries, problems = _entries(data, path)
    if not entries and not problems:
        problems.append(
            Problem(EXPECTATIONS_EMPTY, "expectations file holds no rules; at least one is required", file=path)
        )
    problems += _duplicate_names(entries, path)
    problems += [
        Problem(
            RULE_NAME_NOT_CODE_LIKE,
            f"rule {entry.name!r} names its failures in every DLQ row and alert: a code such as "
            f"{_code_like(entry.name)!r} is easier to grep and to alert on",
            file=path,
            field=entry.field,
            severity="warning",
        )
        for entry in entries
        if not CODE_LIKE.fullmatch(entry.name)
    ]
    rules = []
    for entry in entries:
        action = entry.action
        if mode == "quarantine" and action != "drop":
            if entry.action_key:
                problems.append(
                    Problem(
                        ACTION_COERCED_TO_DROP,
                        f"rule {entry.name!r} says {action!r}, but quarantine mode sends every failing row to the DLQ, "
                        "so it acts as 'drop'",
                        file=path,
                        field=child(entry.field, entry.action_key),
                        severity="warning",
                    )
                )
            action = "drop"
        rules.append(Rule(name=entry.name, expression=entry.expression, failure_action=action, message=entry.message))
    return tuple(rules), problems


def _code_like(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") or "rule"


def _entries(data: Any, path: Path) -> tuple[list[_Entry], list[Problem]]:
    if isinstance(data, dict) and "expectations" in data:
        if not isinstance(data["expectations"], list):
            return [], [_malformed("'expectations' must be a list of rules", path, "expectations")]
        return _list_shape(data["expectations"], path, "expectations")
    if isinstance(data, list):
        return _list_shape(data, path, "")
    return _mapping_shape(data or {}, path)


def _list_shape(items: list[Any], path: Path, field: str) -> tuple[list[_Entry], list[Problem]]:
    entries, problems = [], []
    for index, item in enumerate(items):
        item_field = child(field, index)
        if not isinstance(item, dict):
            problems.append(_malformed("a rule must be a mapping", path, item_field))
            continue
        expression_key = "constraint" if "constraint" in item else "expression"
        entry, entry_problems = _entry(item, item.get(expression_key), expression_key, path, item_field)
        problems += entry_problems
        if entry:
            entries.append(entry)
    return entries, problems


def _mapping_shape(items: dict[Any, Any], path: Path) -> tuple[list[_Entry], list[Problem]]:
    entries, problems = [], []
    for constraint, settings in items.items():
        entry_field = f"[{constraint!r}]"
        if not isinstance(settings, dict):
            problems.append(_malformed("a rule must map to {name, action}", path, entry_field))
            continue
        entry, entry_problems = _entry(settings, constraint, None, path, entry_field)
        problems += entry_problems
        if entry:
            entries.append(entry)
    return entries, problems


def _entry(
    settings: dict[str, Any], expression: Any, expression_key: str | None, path: Path, field: str
) -> tuple[_Entry | None, list[Problem]]:
    problems = []
    name = settings.get("name")
    if not is_text(name):
        problems.append(_malformed("a rule needs a name", path, child(field, "name")))
    if not is_text(expression):
        where = child(field, expression_key) if expression_key else field
        problems.append(_malformed("a rule needs a SQL expression (expression or constraint)", path, where))
    message = settings.get("message")
    if message is not None and not isinstance(message, str):
        problems.append(_malformed("message must be text", path, child(field, "message")))
    action_key = next((key for key in _ACTION_KEYS if key in settings), None)
    written = settings.get(action_key) if action_key else _DEFAULT_ACTION
    action = _ACTIONS.get(written.lower()) if isinstance(written, str) else None
    if action is None:
        problems.append(
            _malformed(f"action {written!r} is not one of drop, warn, fail", path, child(field, action_key))
        )
    if problems:
        return None, problems
    return _Entry(name, expression, action, action_key, message, field), []


def _duplicate_names(entries: list[_Entry], path: Path) -> list[Problem]:
    seen: set[str] = set()
    problems = []
    for entry in entries:
        if entry.name in seen:
            problems.append(
                _malformed(
                    f"rule name {entry.name!r} is used twice; DLQ rows name the rules they failed",
                    path,
                    child(entry.field, "name"),
                )
            )
        seen.add(entry.name)
    return problems


def _malformed(message: str, path: Path, field: str) -> Problem:
    return Problem(EXPECTATION_MALFORMED, message, file=path, field=field)
