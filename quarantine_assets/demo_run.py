"""The demo end to end without the UI: tables, input, one Dagster run, then what landed where."""

from __future__ import annotations

import os
import time
from pathlib import Path
from urllib.parse import urlparse

from dagster import DagsterInstance
from rich.console import Console
from rich.table import Table

from quarantine_assets import codes
from quarantine_assets.config.models import Project
from quarantine_assets.defs.definitions import SPLIT_JOB, build_definitions
from quarantine_assets.defs.resources import default_resources
from quarantine_assets.demo import generate_batch, next_batch_number
from quarantine_assets.engine.lake.dlq_schema import SOURCE_TABLE
from quarantine_assets.engine.lake.tables import Warehouse, is_url
from quarantine_assets.engine.spark.dlq_tables import create_dlq_tables
from quarantine_assets.errors import QuarantineError

LANDING = "_landing"
QUIET_RUN = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def _local_folder(root: str) -> Path:
    """The demo writes its input files itself, so only where plain file writes reach."""
    url = urlparse(root)
    if url.scheme == "file":
        return Path(url.path)
    if is_url(root):
        raise QuarantineError(
            codes.DEMO_NEEDS_LOCAL_WAREHOUSE,
            f"the demo generates its input files on local disk, not under {root}; "
            "run it with a local warehouse (--warehouse <folder>)",
            field="warehouse",
        )
    return Path(root)


def _instance() -> DagsterInstance:
    """With DAGSTER_HOME set, the run is kept and shows up later in `dagster dev`."""
    home = os.environ.get("DAGSTER_HOME")
    if not home:
        return DagsterInstance.ephemeral()
    Path(home).mkdir(parents=True, exist_ok=True)
    return DagsterInstance.get()


def run_demo(console: Console, batches: int, project: Project, warehouse_root: str) -> None:
    started = time.perf_counter()
    resources = default_resources(warehouse_root)
    warehouse: Warehouse = resources["warehouse"].warehouse
    landing = _local_folder(warehouse.root) / LANDING
    # The run's steps attach to the same Spark through the resource.
    spark = resources["spark"].spark_session(warehouse)
    jvm_seconds = time.perf_counter() - started
    for inbox_table in project.inbox_tables:
        create_dlq_tables(spark, warehouse, inbox_table)
    for _ in range(batches):
        generated = generate_batch(landing, next_batch_number(landing))
        console.print(
            f"generated {generated.orders_file.name} ({generated.orders} rows), "
            f"{generated.customers_file.name} ({generated.customers} rows)"
        )
    run_started = time.perf_counter()
    result = (
        build_definitions(project, resources)
        .resolve_job_def(SPLIT_JOB)
        .execute_in_process(run_config=QUIET_RUN, instance=_instance(), raise_on_error=False)
    )
    run_seconds = time.perf_counter() - run_started
    if not result.success:
        failures = [
            event.step_failure_data.error.message.strip() for event in result.all_events if event.is_step_failure
        ]
        raise QuarantineError(codes.RUN_FAILED, f"demo run {result.run_id} failed: {'; '.join(failures)}")

    table = Table(title=f"run {result.run_id}")
    for column in ("asset", "table", "location", "rows"):
        table.add_column(column, overflow="fold")
    slice_rows = {
        (inbox_table, row[SOURCE_TABLE]): row["count"]
        for inbox_table in project.inbox_tables
        for row in spark.read.format("delta").load(warehouse.path(inbox_table)).groupBy(SOURCE_TABLE).count().collect()
    }
    for action in project.actions:
        validated_path = warehouse.path(action.target_table)
        validated_rows = spark.read.format("delta").load(validated_path).count()
        table.add_row(f"{action.key}/validated", action.target_table, validated_path, str(validated_rows))
        if action.quarantine is not None:
            rows = slice_rows.get((action.quarantine.inbox_table, action.quarantine.source_table), 0)
            inbox_path = warehouse.path(action.quarantine.inbox_table)
            table.add_row(f"{action.key}/inbox", action.quarantine.inbox_table, inbox_path, str(rows))
    console.print(table)
    total = time.perf_counter() - started
    console.print(f"Spark attached in {jvm_seconds:.1f}s, Dagster run {run_seconds:.1f}s, total {total:.1f}s")
