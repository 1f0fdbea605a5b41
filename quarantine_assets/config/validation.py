"""The rules a pipeline config must follow (the reference's and ours), each reported as a coded Problem.

Checks on one action run on substituted YAML before any model is built; checks across the project run on
each action's Footprint, so they still report when some other part of an action is broken.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from quarantine_assets.codes import (
    BAD_DLQ_TABLE,
    BAD_MAX_ATTEMPTS,
    BAD_MODE,
    BAD_READ_MODE,
    BAD_REDACTION,
    BAD_REJECT_LIMIT,
    BAD_RETENTION,
    BAD_SOURCE_TABLE,
    DLQ_IS_TARGET,
    DUPLICATE_ACTION_NAME,
    EXPECTATIONS_MISSING,
    QUARANTINE_BLOCK_MISSING,
    QUARANTINE_BLOCK_UNEXPECTED,
    RULE_UNPARSEABLE,
    SHARED_DLQ_SOURCE,
    STRUCTURE,
)
from quarantine_assets.config.models import (
    DEFAULT_MAX_ATTEMPTS,
    QUALIFIED_NAME,
    REDACTION_METHODS,
    Project,
    QuarantineSpec,
)
from quarantine_assets.config.yaml_files import child, is_text
from quarantine_assets.errors import Problem

MODES = ("dqe", "quarantine")


class Footprint(NamedTuple):
    """What cross-project rules need from one data_quality action, known even when the rest of it is broken."""

    file: Path
    field: str  # where the action sits in its file, e.g. `actions[1]`
    name: str
    quarantine: QuarantineSpec | None  # None outside quarantine mode or while its tables are invalid
    target_table: str | None  # None while its view chain is broken


def is_data_quality(action: dict[str, Any]) -> bool:
    return action.get("type") == "transform" and action.get("transform_type") == "data_quality"


def flowgroup_problems(flowgroup: dict[str, Any], file: Path) -> list[Problem]:
    """Keys every flowgroup needs, and the name and type every action needs."""
    problems = [
        Problem(STRUCTURE, f"flowgroup needs {key!r} as text", file=file, field=key)
        for key in ("pipeline", "flowgroup")
        if not is_text(flowgroup.get(key))
    ]
    actions = flowgroup.get("actions")
    if not isinstance(actions, list) or not actions:
        return problems + [
            Problem(STRUCTURE, "flowgroup needs 'actions' as a non-empty list", file=file, field="actions")
        ]
    for index, action in enumerate(actions):
        field = child("actions", index)
        if not isinstance(action, dict):
            problems.append(Problem(STRUCTURE, "an action must be a mapping", file=file, field=field))
            continue
        problems += [
            Problem(STRUCTURE, f"an action needs {key!r} as text", file=file, field=child(field, key))
            for key in ("name", "type")
            if not is_text(action.get(key))
        ]
    return problems


def data_quality_problems(action: dict[str, Any], file: Path, field: str) -> list[Problem]:
    """One data_quality action on its own: its views, its mode and its quarantine block."""
    problems = [
        Problem(STRUCTURE, f"a data_quality action needs {key!r} naming a view", file=file, field=child(field, key))
        for key in ("source", "target")
        if not is_text(action.get(key))
    ]
    if not is_text(action.get("expectations_file")):
        message = "a data_quality action needs expectations_file, a path relative to the config folder"
        problems.append(Problem(EXPECTATIONS_MISSING, message, file=file, field=child(field, "expectations_file")))
    if action.get("description") is not None and not isinstance(action["description"], str):
        problems.append(Problem(STRUCTURE, "description must be text", file=file, field=child(field, "description")))
    mode = action.get("mode", "dqe")
    if mode not in MODES:
        return problems + [
            Problem(BAD_MODE, f"mode must be dqe or quarantine, got {mode!r}", file=file, field=child(field, "mode"))
        ]
    quarantine = action.get("quarantine")
    if mode == "dqe":
        if quarantine is not None:
            message = "a quarantine block is only valid with mode: quarantine (mode is dqe or omitted)"
            problems.append(Problem(QUARANTINE_BLOCK_UNEXPECTED, message, file=file, field=child(field, "quarantine")))
        return problems
    read_mode = action.get("readMode", "stream")
    if read_mode != "stream":
        message = f"quarantine mode recycles fixed rows through a stream, so readMode must be stream, got {read_mode!r}"
        problems.append(Problem(BAD_READ_MODE, message, file=file, field=child(field, "readMode")))
    if not isinstance(quarantine, dict):
        message = "mode: quarantine needs a quarantine block with dlq_table and source_table"
        return problems + [Problem(QUARANTINE_BLOCK_MISSING, message, file=file, field=child(field, "quarantine"))]
    for key, code in (("dlq_table", BAD_DLQ_TABLE), ("source_table", BAD_SOURCE_TABLE)):
        value = quarantine.get(key)
        if not _is_qualified(value):
            message = f"quarantine.{key} must be a fully qualified catalog.schema.table, got {value!r}"
            problems.append(Problem(code, message, file=file, field=child(child(field, "quarantine"), key)))
    max_attempts = quarantine.get("max_attempts", DEFAULT_MAX_ATTEMPTS)
    if not _is_attempt_cap(max_attempts):
        message = f"quarantine.max_attempts must be a whole number of at least 1, got {max_attempts!r}"
        problems.append(
            Problem(BAD_MAX_ATTEMPTS, message, file=file, field=child(child(field, "quarantine"), "max_attempts"))
        )
    problems += _redaction_problems(quarantine, file, child(field, "quarantine"))
    retention_days = quarantine.get("retention_days")
    if retention_days is not None and not _is_count(retention_days):
        message = f"quarantine.retention_days must be a whole number of days, 0 or more, got {retention_days!r}"
        problems.append(
            Problem(BAD_RETENTION, message, file=file, field=child(child(field, "quarantine"), "retention_days"))
        )
    return problems + _reject_limit_problems(quarantine, file, child(field, "quarantine"))


def _reject_limit_problems(quarantine: dict[str, Any], file: Path, field: str) -> list[Problem]:
    problems = []
    ratio = quarantine.get("max_reject_ratio")
    if ratio is not None and not _is_ratio(ratio):
        message = f"quarantine.max_reject_ratio must be a number from 0 to 1, got {ratio!r}"
        problems.append(Problem(BAD_REJECT_LIMIT, message, file=file, field=child(field, "max_reject_ratio")))
    rows = quarantine.get("max_rejected_rows")
    if rows is not None and not _is_count(rows):
        message = f"quarantine.max_rejected_rows must be a whole number, 0 or more, got {rows!r}"
        problems.append(Problem(BAD_REJECT_LIMIT, message, file=file, field=child(field, "max_rejected_rows")))
    return problems


def _is_ratio(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 1


def quarantine_spec(action: dict[str, Any]) -> QuarantineSpec | None:
    """The action's DLQ slice, when it is in quarantine mode and both table names are valid."""
    block = action.get("quarantine")
    if action.get("mode") != "quarantine" or not isinstance(block, dict):
        return None
    if not (_is_qualified(block.get("dlq_table")) and _is_qualified(block.get("source_table"))):
        return None
    return QuarantineSpec(
        inbox_table=block["dlq_table"],
        source_table=block["source_table"],
        # An invalid cap is reported by data_quality_problems; the footprint only needs the tables.
        max_attempts=block["max_attempts"] if _is_attempt_cap(block.get("max_attempts")) else DEFAULT_MAX_ATTEMPTS,
        retention_days=block["retention_days"] if _is_count(block.get("retention_days")) else None,
        sensitive_columns=tuple(block.get("sensitive_columns") or ())
        if _is_column_list(block.get("sensitive_columns"))
        else (),
        redaction=block.get("redaction") if block.get("redaction") in REDACTION_METHODS else REDACTION_METHODS[0],
        max_reject_ratio=block["max_reject_ratio"] if _is_ratio(block.get("max_reject_ratio")) else None,
        max_rejected_rows=block["max_rejected_rows"] if _is_count(block.get("max_rejected_rows")) else None,
    )


