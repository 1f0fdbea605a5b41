"""The operator's loop under `dagster dev` with its daemon, as `make dev` runs it, on each Spark setting:
every run and command on a JVM of its own (`QUARANTINE_SPARK_REMOTE=embedded`, the baseline), and attached
to the local Spark server the first of them starts (`local`, the default).

    .venv/bin/python benchmarks/operator_loop.py

For each setting: create the DLQ tables (the first command, which on `local` starts the server), start
`dagster dev` (webserver + daemon, the instance of `make dev`, the recycle sensors running), then time
`split_all` launched over GraphQL from launch to success, twice (a new demo batch lands before each); a
`quarantine-assets fix` of one quarantined order from the shell, in a process of its own; and from that
fix to the row in the validated table (sensor tick, run launch, outbox, recycled); then a second fix and its
recycle, once the action's streams have run before. Results go to `benchmarks/results/operator-loop-*.json`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dagster import DagsterInstance
from fix_to_validated import landed, run_moments, timeline, wait_for_run_end, wait_until_settled
from harness import write_results

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from dagster_dev import dagster_dev, finished, submitted  # noqa: E402

from quarantine_assets.config.loader import load_project  # noqa: E402
from quarantine_assets.defs.definitions import SPLIT_JOB  # noqa: E402
from quarantine_assets.demo import generate_batch, next_batch_number  # noqa: E402
from quarantine_assets.demo_run import LANDING  # noqa: E402
from quarantine_assets.engine.lake.tables import Warehouse  # noqa: E402
from quarantine_assets.engine.spark.session import EMBEDDED, LOCAL_SERVER  # noqa: E402
from quarantine_assets.settings import SPARK_REMOTE_VARIABLE  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
LOCATION = "quarantine_assets"
TIMEOUT_SECONDS = 600


def split_all_seconds(dev, instance: DagsterInstance, warehouse: Warehouse, moments: dict) -> float:
    """From the launch of `split_all` over GraphQL to its success, as the run's records have them; the
    run's moments (worker start, each step) go into `moments`."""
    landing = Path(warehouse.root) / LANDING
    generate_batch(landing, next_batch_number(landing))
    launched = time.time()
    run_id = submitted(dev.client, LOCATION, SPLIT_JOB)
    finished(dev.client, run_id)
    record = instance.get_run_record_by_id(run_id)
    assert record.dagster_run.is_success, f"{SPLIT_JOB} run {run_id} failed"
    moments.update(run_moments(instance, record, launched))
    return round(record.end_time - launched, 2)


def cli(args: list[str], env: dict[str, str]) -> str:
    done = subprocess.run([str(BIN / "quarantine-assets"), *args], env=os.environ | env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"quarantine-assets {' '.join(args)} failed: {done.stdout}{done.stderr}")
    return done.stdout


def one_setting(remote: str) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """The figures of one Spark setting, and the moments of the second `split_all` run and of the recycle
    run after the fix, in seconds after its launch or the fix."""
    warehouse = Warehouse(Path(tempfile.mkdtemp(prefix="bench-warehouse-")))
    home = Path(tempfile.mkdtemp(prefix="bench-dagster-"))
    shutil.copy(REPO / "instance" / "dagster.yaml", home)  # the instance `make dev` runs
    env = {
        "QUARANTINE_WAREHOUSE": str(warehouse.root),
        "QUARANTINE_SENSORS": "running",
        "DAGSTER_HOME": str(home),
        SPARK_REMOTE_VARIABLE: remote,
        "COLUMNS": "250",
    }
    subprocess.run([str(BIN / "quarantine-assets"), "spark-server", "--stop"], capture_output=True, check=True)
    time.sleep(5)
    os.environ.update(env)
    action = load_project(warehouse=warehouse.root).action("dq_orders")
    started = time.perf_counter()
    cli(["create-tables"], env)
    figures = {"create-tables, the first command": round(time.perf_counter() - started, 2)}
    # Its storage created before `dagster dev` starts: processes creating it at once can each stamp its schema.
    instance = DagsterInstance.get()
    with dagster_dev(REPO / "workspace.yaml", home, env, cwd=REPO) as dev:
        moments = {"split_all, second run": {}}
        figures["split_all, first run"] = split_all_seconds(dev, instance, warehouse, {})
        figures["split_all, second run"] = split_all_seconds(dev, instance, warehouse, moments["split_all, second run"])
        # The first fix's recycle run is the first of its action: it starts the outbox and recycled streams.
        for fix, order_id in (("", 900_000_003), (", second fix", 900_000_004)):
            wait_until_settled(instance, f"{action.key}_recycle_sensor", warehouse, action)
            source = ["--source", action.quarantine.source_table]
            listed = cli(["list", *source, "--status", "quarantined", "--rule", "valid_order_id"], env)
            key = re.search(r"│ ([0-9a-f]{24}-\d+) │", listed).group(1)
            fix_started, started = time.time(), time.perf_counter()
            cli(["fix", key, *source, "--set", f"order_id={order_id}", "--by", "benchmark"], env)
            fixed_at = time.time()
            figures[f"fix from the shell{fix}"] = round(time.perf_counter() - started, 2)
            while not landed(Path(warehouse.path(action.target_table)), order_id):
                if time.time() - fixed_at > TIMEOUT_SECONDS:
                    raise SystemExit(f"the fixed row did not land within {TIMEOUT_SECONDS}s")
                time.sleep(0.5)
            landed_at = time.time()
            figures[f"fix -> row in the validated table{fix}"] = round(landed_at - fixed_at, 2)
            wait_for_run_end(instance, fix_started)
            moments[f"fix -> row in the validated table{fix}"] = timeline(instance, fix_started, fixed_at, landed_at)
    subprocess.run([str(BIN / "quarantine-assets"), "spark-server", "--stop"], capture_output=True, check=True)
    return figures, moments


def main() -> None:
    measured = {setting: one_setting(setting) for setting in (EMBEDDED, LOCAL_SERVER)}
    results = {setting: figures for setting, (figures, _) in measured.items()}
    moments = {setting: runs for setting, (_, runs) in measured.items()}
    for setting, runs in moments.items():
        for run, at in runs.items():
            print(f"{setting}, {run}: " + ", ".join(f"{moment} {seconds:.1f}" for moment, seconds in at.items()))
    for figure in results[EMBEDDED]:
        before, after = results[EMBEDDED][figure], results[LOCAL_SERVER][figure]
        print(f"{figure:40} own JVM {before:6.1f} s   local server {after:6.1f} s   {before / after:4.1f}x")
    before, after = results[EMBEDDED], results[LOCAL_SERVER]
    ratios = {figure: round(before[figure] / after[figure], 2) for figure in before}
    print(write_results("operator-loop", {"seconds": results, "own_jvm_over_local_server": ratios, "moments": moments}))


if __name__ == "__main__":
    main()
