"""Dagster: turns the typed pipeline config into assets, checks, sensors and jobs. No Spark logic here."""

from quarantine_assets.defs.definitions import build_definitions, load_definitions

__all__ = ["build_definitions", "load_definitions"]