def _is_attempt_cap(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _redaction_problems(quarantine: dict[str, Any], file: Path, field: str) -> list[Problem]:
    problems = []
    columns = quarantine.get("sensitive_columns")
    if columns is not None and not _is_column_list(columns):
        message = f"quarantine.sensitive_columns must be a list of column names, got {columns!r}"
        problems.append(Problem(BAD_REDACTION, message, file=file, field=child(field, "sensitive_columns")))
    method = quarantine.get("redaction", REDACTION_METHODS[0])
    if method not in REDACTION_METHODS:
        message = f"quarantine.redaction must be one of {list(REDACTION_METHODS)}, got {method!r}"
        problems.append(Problem(BAD_REDACTION, message, file=file, field=child(field, "redaction")))
    return problems


def _is_column_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(name, str) and name.strip() for name in value)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def project_problems(actions: list[Footprint]) -> list[Problem]:
    """Rules that span files: unique action names, unique DLQ slices, DLQs apart from validated tables."""
    return _duplicate_names(actions) + _shared_dlq_slices(actions) + _dlq_is_target(actions)


def rule_expression_problems(project: Project, spark: Any) -> list[Problem]:
    """Parse (never run) every rule with Spark's own SQL parser; each file's rule is reported once. A rule
    is planned over no columns, so a column it names is not found, which is not this check's concern."""
    from pyspark.errors import AnalysisException, ParseException  # imported here: loading config needs no Spark

    no_rows = spark.range(0)
    rules = {(action.expectations_file, rule.name): rule for action in project.actions for rule in action.rules}
    problems = []
    for (file, name), rule in rules.items():
        try:
            no_rows.selectExpr(rule.expression).schema
        except ParseException as error:
            reason = str(error).strip().splitlines()[0]
            message = f"rule {name!r}: Spark cannot parse {rule.expression!r}: {reason}"
            problems.append(Problem(RULE_UNPARSEABLE, message, file=file, field=name))
        except AnalysisException:
            pass
    return problems


