"""Assembles the Definitions from the project config; nobody keeps a hand-written asset list."""

from __future__ import annotations

from dagster import AssetSelection, Definitions, define_asset_job, in_process_executor

from quarantine_assets.config.loader import load_project
from quarantine_assets.config.models import Project
from quarantine_assets.defs.assets import split_asset
from quarantine_assets.defs.resources import default_resources

SPLIT_JOB = "split_all"


def build_definitions(project: Project | None = None, resources: dict | None = None) -> Definitions:
    project = project or load_project()
    split_assets = [split_asset(action) for action in project.actions]
    return Definitions(
        assets=split_assets,
        jobs=[define_asset_job(SPLIT_JOB, selection=AssetSelection.assets(*split_assets))],
        resources=resources or default_resources(),
        # One run, one JVM: Spark sessions cannot be shared across executor processes.
        executor=in_process_executor,
    )
