"""Wall time of every DLQ table check on the demo, against asking Spark the same questions.

    make demo && .venv/bin/python benchmarks/table_checks.py

Runs the `dlq_table_checks` job (delta-rs only) through Dagster over the demo warehouse and reports
each check's own time and the whole job's; then, as the baseline, times Spark's DESCRIBE DETAIL of
the same tables, with and without the JVM start.
"""

from __future__ import annotations

import time

from dagster import DagsterInstance
from rich.console import Console
from rich.table import Table

from quarantine_assets.config.loader import load_project
from quarantine_assets.config.models import outbox_table
from quarantine_assets.defs.definitions import TABLE_CHECKS_JOB, build_definitions
from quarantine_assets.demo_run import QUIET_RUN
from quarantine_assets.engine.lake.tables import Warehouse
from quarantine_assets.settings import default_warehouse


def main() -> None:
    console = Console()
    project = load_project()
    warehouse = Warehouse(default_warehouse())
    job = build_definitions(project).resolve_job_def(TABLE_CHECKS_JOB)

    job.execute_in_process(
        run_config=QUIET_RUN, instance=DagsterInstance.ephemeral(), raise_on_error=False
    )  # warm imports
    started = time.perf_counter()
    result = job.execute_in_process(run_config=QUIET_RUN, instance=DagsterInstance.ephemeral(), raise_on_error=False)
    job_seconds = time.perf_counter() - started

    table = Table(title="DLQ table checks on the demo (delta-rs, no JVM)")
    for column in ("asset", "check", "passed", "ms"):
        table.add_column(column, justify="right" if column == "ms" else "left")
    evaluations = sorted(
        result.get_asset_check_evaluations(), key=lambda e: (e.asset_key.to_user_string(), e.check_name)
    )
    for evaluation in evaluations:
        table.add_row(
            evaluation.asset_key.to_user_string(),
            evaluation.check_name,
            str(evaluation.passed),
            f"{evaluation.metadata['elapsed_ms'].value:.1f}",
        )
    console.print(table)
    checks_ms = sum(e.metadata["elapsed_ms"].value for e in evaluations)

    from quarantine_assets.engine.spark.session import build_spark_session

    jvm_started = time.perf_counter()
    spark = build_spark_session()
    jvm_seconds = time.perf_counter() - jvm_started
    inbox_tables = sorted({a.quarantine.inbox_table for a in project.actions if a.quarantine})
    paths = [warehouse.path(t) for t in inbox_tables] + [warehouse.path(outbox_table(t)) for t in inbox_tables]
    for path in paths:  # warm
        spark.sql(f"DESCRIBE DETAIL delta.`{path}`").collect()
    started = time.perf_counter()
    for path in paths:
        spark.sql(f"DESCRIBE DETAIL delta.`{path}`").collect()
    spark_seconds = time.perf_counter() - started

    console.print(
        f"{len(evaluations)} checks: {checks_ms:.0f} ms in the checks themselves, {job_seconds:.2f} s for the whole "
        f"Dagster job.\nBaseline: Spark DESCRIBE DETAIL of the same {len(paths)} tables "
        f"{spark_seconds:.2f} s with a warm JVM, plus {jvm_seconds:.1f} s JVM start.\n"
        "Ratio (Spark incl. JVM start / whole check job): "
        f"{(spark_seconds + jvm_seconds) / job_seconds:.1f}x; checks alone vs Spark warm: "
        f"{spark_seconds * 1000 / checks_ms:.1f}x"
    )


if __name__ == "__main__":
    main()
