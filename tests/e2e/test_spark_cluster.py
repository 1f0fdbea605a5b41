"""The demo and the recycle path on a Spark standalone cluster produce the same tables as local mode.

On the cluster, both steps run as a user types them, `quarantine-assets demo` and `dagster job execute`
of the recycle job, attached to a Spark Connect server in front of the cluster (`spark-server` with
QUARANTINE_SPARK_MASTER pointing at the master, QUARANTINE_SPARK_REMOTE at the server), as a deployment
points its code location at a cluster's Connect endpoint. In local mode the same Dagster jobs run in the
test's own warm session. The operator's fix between them is not under test here and
is made in-process in both.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dagster_dev import free_port
from pyspark.sql import functions as F
from rich.console import Console
from spark_cluster import LOOPBACK, spark_standalone

from quarantine_assets.config.loader import load_project
from quarantine_assets.defs.definitions import RECYCLE_JOB, build_definitions
from quarantine_assets.defs.resources import default_resources
from quarantine_assets.demo_run import run_demo
from quarantine_assets.engine.lake.tables import Warehouse
from quarantine_assets.engine.spark.operator import fix_rows
from quarantine_assets.settings import REPO_ROOT, SPARK_REMOTE_VARIABLE

pytestmark = pytest.mark.e2e

BIN = Path(sys.executable).parent
ARTIFACTS = REPO_ROOT / "test-artifacts" / "spark-cluster"
FIXED_ORDER_ID = 900_000_001
# What a run stamps with its own time, run id or key; everything else must be equal.
PER_RUN_COLUMNS = {
    "_dlq_sk",
    "_dlq_timestamp",
    "_dlq_run_id",
    "_dlq_resolved_at",
    "_dlq_updated_at",
    "_dlq_updated_by",
    "_dlq_recycled_at",
    "_dlq_fixed_at",
    "_dlq_arrived_at",  # each run generates its own input files
}
# A two-core cluster: Spark's cluster-sized defaults would turn each small MERGE into hundreds of tasks.
SMALL_CLUSTER = "--conf spark.sql.shuffle.partitions=4 --conf spark.databricks.delta.snapshotPartitions=2 pyspark-shell"


def run(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=REPO_ROOT, capture_output=True, text=True)
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    return time.perf_counter() - started


def rows(spark, warehouse: Path, table: str) -> list[str]:
    """The table's rows as sorted JSON, per-run columns left out and the warehouse root made neutral."""
    frame = spark.read.format("delta").load(str(Warehouse(warehouse).path(table)))
    frame = frame.select([column for column in frame.columns if column not in PER_RUN_COLUMNS])
    if "_row_data" in frame.columns:
        frame = frame.withColumn("_row_data", F.to_json("_row_data"))
    as_json = (json.dumps(row.asDict(recursive=True), default=str) for row in frame.collect())
    return sorted(text.replace(str(warehouse), "<warehouse>") for text in as_json)


def fix_first_null_order_id(spark, warehouse: Path) -> None:
    inbox = spark.read.format("delta").load(str(Warehouse(warehouse).path("demo.ops.dlq")))
    quarantined = inbox.where(
        "_dlq_source_table = 'demo.bronze.orders' AND size(_dlq_failed_rules) = 1 "
        "AND _dlq_failed_rules[0].name = 'valid_order_id'"
    )
    key = quarantined.orderBy(F.to_json("_row_data")).first()["_dlq_sk"]
    action = load_project(warehouse=warehouse).action("dq_orders")
    fix_rows(spark, Warehouse(warehouse), action, [key], set_fields={"order_id": FIXED_ORDER_ID}, by="test")


def as_a_user(spark, warehouse: Path, master: str, log: Path) -> dict[str, float]:
    env = {key: value for key, value in os.environ.items() if key != "DAGSTER_HOME"}
    env |= LOOPBACK | {
        "QUARANTINE_SPARK_MASTER": master,
        "QUARANTINE_WAREHOUSE": str(warehouse),
        "PYSPARK_SUBMIT_ARGS": SMALL_CLUSTER,
    }
    port = free_port()
    server = subprocess.Popen(
        [str(BIN / "quarantine-assets"), "spark-server", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
    )
    try:
        assert f"Spark Connect server on sc://127.0.0.1:{port}" in server.stdout.readline(), log.read_text()
        attached = env | {SPARK_REMOTE_VARIABLE: f"sc://127.0.0.1:{port}"}
        timings = {"demo": run([str(BIN / "quarantine-assets"), "demo"], attached)}
        fix_first_null_order_id(spark, warehouse)
        recycle = [str(BIN / "dagster"), "job", "execute", "-f", str(REPO_ROOT / "definitions.py"), "-j", RECYCLE_JOB]
        timings["recycle"] = run(recycle, attached)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=120)
    return timings


def in_local_mode(spark, warehouse: Path) -> dict[str, float]:
    """The same jobs in this process: Dagster's Spark resource gets the test's local session."""
    project = load_project(warehouse=warehouse)
    started = time.perf_counter()
    run_demo(Console(quiet=True), 1, project, str(warehouse))
    timings = {"demo": time.perf_counter() - started}
    fix_first_null_order_id(spark, warehouse)
    started = time.perf_counter()
    recycle = build_definitions(project, default_resources(warehouse)).resolve_job_def(RECYCLE_JOB)
    assert recycle.execute_in_process().success
    timings["recycle"] = time.perf_counter() - started
    return timings


def test_the_demo_and_a_recycle_on_a_standalone_cluster_give_the_tables_of_local_mode(spark, tmp_path):
    local_warehouse, cluster_warehouse = tmp_path / "local", tmp_path / "cluster"
    timings = {"local, in the test's warm session": in_local_mode(spark, local_warehouse)}
    with spark_standalone(tmp_path / "spark-standalone") as master:
        timings[f"{master}, attached"] = as_a_user(spark, cluster_warehouse, master, tmp_path / "server.log")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "timings.json").write_text(json.dumps(timings, indent=2) + "\n")

    for table in ("demo.bronze.orders", "demo.bronze.customers", "demo.ops.dlq", "demo.ops.dlq_outbox"):
        local, cluster = rows(spark, local_warehouse, table), rows(spark, cluster_warehouse, table)
        assert local, table
        assert cluster == local, table
    landed = [row for row in rows(spark, cluster_warehouse, "demo.bronze.orders") if str(FIXED_ORDER_ID) in row]
    assert len(landed) == 1
