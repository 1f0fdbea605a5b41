VENV := .venv
STAMP := $(VENV)/.installed

export DAGSTER_HOME := $(CURDIR)/.dagster_home

.PHONY: demo test dev

# Runs the demo end to end without the UI: tables, input files, one Dagster run, counts.
demo: $(STAMP)
	mkdir -p $(DAGSTER_HOME)
	$(VENV)/bin/quarantine-assets demo

test: $(STAMP)
	$(VENV)/bin/python -m pytest

dev: $(STAMP)
	mkdir -p $(DAGSTER_HOME)
	QUARANTINE_SENSORS=running $(VENV)/bin/dagster dev -w workspace.yaml

$(STAMP): pyproject.toml scripts/bootstrap.sh
	bash scripts/bootstrap.sh
	touch $@
