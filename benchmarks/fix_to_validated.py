"""Wall time from an operator's fix to the row landing in the validated table, under `dagster dev`.

    .venv/bin/python benchmarks/fix_to_validated.py

Ingests the demo, starts `dagster dev` (webserver + daemon) with the recycle sensors running, fixes
one quarantined order, and polls the validated table with delta-rs until the fixed row is there.
The time includes the sensor's wait for its next tick, the run launch (a new process and JVM), the
outbox and the recycled steps. Baseline in the same run: the same fix recycled by calling the
engine directly in a warm process (no sensor, no run launch).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.compute as pc
from deltalake import DeltaTable

from quarantine_assets.config.loader import load_project
from quarantine_assets.engine.operator import RowFilter, fix_rows, inbox_rows
from quarantine_assets.engine.outbox import run_outbox
from quarantine_assets.engine.recycled import run_recycled
from quarantine_assets.engine.tables import Warehouse

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
TIMEOUT_SECONDS = 600


def landed(path: Path, order_id: int) -> bool:
    rows = DeltaTable(str(path)).to_pyarrow_table(columns=["order_id"])
    return pc.sum(pc.equal(rows["order_id"], order_id).cast("int64")).as_py() > 0


def fix_one(spark, warehouse: Warehouse, action, order_id: int) -> None:
    quarantined = RowFilter(source_table=action.quarantine.source_table, status="quarantined", rule="valid_order_id")
    row = inbox_rows(spark, warehouse, action.quarantine.dlq_table, quarantined).first()
    fix_rows(spark, warehouse, action, [row["_dlq_sk"]], set_fields={"order_id": order_id}, by="benchmark")


def main() -> None:
    warehouse = Warehouse(Path(tempfile.mkdtemp(prefix="bench-warehouse-")))
    dagster_home = tempfile.mkdtemp(prefix="bench-dagster-")
    env = os.environ | {
        "QUARANTINE_WAREHOUSE": str(warehouse.root),
        "QUARANTINE_SENSORS": "running",
        "DAGSTER_HOME": dagster_home,
    }
    subprocess.run(
        [str(BIN / "quarantine-assets"), "--warehouse", str(warehouse.root), "demo"],
        env=env,
        check=True,
        capture_output=True,
    )
    os.environ.update(env)
    action = load_project(warehouse=warehouse.root).action("dq_orders")
    validated = warehouse.path(action.target_table)

    from quarantine_assets.engine.session import build_spark_session

    spark = build_spark_session()
    # Baseline: the engine alone, warm, no sensor and no run launch.
    fix_one(spark, warehouse, action, 900_000_001)
    started = time.perf_counter()
    run_outbox(spark, action, warehouse, "baseline")
    run_recycled(spark, action, warehouse, "baseline")
    baseline = time.perf_counter() - started
    assert landed(validated, 900_000_001)

    server = subprocess.Popen(
        [str(BIN / "dagster"), "dev", "-w", "workspace.yaml", "-p", "3917"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        time.sleep(20)  # webserver and daemon up, the sensor's cursor past the baseline's commits
        fix_one(spark, warehouse, action, 900_000_002)
        fixed_at = time.perf_counter()
        while not landed(validated, 900_000_002):
            if time.perf_counter() - fixed_at > TIMEOUT_SECONDS:
                raise SystemExit(f"the fixed row did not land within {TIMEOUT_SECONDS}s")
            time.sleep(1)
        through_dagster = time.perf_counter() - fixed_at
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
    print(f"fix -> validated under dagster dev (sensor + daemon + run launch): {through_dagster:.1f} s")
    print(f"baseline, engine called directly in a warm process: {baseline:.1f} s")
    print(f"ratio: {through_dagster / baseline:.1f}x")


if __name__ == "__main__":
    main()
