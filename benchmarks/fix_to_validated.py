"""Wall time from an operator's fix to the row landing in the validated table, under `dagster dev`.

    .venv/bin/python benchmarks/fix_to_validated.py

Ingests the demo, starts `dagster dev` (webserver + daemon, the instance of `make dev`) with the
recycle sensors running, fixes one quarantined order, and polls the validated table with delta-rs
until the fixed row is there.
The time includes the sensor's wait for its next tick, the run launch (a new process and JVM), the
outbox and the recycled steps; the Dagster instance's records of the run split it into those parts.
Baseline in the same run: the same fix recycled by calling the engine directly in a warm process (no
sensor, no run launch). Results go to `benchmarks/results/fix-to-validated-*.json`.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.compute as pc
from dagster import DagsterEventType, DagsterInstance, RunRecord
from deltalake import DeltaTable
from harness import write_results

from quarantine_assets.config.loader import load_project
from quarantine_assets.engine.lake.tables import Warehouse
from quarantine_assets.engine.spark.operator import RowFilter, fix_rows, inbox_rows
from quarantine_assets.engine.spark.outbox import run_outbox
from quarantine_assets.engine.spark.recycled import run_recycled

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
TIMEOUT_SECONDS = 600
RUN_EVENTS = {
    DagsterEventType.RUN_START: "run worker started",
    DagsterEventType.STEP_START: "started",
    DagsterEventType.STEP_SUCCESS: "ended",
}


def landed(path: Path, order_id: int) -> bool:
    rows = DeltaTable(str(path)).to_pyarrow_table(columns=["order_id"])
    return pc.sum(pc.equal(rows["order_id"], order_id).cast("int64")).as_py() > 0


def fix_one(spark, warehouse: Warehouse, action, order_id: int) -> None:
    quarantined = RowFilter(source_table=action.quarantine.source_table, status="quarantined", rule="valid_order_id")
    row = inbox_rows(spark, warehouse, action.quarantine.inbox_table, quarantined).first()
    fix_rows(spark, warehouse, action, [row["_dlq_sk"]], set_fields={"order_id": order_id}, by="benchmark")


def newest_run(instance: DagsterInstance, fix_started: float) -> RunRecord:
    """The recycle run the fix made the sensor request: once the fix has committed, which may be before the
    command that made it has exited."""
    (record,) = instance.get_run_records(limit=1)
    if record.create_timestamp.timestamp() < fix_started:
        raise SystemExit(f"no run was requested after the fix; the newest is {record.dagster_run.run_id}")
    return record


def timeline(instance: DagsterInstance, fix_started: float, fixed_at: float, landed_at: float) -> dict[str, float]:
    """Seconds after the fix at which the sensor requested the run, its worker started (after the
    launch: a new process loading the code), each step started and ended (the first step starts the
    run's JVM), the row was seen in the validated table, and the run ended."""
    record = newest_run(instance, fix_started)
    return run_moments(instance, record, fixed_at, {"row seen in the validated table": landed_at})


def run_moments(
    instance: DagsterInstance, record: RunRecord, since: float, seen: dict[str, float] | None = None
) -> dict[str, float]:
    """Seconds after `since` at which the run was created, its worker started, each step started and
    ended, each moment of `seen` happened, and the run ended; in the order they happened."""
    moments = {"run created": record.create_timestamp.timestamp()}
    for event in instance.all_logs(record.dagster_run.run_id, of_type=set(RUN_EVENTS)):
        label = RUN_EVENTS[event.dagster_event_type]
        moments[f"{event.step_key} {label}" if event.step_key else label] = event.timestamp
    moments |= (seen or {}) | {"run ended": record.end_time}
    return {moment: round(at - since, 2) for moment, at in sorted(moments.items(), key=lambda item: item[1])}


def wait_until_settled(instance: DagsterInstance, sensor: str, warehouse: Warehouse, action) -> None:
    """Until the sensor has seen every commit of the inbox and no run is in flight: its first tick
    requests a recycle of the rows the baseline fixed (already recycled, so it lands nothing), and a
    fix made while that run holds the DLQ's pool would be timed waiting for it."""
    inbox_version = str(warehouse.delta_table(action.quarantine.inbox_table).version())
    deadline = time.time() + TIMEOUT_SECONDS
    while True:
        cursors = {state.instigator_name: state.instigator_data.cursor for state in instance.all_instigator_state()}
        in_flight = [record for record in instance.get_run_records() if not record.dagster_run.is_finished]
        if cursors.get(sensor) == inbox_version and not in_flight:
            return
        if time.time() > deadline:
            raise SystemExit(f"dagster dev did not settle within {TIMEOUT_SECONDS}s: {sensor} at {cursors.get(sensor)}")
        time.sleep(1)


def wait_for_run_end(instance: DagsterInstance, fix_started: float) -> None:
    deadline = time.time() + TIMEOUT_SECONDS
    while not newest_run(instance, fix_started).dagster_run.is_finished:
        if time.time() > deadline:
            raise SystemExit(f"the recycle run did not end within {TIMEOUT_SECONDS}s")
        time.sleep(1)


def main() -> None:
    warehouse = Warehouse(Path(tempfile.mkdtemp(prefix="bench-warehouse-")))
    dagster_home = tempfile.mkdtemp(prefix="bench-dagster-")
    shutil.copy(REPO / "dagster.yaml", dagster_home)  # the instance `make dev` runs
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

    from quarantine_assets.engine.spark.session import build_spark_session

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
        instance = DagsterInstance.get()
        wait_until_settled(instance, f"{action.key}_recycle_sensor", warehouse, action)
        fix_started = time.time()
        fix_one(spark, warehouse, action, 900_000_002)
        fixed_at = time.time()
        while not landed(validated, 900_000_002):
            if time.time() - fixed_at > TIMEOUT_SECONDS:
                raise SystemExit(f"the fixed row did not land within {TIMEOUT_SECONDS}s")
            time.sleep(1)
        landed_at = time.time()
        wait_for_run_end(instance, fix_started)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
    through_dagster = landed_at - fixed_at
    moments = timeline(instance, fix_started, fixed_at, landed_at)
    print(f"fix -> validated under dagster dev (sensor + daemon + run launch): {through_dagster:.1f} s")
    for moment, seconds in moments.items():
        print(f"  {seconds:6.1f} s  {moment}")
    print(f"baseline, engine called directly in a warm process: {baseline:.1f} s")
    print(f"ratio: {through_dagster / baseline:.1f}x")
    result = {
        "fix_to_validated_seconds": round(through_dagster, 2),
        "seconds_after_the_fix": moments,
        "baseline_engine_warm_seconds": round(baseline, 2),
        "ratio": round(through_dagster / baseline, 2),
    }
    print(write_results("fix-to-validated", result))


if __name__ == "__main__":
    main()
