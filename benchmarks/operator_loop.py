"""The operator's loop under `dagster dev` with its daemon, as `make dev` runs it, on each Spark setting:
every run and command on a JVM of its own (`QUARANTINE_SPARK_REMOTE=embedded`, the baseline), and attached
to the local Spark server the first of them starts (`local`, the default).

    .venv/bin/python benchmarks/operator_loop.py [--rounds 4] [--setting local] [--plain]

For each setting: create the DLQ tables (the first command, which on `local` starts the server), start
`dagster dev` (webserver + daemon, the instance of `make dev`, the recycle sensors running; with `--plain`,
Dagster's default instance, which looks for queued runs every 5 s, as a plain `dagster dev` has it), then in
each round: a new demo batch lands and `split_all` is launched over GraphQL, timed from launch to success; a
`quarantine-assets fix` of one quarantined order from the shell, in a process of its own; and from that fix
to the row in the validated table (sensor tick, run launch, outbox, recycled). The first round pays for
a young server, whose JIT compiler has not yet compiled Spark's and Delta's paths; the later rounds show
what every later command pays. Results go to `benchmarks/results/operator-loop-*.json`.
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
from typing import Annotated

import typer
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
FIGURES = ("split_all", "fix from the shell", "fix -> row in the validated table")


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


def one_setting(remote: str, rounds: int, plain: bool) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """The figures of one Spark setting, and the moments of each `split_all` run and of each recycle run
    after a fix, in seconds after its launch or the fix."""
    warehouse = Warehouse(Path(tempfile.mkdtemp(prefix="bench-warehouse-")))
    home = Path(tempfile.mkdtemp(prefix="bench-dagster-"))
    if not plain:
        shutil.copy(REPO / "dagster.yaml", home)  # the instance `make dev` runs
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
    moments = {}
    with dagster_dev(REPO / "workspace.yaml", home, env, cwd=REPO) as dev:
        for round_ in range(1, rounds + 1):
            split_all, fix, landing = (f"{figure}, round {round_}" for figure in FIGURES)
            moments[split_all] = {}
            wait_until_settled(instance, f"{action.key}_recycle_sensor", warehouse, action)
            figures[split_all] = split_all_seconds(dev, instance, warehouse, moments[split_all])
            wait_until_settled(instance, f"{action.key}_recycle_sensor", warehouse, action)
            source = ["--source", action.quarantine.source_table]
            listed = cli(["list", *source, "--status", "quarantined", "--rule", "valid_order_id"], env)
            key = re.search(r"│ ([0-9a-f]{24}-\d+) │", listed).group(1)
            order_id = 900_000_000 + round_
            fix_started, started = time.time(), time.perf_counter()
            cli(["fix", key, *source, "--set", f"order_id={order_id}", "--by", "benchmark"], env)
            fixed_at = time.time()
            figures[fix] = round(time.perf_counter() - started, 2)
            while not landed(Path(warehouse.path(action.target_table)), order_id):
                if time.time() - fixed_at > TIMEOUT_SECONDS:
                    raise SystemExit(f"the fixed row did not land within {TIMEOUT_SECONDS}s")
                time.sleep(0.5)
            landed_at = time.time()
            figures[landing] = round(landed_at - fixed_at, 2)
            wait_for_run_end(instance, fix_started)
            moments[landing] = timeline(instance, fix_started, fixed_at, landed_at)
    subprocess.run([str(BIN / "quarantine-assets"), "spark-server", "--stop"], capture_output=True, check=True)
    return figures, moments


def main(
    rounds: Annotated[int, typer.Option(help="Rounds of split_all, a fix and its recycle, on one server.")] = 4,
    setting: Annotated[list[str], typer.Option(help="Spark settings, the baseline first.")] = [EMBEDDED, LOCAL_SERVER],
    plain: Annotated[bool, typer.Option(help="Dagster's default instance, as a plain `dagster dev` has it.")] = False,
) -> None:
    measured = {name: one_setting(name, rounds, plain) for name in setting}
    results = {name: figures for name, (figures, _) in measured.items()}
    moments = {name: runs for name, (_, runs) in measured.items()}
    for name, runs in moments.items():
        for run, at in runs.items():
            print(f"{name}, {run}: " + ", ".join(f"{moment} {seconds:.1f}" for moment, seconds in at.items()))
    outcome = {"instance": "dagster's default" if plain else "make dev's", "seconds": results, "moments": moments}
    if EMBEDDED in results and LOCAL_SERVER in results:
        before, after = results[EMBEDDED], results[LOCAL_SERVER]
        for figure in before:
            ratio = before[figure] / after[figure]
            print(f"{figure:45} own JVM {before[figure]:6.1f} s   local server {after[figure]:6.1f} s   {ratio:4.1f}x")
        outcome["own_jvm_over_local_server"] = {figure: round(before[figure] / after[figure], 2) for figure in before}
    print(write_results("operator-loop", outcome))


if __name__ == "__main__":
    typer.run(main)
