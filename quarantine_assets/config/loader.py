"""Pipeline YAML to a typed Project. Every problem in every file is collected before the config is refused.

Layout (the reference's): `<config_dir>/pipelines/**/*.yaml` flowgroups, `expectations/`, and
`substitutions/<env>.yaml`. An `lhp.yaml` project file may sit in `<config_dir>`; nothing here needs it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path
from typing import Any

from quarantine_assets.codes import STRUCTURE
from quarantine_assets.config.chain import chain_actions, resolve_source, resolve_target_table
from quarantine_assets.config.expectations import load_expectations
from quarantine_assets.config.models import DataQualityAction, Project
from quarantine_assets.config.operational_metadata import defined_columns, selected_columns
from quarantine_assets.config.reference_keys import flowgroup_warnings, project_file_warnings
from quarantine_assets.config.substitutions import Substitutions, apply_variables, load_substitutions
from quarantine_assets.config.validation import (
    Footprint,
    data_quality_problems,
    flowgroup_problems,
    is_data_quality,
    project_problems,
    quarantine_spec,
)
from quarantine_assets.config.yaml_files import child, is_text, read_yaml
from quarantine_assets.errors import ConfigError, Problem
from quarantine_assets.settings import default_config_dir, default_env, default_warehouse

_FLOWGROUP_SUFFIXES = (".yaml", ".yml")
PROJECT_FILE = "lhp.yaml"
_VERSION_LENGTH = 12


def load_project(
    config_dir: Path | None = None, env: str | None = None, warehouse: str | os.PathLike | None = None
) -> Project:
    """Load and validate every flowgroup; raise ConfigError listing all errors, keep warnings on the Project."""
    config_dir = config_dir or default_config_dir()
    try:
        config_dir.is_dir()
    except OSError as error:  # a name the file system cannot take (too long, say): every read below would fail
        raise ConfigError(
            [Problem(STRUCTURE, f"the configs folder cannot be read: {error.strerror}", file=config_dir)]
        ) from None
    env = env or default_env()
    substitutions, problems = load_substitutions(config_dir, env, warehouse or default_warehouse())
    project_file, project_problems_found = _project_file(config_dir)
    problems += project_problems_found
    metadata_columns, metadata_problems = defined_columns(
        project_file.get("operational_metadata"), config_dir / PROJECT_FILE
    )
    problems += metadata_problems
    files, file_problems = _flowgroup_files(config_dir, project_file.get("include"))
    problems += file_problems
    actions: list[DataQualityAction] = []
    footprints: list[Footprint] = []
    for file in files:
        file_actions, file_footprints, flowgroup_problems_found = _load_flowgroup(
            file, config_dir, substitutions, metadata_columns
        )
        actions += file_actions
        footprints += file_footprints
        problems += flowgroup_problems_found
    problems += project_problems(footprints)
    # An expectations file shared by several actions would otherwise report each problem once per action.
    problems = [dataclasses.replace(p, message=substitutions.redact(p.message)) for p in dict.fromkeys(problems)]
    if any(problem.severity == "error" for problem in problems):
        raise ConfigError(problems)
    return Project(
        config_dir=config_dir,
        env=env,
        actions=tuple(actions),
        warnings=tuple(problems),
    )


def _project_file(config_dir: Path) -> tuple[dict[str, Any], list[Problem]]:
    """The reference's `lhp.yaml`, when the folder has one: its include globs and operational metadata."""
    file = config_dir / PROJECT_FILE
    if not file.exists():
        return {}, []
    data, problem = read_yaml(file)
    if problem:
        return {}, [problem]
    include = data.get("include")
    if include is not None and not (isinstance(include, list) and all(is_text(glob) for glob in include)):
        return data, [Problem(STRUCTURE, "include must be a list of glob patterns", file=file, field="include")]
    return data, project_file_warnings(data, file)


