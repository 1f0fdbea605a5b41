"""Every key of the reference's project, flowgroup and substitutions files is used here, or named in a
coded warning that says why not: a config written for the reference never loses a setting silently."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from quarantine_assets.codes import REFERENCE_KEY_IGNORED
from quarantine_assets.config.yaml_files import child
from quarantine_assets.errors import Problem

DATABRICKS_ONLY = "it configures a Databricks service that this project does not run on"
GENERATION = "it steers the reference's code generation, and nothing is generated here"

# lhp.yaml: `name` ... `created_date` describe the project; `include` and `operational_metadata` are used.
PROJECT_KEYS = {"name", "version", "description", "author", "created_date", "include", "operational_metadata"}
PROJECT_KEYS_IGNORED = {
    "required_lhp_version": "it pins the reference's own version",
    "blueprint_include": GENERATION,
    "instance_include": GENERATION,
    "apply_formatting": GENERATION,
    "wheel": GENERATION,
    "sandbox": GENERATION,
    "event_log": DATABRICKS_ONLY,
    "monitoring": DATABRICKS_ONLY,
    "uc_tagging": DATABRICKS_ONLY,
    "test_reporting": "test actions are not run here",
}
FLOWGROUP_KEYS = {"pipeline", "flowgroup", "actions", "variables", "operational_metadata"}
FLOWGROUP_KEYS_IGNORED = {
    "job_name": "runs are the Dagster jobs split_all and recycle_all",
    "presets": "presets are not expanded: write their settings into the flowgroup",
    "use_template": "templates are not expanded: the template's actions do not run",
    "template_parameters": "templates are not expanded: the template's actions do not run",
    "flowgroups": "several flowgroups in one file are not read: give each its own file",
}
ACTION_KEYS = {
    "load": {"name", "type", "source", "target", "readMode", "description", "operational_metadata"},
    "transform": {
        "name",
        "type",
        "transform_type",
        "source",
        "target",
        "readMode",
        "description",
        "expectations_file",
        "mode",
        "quarantine",
        "operational_metadata",
    },
    "write": {"name", "type", "source", "write_target", "readMode", "description", "once"},
}
SOURCE_KEYS = {
    "cloudfiles": {"type", "path", "format", "options", "schema", "schema_file"},
    "delta": {"type", "catalog", "schema", "database", "table", "options"},
}
WRITE_TARGET_KEYS = {"type", "catalog", "schema", "database", "table", "create_table"}
QUARANTINE_KEYS = {
    "dlq_table",
    "source_table",
    "max_attempts",
    "retention_days",
    "sensitive_columns",
    "redaction",
    "max_reject_ratio",
    "max_rejected_rows",
}
WRITE_TARGET_INSTEAD = "the validated table is created by the first append with Delta's defaults"
SUBSTITUTION_KEYS_IGNORED = {"prefix_suffix_rules": GENERATION}


def project_file_warnings(data: dict[str, Any], file: Path) -> list[Problem]:
    return _unused(data, "", PROJECT_KEYS, PROJECT_KEYS_IGNORED, file)


def flowgroup_warnings(flowgroup: dict[str, Any], file: Path) -> list[Problem]:
    """The flowgroup's own keys, then each action's that this project runs (load, data_quality, write)."""
    warnings = _unused(flowgroup, "", FLOWGROUP_KEYS, FLOWGROUP_KEYS_IGNORED, file)
    actions = flowgroup.get("actions")
    # Keys of a flowgroup of the wrong shape are not looked at: the shape is refused with its own code.
    for index, action in enumerate(actions if isinstance(actions, list) else []):
        kind = action.get("type") if isinstance(action, dict) else None
        if not isinstance(kind, str) or kind not in ACTION_KEYS:
            continue
        if kind == "transform" and action.get("transform_type") != "data_quality":
            continue
        field = child("actions", index)
        warnings += _unused(action, field, ACTION_KEYS[kind], {}, file)
        source = action.get("source")
        if (
            kind == "load"
            and isinstance(source, dict)
            and isinstance(source.get("type"), str)
            and source["type"] in SOURCE_KEYS
        ):
            warnings += _unused(source, child(field, "source"), SOURCE_KEYS[source["type"]], {}, file)
        if isinstance(action.get("write_target"), dict):
            target = child(field, "write_target")
            warnings += _unused(action["write_target"], target, WRITE_TARGET_KEYS, {}, file, WRITE_TARGET_INSTEAD)
        if isinstance(action.get("quarantine"), dict):
            warnings += _unused(action["quarantine"], child(field, "quarantine"), QUARANTINE_KEYS, {}, file)
    return warnings


def substitutions_warnings(data: dict[str, Any], file: Path) -> list[Problem]:
    """Other top-level keys are the blocks of other environments."""
    return _unused(data, "", set(data) - set(SUBSTITUTION_KEYS_IGNORED), SUBSTITUTION_KEYS_IGNORED, file)


def _unused(
    block: dict[str, Any],
    field: str,
    used: set[str],
    ignored: dict[str, str],
    file: Path,
    otherwise: str = "this project does not know it",
) -> list[Problem]:
    return [
        Problem(
            REFERENCE_KEY_IGNORED,
            f"{key!r} is not used here: {ignored.get(key, otherwise)}",
            file=file,
            field=child(field, key),
            severity="warning",
        )
        for key in block
        if key not in used
    ]
