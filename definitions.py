"""Entry point for `dagster dev -w workspace.yaml`."""

from quarantine_assets.defs import build_definitions

defs = build_definitions()
