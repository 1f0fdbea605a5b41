VENV := .venv
STAMP := $(VENV)/.installed
# Runs started by the demo show up later in `make dev`.
DAGSTER_HOME_DIR := $(CURDIR)/.dagster_home

.PHONY: demo test test-fast dev

# Runs the demo end to end without the UI: tables, input files, one Dagster run, counts.
demo: $(STAMP) $(DAGSTER_HOME_DIR)/dagster.yaml
	DAGSTER_HOME=$(DAGSTER_HOME_DIR) $(VENV)/bin/quarantine-assets demo

# Two workers, each with its own JVM, a file at a time: one test's driver leaves the second core mostly idle.
test: $(STAMP)
	$(VENV)/bin/python -m pytest -n 2 --dist loadfile

# The tests that need no JVM (config, codes, SQL text, delta-rs reads): seconds.
test-fast: $(STAMP)
	$(VENV)/bin/python -m pytest -m "not jvm and not e2e"

# Runs and operator commands attach to one local Spark, started by the first of them (QUARANTINE_SPARK_REMOTE).
dev: $(STAMP) $(DAGSTER_HOME_DIR)/dagster.yaml
	DAGSTER_HOME=$(DAGSTER_HOME_DIR) QUARANTINE_SENSORS=running $(VENV)/bin/dagster dev -w workspace.yaml

# The instance's settings: one writer at a time per DLQ (concurrency pools).
$(DAGSTER_HOME_DIR)/dagster.yaml: dagster.yaml
	mkdir -p $(DAGSTER_HOME_DIR)
	cp $< $@

$(STAMP): pyproject.toml scripts/bootstrap.sh
	bash scripts/bootstrap.sh
	touch $@
