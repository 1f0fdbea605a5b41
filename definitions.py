"""Entry point for `dagster dev -w workspace.yaml`."""

from quarantine_assets.defs.definitions import load_definitions

defs = load_definitions()