def _flowgroup_files(config_dir: Path, include: list[str] | None) -> tuple[list[Path], list[Problem]]:
    """Every YAML file under pipelines/, or those the project file's `include` globs match there."""
    pipelines = config_dir / "pipelines"
    if not pipelines.is_dir():
        return [], [Problem(STRUCTURE, f"no pipelines/ folder of flowgroups in {config_dir}", file=pipelines)]
    candidates = (path for glob in include for path in pipelines.glob(glob)) if include else pipelines.rglob("*")
    files = sorted({path for path in candidates if path.suffix in _FLOWGROUP_SUFFIXES and path.is_file()})
    return files, []


def _load_flowgroup(
    file: Path, config_dir: Path, substitutions: Substitutions, metadata_columns: dict
) -> tuple[list[DataQualityAction], list[Footprint], list[Problem]]:
    raw, problem = read_yaml(file)
    if problem:
        return [], [], [problem]
    with_variables, problems = apply_variables(raw, file)
    flowgroup, token_problems = substitutions.apply(with_variables, file=file)
    problems += token_problems + flowgroup_warnings(flowgroup, file)
    structure_problems = flowgroup_problems(flowgroup, file)
    if structure_problems:
        return [], [], problems + structure_problems
    built, footprints = [], []
    for index, action in enumerate(flowgroup["actions"]):
        if not is_data_quality(action):
            continue  # other action types are allowed; this project runs only data_quality ones
        field = child("actions", index)
        model, footprint, action_problems = _data_quality_action(
            flowgroup, action, file, field, config_dir, metadata_columns
        )
        problems += action_problems
        footprints.append(footprint)
        if model is not None:
            built.append(model)
    return built, footprints, problems


def _data_quality_action(
    flowgroup: dict[str, Any],
    action: dict[str, Any],
    file: Path,
    field: str,
    config_dir: Path,
    metadata_columns: dict,
) -> tuple[DataQualityAction | None, Footprint, list[Problem]]:
    """The typed action (None while anything about it is wrong) and its footprint for cross-project rules."""
    problems = data_quality_problems(action, file, field)
    actions = flowgroup["actions"]
    source = target_table = None
    if is_text(action.get("source")):
        source, chain_problems = resolve_source(actions, action["source"], config_dir, file, child(field, "source"))
        problems += chain_problems
    if is_text(action.get("target")):
        target_table, chain_problems = resolve_target_table(actions, action["target"], file, child(field, "target"))
        problems += chain_problems
    mode = action.get("mode", "dqe")
    rules, expectations_file = (), None
    if is_text(action.get("expectations_file")):
        expectations_file = config_dir / action["expectations_file"]
        rules, rule_problems = load_expectations(
            expectations_file, mode, cited_in=file, cited_field=child(field, "expectations_file")
        )
        problems += rule_problems
    selections = [flowgroup.get("operational_metadata")] + [
        chained.get("operational_metadata") for chained in chain_actions(actions, action)
    ]
    names = {"pipeline_name": str(flowgroup["pipeline"]), "flowgroup_name": str(flowgroup["flowgroup"])}
    metadata, metadata_problems = selected_columns(metadata_columns, selections, names, file, field)
    problems += metadata_problems
    quarantine = quarantine_spec(action)
    footprint = Footprint(file, field, action["name"], quarantine, target_table)
    if any(problem.severity == "error" for problem in problems):
        return None, footprint, problems
    model = DataQualityAction(
        pipeline=flowgroup["pipeline"],
        flowgroup=flowgroup["flowgroup"],
        name=action["name"],
        config_file=file,
        source=source,
        target_table=target_table,
        expectations_file=expectations_file,
        rules=rules,
        mode=mode,
        quarantine=quarantine,
        description=action.get("description"),
        operational_metadata=metadata,
        config_version=_config_version(file, expectations_file),
    )
    return model, footprint, problems


def _config_version(flowgroup_file: Path, expectations_file: Path) -> str:
    """Changes whenever either file changes, so DLQ rows say which config judged them."""
    digest = hashlib.sha256(flowgroup_file.read_bytes() + expectations_file.read_bytes())
    return digest.hexdigest()[:_VERSION_LENGTH]
