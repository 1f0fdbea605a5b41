"""The demo and the recycle path on a Spark standalone cluster produce the same tables as local mode.

Both runs are what a user types: `quarantine-assets demo`, `quarantine-assets fix`, and
`dagster job execute` of the recycle job, with only QUARANTINE_SPARK_MASTER telling them apart.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyspark.sql import functions as F
from spark_cluster import LOOPBACK, spark_standalone

from quarantine_assets.defs.definitions import RECYCLE_JOB
from quarantine_assets.settings import REPO_ROOT

pytestmark = pytest.mark.e2e

BIN = Path(sys.executable).parent
ARTIFACTS = REPO_ROOT / "test-artifacts" / "spark-cluster"
FIXED_ORDER_ID = 900_000_001
# What a run stamps with its own time, run id or key; everything else must be equal.
PER_RUN_COLUMNS = {"_dlq_sk", "_dlq_timestamp", "_dlq_run_id", "_dlq_resolved_at", "_dlq_updated_at"}


def run(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=REPO_ROOT, capture_output=True, text=True)
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    return time.perf_counter() - started


def rows(spark, warehouse: Path, table: str) -> list[str]:
    """The table's rows as sorted JSON, per-run columns left out and the warehouse root made neutral."""
    frame = spark.read.format("delta").load(str(warehouse.joinpath(*table.split("."))))
    frame = frame.select([column for column in frame.columns if column not in PER_RUN_COLUMNS])
    if "_row_data" in frame.columns:
        frame = frame.withColumn("_row_data", F.to_json("_row_data"))
    as_json = (json.dumps(row.asDict(recursive=True), default=str) for row in frame.collect())
    return sorted(text.replace(str(warehouse), "<warehouse>") for text in as_json)


def first_null_order_id(spark, warehouse: Path) -> str:
    inbox = spark.read.format("delta").load(str(warehouse / "demo" / "ops" / "dlq"))
    quarantined = inbox.where(
        "_dlq_source_table = 'demo.bronze.orders' AND size(_dlq_failed_rules) = 1 "
        "AND _dlq_failed_rules[0].name = 'valid_order_id'"
    )
    return quarantined.orderBy(F.to_json("_row_data")).first()["_dlq_sk"]


def demo_fix_and_recycle(spark, warehouse: Path, master: str) -> dict[str, float]:
    env = {key: value for key, value in os.environ.items() if key != "DAGSTER_HOME"}
    env |= LOOPBACK | {
        "QUARANTINE_SPARK_MASTER": master,
        "QUARANTINE_WAREHOUSE": str(warehouse),
    }
    timings = {"demo": run([str(BIN / "quarantine-assets"), "demo"], env)}
    key = first_null_order_id(spark, warehouse)
    fix = [str(BIN / "quarantine-assets"), "fix", key, "--source", "demo.bronze.orders"]
    timings["fix"] = run([*fix, "--set", f"order_id={FIXED_ORDER_ID}"], env)
    recycle = [str(BIN / "dagster"), "job", "execute", "-f", str(REPO_ROOT / "definitions.py"), "-j", RECYCLE_JOB]
    timings["recycle"] = run(recycle, env)
    return timings


def test_the_demo_and_a_recycle_on_a_standalone_cluster_give_the_tables_of_local_mode(spark, tmp_path):
    local_warehouse, cluster_warehouse = tmp_path / "local", tmp_path / "cluster"
    timings = {"local[*]": demo_fix_and_recycle(spark, local_warehouse, "local[*]")}
    with spark_standalone(tmp_path / "spark-standalone") as master:
        timings[master] = demo_fix_and_recycle(spark, cluster_warehouse, master)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "timings.json").write_text(json.dumps(timings, indent=2) + "\n")

    for table in ("demo.bronze.orders", "demo.bronze.customers", "demo.ops.dlq", "demo.ops.dlq_outbox"):
        local, cluster = rows(spark, local_warehouse, table), rows(spark, cluster_warehouse, table)
        assert local, table
        assert cluster == local, table
    landed = [row for row in rows(spark, cluster_warehouse, "demo.bronze.orders") if str(FIXED_ORDER_ID) in row]
    assert len(landed) == 1
