"""Values read from the data, as terminal text: never markup, never a control sequence, bounded in a table."""

from __future__ import annotations

import json
import re
from typing import Any

from rich.text import Text

# A table cell shows this much of a value; `show` prints a row's values whole.
CELL_CHARACTERS = 500
# Control characters (escape sequences, carriage returns, backspaces) and the invisible format characters
# (bidirectional overrides and marks, zero-width ones) would let a value rewrite what the terminal shows.
_INVISIBLE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufeff]")


def shown(value: object, limit: int | None = None) -> Text:
    """`value` as plain text, each control or format character written as its escape (`\\x1b`, `\\u202e`),
    cut after `limit` characters with a note of how many more there are."""
    text = "" if value is None else _readable(value)
    if limit is not None and len(text) > limit:
        text = f"{text[:limit]}… ({len(text) - limit} more characters)"
    return Text(_INVISIBLE.sub(lambda found: found[0].encode("unicode_escape").decode("ascii"), text))


def _readable(value: object) -> str:
    """A failed-rule list as `name: rule` entries, one after another; any other value as Python writes it."""
    if isinstance(value, list) and value and all(_is_failure(item) for item in value):
        return "; ".join(f"{item['name']}: {item['rule']}" for item in value)
    return str(value)


def _is_failure(item: object) -> bool:
    return hasattr(item, "asDict") and set(item.asDict()) == {"name", "rule"}


def json_line(record: dict[str, Any]) -> str:
    """One JSON object on one line, for another tool to read: Spark rows as objects, times and decimals as text,
    everything beyond ASCII escaped, so no value can control the terminal."""
    return json.dumps(_plain(record), default=str)


def _plain(value: object) -> object:
    """Spark's rows, which JSON would write as lists, as objects, at any depth."""
    if hasattr(value, "asDict"):
        value = value.asDict()
    if isinstance(value, dict):
        return {name: _plain(item) for name, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value