def _duplicate_names(actions: list[Footprint]) -> list[Problem]:
    first_by_name: dict[str, Footprint] = {}
    problems = []
    for action in actions:
        first = first_by_name.setdefault(action.name, action)
        if first is not action:
            message = (
                f"data_quality action name {action.name!r} is used in {first.file} and {action.file}; "
                "it is the asset key, so it must be unique across the project"
            )
            problems.append(
                Problem(DUPLICATE_ACTION_NAME, message, file=action.file, field=child(action.field, "name"))
            )
    return problems


def _shared_dlq_slices(actions: list[Footprint]) -> list[Problem]:
    first_by_slice: dict[tuple[str, str], Footprint] = {}
    problems = []
    for action in actions:
        spec = action.quarantine
        if spec is None:
            continue
        first = first_by_slice.setdefault((spec.inbox_table, spec.source_table), action)
        if first is not action:
            message = (
                f"actions {first.name!r} ({first.file}) and {action.name!r} ({action.file}) both quarantine "
                f"source_table {spec.source_table!r} into DLQ {spec.inbox_table!r}; their MERGEs would conflict and "
                "each would recycle the other's fixed rows. source_table must be unique per action sharing a DLQ "
                "(the reference's LHP-VAL-069, checked here across the whole project)"
            )
            field = child(child(action.field, "quarantine"), "source_table")
            problems.append(Problem(SHARED_DLQ_SOURCE, message, file=action.file, field=field))
    return problems


def _dlq_is_target(actions: list[Footprint]) -> list[Problem]:
    writers = {action.target_table: action for action in actions if action.target_table}
    problems = []
    for action in actions:
        spec = action.quarantine
        if spec is None:
            continue
        for table in (spec.inbox_table, spec.outbox_table):
            writer = writers.get(table)
            if writer is not None:
                message = (
                    f"DLQ table {table!r} is also the validated table written by action {writer.name!r} ({writer.file})"
                )
                field = child(child(action.field, "quarantine"), "dlq_table")
                problems.append(Problem(DLQ_IS_TARGET, message, file=action.file, field=field))
    return problems


def _is_qualified(table: Any) -> bool:
    return isinstance(table, str) and QUALIFIED_NAME.match(table) is not None
