"""SIGKILL at seeded random points of each step, then a rerun, then the invariants read from the tables.

    .venv/bin/python benchmarks/crashes.py run --seed 11 --trials 20
    .venv/bin/python benchmarks/crashes.py aimed --seed 11 --trials 20

`run`: each trial starts the step in a process of its own (Python and its JVM in one process group) and
kills the whole group with SIGKILL at a random moment of the step, as an out-of-memory kill or a
lost machine would. This process then reruns the step, lets the rows move on (outbox, recycled),
and reads the Delta tables directly: every input row is in the validated table once or open in
the inbox, no inbox key twice, each (key, attempt) in the outbox once, each fixed row landed once,
and no row left `fixed` or unlanded `recycled` after the recycle. Steps: split, fix (an operator's
fix of five rows), outbox, recycled. The first trial of a step is not killed: it times the step,
from its Spark session to its last commit, and the kill points are drawn over that time.

`aimed`: each trial stops a step at one named point between two of its commits, the windows a random
kill seldom hits, where the engine calls the function that starts the next commit, so nothing after the
point runs. With `--kill`, the step runs in a process of its own, which kills its whole group (Python and
its JVM, with everything they held in memory) with SIGKILL at the point; without it, a fault is raised
there in this process (faster: no JVM start per trial). Then the same rerun and checks.

    .venv/bin/python benchmarks/crashes.py aimed --kill --seed 11 --trials 20
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Annotated

import typer
from harness import write_results

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

app = typer.Typer(no_args_is_help=True)
STEPS = ("split", "fix", "outbox", "recycled")
READY, DONE = "ready", "done"
# Each point between two commits, as the step, the engine module and the function called right after it.
AIMED_POINTS = {
    "split: verdict staged, before the validated commit": ("split", "split", "_append_validated"),
    "split: after the validated commit, before the inbox commit": ("split", "split", "append_to_dlq_table"),
    "split: after both commits, before the checkpoint commit": ("split", "split", "_refuse_unaccounted"),
    "outbox: after its mark, before its append": ("outbox", "outbox", "append_to_dlq_table"),
    "recycled: after its settling MERGE, before the append": ("recycled", "recycled", "append_once"),
    "recycled: after the append, before the landed stamp": ("recycled", "recycled", "_stamp_landed"),
}
FIXED_FIELDS = {"order_id": 1, "amount": 1.0, "currency": "EUR"}
ROWS_PER_BATCH = 60
KEYS_PER_FIX = 5


def step_action(step: str):
    from builders import orders_action

    return orders_action(name=f"dq_{step}", source_table=f"demo.bronze.{step}")


def batch_rows(seed: int, step: str, trial: int) -> list[tuple]:
    """About half the rows fail a rule, some through NULL operands; row numbers are unique per step."""
    rng = random.Random(f"{seed}/{step}/{trial}")
    return [
        (
            trial * 1_000 + n,
            rng.choice([None, rng.randint(1, 9)]),
            rng.choice([None, -1.0, 2.5, 9.5]),
            rng.choice(["EUR", "USD", "XXX", None]),
        )
        for n in range(ROWS_PER_BATCH)
    ]


@app.callback()
def main() -> None:
    """Crash trials."""


@app.command()
def run(
    seed: int = 11,
    trials: Annotated[int, typer.Option(help="Killed trials per step, besides the timing one.")] = 20,
    steps: Annotated[str, typer.Option(help="Comma-separated steps to try.")] = ",".join(STEPS),
    warehouse_dir: Annotated[Path, typer.Option("--warehouse")] = None,
) -> None:
    from quarantine_assets.engine.lake.tables import Warehouse
    from quarantine_assets.engine.spark.dlq_tables import create_dlq_tables
    from quarantine_assets.engine.spark.session import build_spark_session

    root = warehouse_dir or Path(tempfile.mkdtemp(prefix="crash-trials-"))
    spark = build_spark_session()
    rng = random.Random(seed)
    results, started = {}, time.perf_counter()
    for step in steps.split(","):
        warehouse = Warehouse(root / step)
        action = step_action(step)
        create_dlq_tables(spark, warehouse, action.quarantine.inbox_table)
        outcomes, violations, step_seconds = Counter(), [], None
        for trial in range(trials + 1):
            keys = prepare(spark, warehouse, step, action, seed, trial, rng)
            kill_after = None if step_seconds is None else rng.uniform(0, step_seconds)
            outcome, seconds = run_killed(root, step, keys, kill_after, root / f"{step}-{trial}.log")
            step_seconds = step_seconds or seconds
            outcomes[outcome] += 1
            problems = recover_and_check(spark, warehouse, step, action, seed, trial, keys)
            violations += [{"trial": trial, "killed_after": kill_after, "problem": p} for p in problems]
            typer.echo(f"{step} trial {trial}: {outcome}, kill at {kill_after or 0:.2f}s, {problems or 'ok'}")
        results[step] = {
            "trials": trials,
            "step_seconds": round(step_seconds, 2),
            "outcomes": dict(outcomes),
            "violations": violations,
        }
    elapsed = time.perf_counter() - started
    ok = not any(result["violations"] for result in results.values())
    typer.echo(json.dumps(results, indent=1))
    typer.echo(write_results("crashes", {"seed": seed, "seconds": round(elapsed), "ok": ok, "steps": results}))
    if not ok:
        raise typer.Exit(1)


class Stopped(RuntimeError):
    """Raised at an aimed point, as a kill would stop the step there."""


@app.command()
def aimed(
    seed: int = 11,
    trials: Annotated[int, typer.Option(help="Stopped trials per point.")] = 20,
    steps: Annotated[str, typer.Option(help="Comma-separated steps whose points to try.")] = ",".join(STEPS),
    warehouse_dir: Annotated[Path, typer.Option("--warehouse")] = None,
    kill: Annotated[
        bool, typer.Option(help="SIGKILL the step's process group at the point, instead of raising there.")
    ] = False,
) -> None:
    import importlib

    from quarantine_assets.engine.lake.tables import Warehouse
    from quarantine_assets.engine.spark.dlq_tables import create_dlq_tables
    from quarantine_assets.engine.spark.session import build_spark_session

    root = warehouse_dir or Path(tempfile.mkdtemp(prefix="crash-points-"))
    spark = build_spark_session()
    rng = random.Random(seed)
    results, started = {}, time.perf_counter()
    for number, (point, (step_name, module_name, function)) in enumerate(AIMED_POINTS.items()):
        if step_name not in steps.split(","):
            continue
        module = importlib.import_module(f"quarantine_assets.engine.spark.{module_name}")
        warehouse = Warehouse(root / f"point-{number}")
        action = step_action(step_name)
        create_dlq_tables(spark, warehouse, action.quarantine.inbox_table)
        outcomes, violations = Counter(), []
        for trial in range(trials):
            keys = prepare(spark, warehouse, step_name, action, seed, trial, rng)
            if kill:
                log = root / f"point-{number}-{trial}.log"
                outcomes[killed_at_point(warehouse, step_name, keys, module_name, function, log)] += 1
                problems = recover_and_check(spark, warehouse, step_name, action, seed, trial, keys)
                violations += [{"trial": trial, "problem": problem} for problem in problems]
                typer.echo(f"{point}, trial {trial}: {problems or 'ok'}")
                continue
            original = getattr(module, function)
            setattr(module, function, _stopping(function))
            try:
                run_step(spark, warehouse, step_name, action, keys)
                outcomes["point not reached"] += 1
            except Stopped:
                outcomes["stopped"] += 1
            finally:
                setattr(module, function, original)
            problems = recover_and_check(spark, warehouse, step_name, action, seed, trial, keys)
            violations += [{"trial": trial, "problem": problem} for problem in problems]
            typer.echo(f"{point}, trial {trial}: {problems or 'ok'}")
        results[point] = {"trials": trials, "outcomes": dict(outcomes), "violations": violations}
    ok = not any(result["violations"] for result in results.values())
    typer.echo(json.dumps(results, indent=1))
    payload = {
        "seed": seed,
        "stop": "SIGKILL of the step's process group" if kill else "a fault raised in this process",
        "seconds": round(time.perf_counter() - started),
        "ok": ok,
        "points": results,
    }
    typer.echo(write_results("crash-points", payload))
    if not ok:
        raise typer.Exit(1)


def killed_at_point(warehouse, step: str, keys: list[str], module: str, function: str, log: Path) -> str:
    """The step in a process group of its own, which kills itself where the engine calls `module.function`."""
    process = subprocess.Popen(
        [sys.executable, __file__, "killed-at", step, warehouse.root, json.dumps(keys), module, function],
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
        start_new_session=True,
    )
    returncode = process.wait(timeout=900)
    return {-signal.SIGKILL: "killed", 0: "point not reached"}.get(returncode, f"failed ({returncode})")


@app.command("killed-at", hidden=True)
def killed_at(name: str, root: Path, keys: str, module: str, function: str) -> None:
    """One step, as a run process does it, killed with its JVM at the call of `module.function`."""
    import importlib

    from quarantine_assets.engine.lake.tables import Warehouse
    from quarantine_assets.engine.spark.session import build_spark_session

    spark = build_spark_session("local[1]")
    setattr(importlib.import_module(f"quarantine_assets.engine.spark.{module}"), function, _killing)
    run_step(spark, Warehouse(root), name, step_action(name), json.loads(keys))


def _killing(*args, **kwargs):
    os.killpg(os.getpgid(0), signal.SIGKILL)


def _stopping(function: str):
    def stopped(*args, **kwargs):
        raise Stopped(function)

    return stopped


def prepare(spark, warehouse, step: str, action, seed: int, trial: int, rng: random.Random) -> list[str]:
    """New input for the step to work on; the keys an operator fixes, for the steps after the split."""
    from quarantine_assets.engine.spark.operator import fix_rows
    from quarantine_assets.engine.spark.outbox import run_outbox
    from quarantine_assets.engine.spark.split import run_split

    spark.createDataFrame(
        batch_rows(seed, step, trial), "row_no INT, order_id INT, amount DOUBLE, currency STRING"
    ).write.format("delta").mode("append").save(str(warehouse.path(action.source.table)))
    if step == "split":
        return []
    run_split(spark, action, warehouse, f"prepare-{trial}")
    keys = rng.sample(quarantined_keys(spark, warehouse, action), KEYS_PER_FIX)
    if step in ("outbox", "recycled"):
        fix_rows(spark, warehouse, action, keys, set_fields=FIXED_FIELDS, by="operator")
    if step == "recycled":
        run_outbox(spark, action, warehouse, f"prepare-{trial}")
    return keys


def run_killed(root: Path, step: str, keys: list[str], kill_after: float | None, log: Path) -> tuple[str, float]:
    """The step in its own process group, killed `kill_after` seconds after its Spark session is up."""
    process = subprocess.Popen(
        [sys.executable, __file__, "step", step, str(root / step), json.dumps(keys)],
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
        start_new_session=True,
    )
    if process.stdout.readline().strip() != READY:
        process.wait()
        raise RuntimeError(f"the {step} process did not start (exit {process.returncode})")
    started = time.perf_counter()
    if kill_after is None:
        finished = process.stdout.readline().strip() == DONE
        seconds = time.perf_counter() - started
        process.wait()
        return ("finished" if finished and process.returncode == 0 else f"failed ({process.returncode})"), seconds
    try:
        process.wait(timeout=kill_after)
        outcome = "finished" if process.returncode == 0 else f"failed ({process.returncode})"
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        outcome = "killed"
    return outcome, time.perf_counter() - started


@app.command(hidden=True)
def step(name: str, root: Path, keys: str) -> None:
    """One step on its own, as a run process does it."""
    from quarantine_assets.engine.lake.tables import Warehouse
    from quarantine_assets.engine.spark.session import build_spark_session

    spark = build_spark_session("local[1]")
    print(READY, flush=True)
    run_step(spark, Warehouse(root), name, step_action(name), json.loads(keys))
    print(DONE, flush=True)


def run_step(spark, warehouse, name: str, action, keys: list[str]) -> None:
    from quarantine_assets.engine.spark.operator import fix_rows
    from quarantine_assets.engine.spark.outbox import run_outbox
    from quarantine_assets.engine.spark.recycled import run_recycled
    from quarantine_assets.engine.spark.split import run_split

    if name == "split":
        run_split(spark, action, warehouse, "crash")
    elif name == "fix":
        fix_rows(spark, warehouse, action, keys, set_fields=FIXED_FIELDS, by="operator")
    elif name == "outbox":
        run_outbox(spark, action, warehouse, "crash")
    else:
        run_recycled(spark, action, warehouse, "crash")


def recover_and_check(spark, warehouse, step: str, action, seed: int, trial: int, keys: list[str]) -> list[str]:
    """The rerun a user would start, then the rows moved on; what breaks an invariant, in words."""
    from pyspark.sql import functions as F

    from quarantine_assets.engine.spark.outbox import run_outbox
    from quarantine_assets.engine.spark.recycled import run_recycled

    problems = []
    if step == "fix":
        statuses = inbox_statuses(spark, warehouse, action, keys)
        problems += [
            f"{key} is {status} after a killed fix"
            for key, status in statuses.items()
            if status not in ("quarantined", "fixed")
        ]
        still_open = [key for key, status in statuses.items() if status == "quarantined"]
        if still_open:
            run_step(spark, warehouse, "fix", action, still_open)
    else:
        run_step(spark, warehouse, step, action, keys)
    if step == "outbox":
        outbox = spark.read.format("delta").load(str(warehouse.path(action.quarantine.outbox_table)))
        sent = Counter(row["_dlq_sk"] for row in outbox.where(F.col("_dlq_sk").isin(keys)).collect())
        problems += [f"{key} sent {sent[key]} times" for key in keys if sent[key] != 1]
    run_outbox(spark, action, warehouse, f"drain-{trial}")
    run_recycled(spark, action, warehouse, f"drain-{trial}")
    return problems + table_problems(spark, warehouse, step, action, seed, trial, keys)


def table_problems(spark, warehouse, step: str, action, seed: int, trial: int, keys: list[str]) -> list[str]:
    """The invariants over everything the step's tables hold after `trial`."""
    from pyspark.sql import functions as F

    inbox = spark.read.format("delta").load(str(warehouse.path(action.quarantine.inbox_table)))
    outbox = spark.read.format("delta").load(str(warehouse.path(action.quarantine.outbox_table)))
    validated = spark.read.format("delta").load(str(warehouse.path(action.target_table)))
    sent = {row[0] for t in range(trial + 1) for row in batch_rows(seed, step, t)}
    landed = Counter(row["row_no"] for row in validated.select("row_no").collect())
    open_rows = inbox.where(F.col("_dlq_resolved_at").isNull() & (F.col("_dlq_status") != "discarded"))
    waiting = Counter(
        row["row_no"]
        for row in open_rows.select(F.variant_get("_row_data", "$.row_no", "int").alias("row_no")).collect()
    )
    problems = [f"row {row} is there {times} times" for row, times in (landed + waiting).items() if times > 1]
    problems += [f"row {row} is lost" for row in sorted(sent - set(landed) - set(waiting))]
    problems += [f"row {row} was never sent" for row in sorted(set(landed) | set(waiting)) if row not in sent]
    if inbox.groupBy("_dlq_sk").count().where("count > 1").count():
        problems.append("an inbox key is there twice")
    if outbox.groupBy("_dlq_sk", "_dlq_attempt").count().where("count > 1").count():
        problems.append("a (key, attempt) is in the outbox twice")
    stuck = open_rows.where(F.col("_dlq_status").isin("fixed", "recycled")).count()
    if stuck:
        problems.append(f"{stuck} row(s) fixed or recycled but not landed after a recycle")
    fixed_rows = inbox.where(F.col("_dlq_sk").isin(keys)).select(
        F.variant_get("_row_data", "$.row_no", "int").alias("row_no")
    )
    problems += [
        f"fixed row {row['row_no']} landed {landed[row['row_no']]} times"
        for row in fixed_rows.collect()
        if landed[row["row_no"]] != 1
    ]
    return problems


def inbox_statuses(spark, warehouse, action, keys: list[str]) -> dict[str, str]:
    from pyspark.sql import functions as F

    inbox = spark.read.format("delta").load(str(warehouse.path(action.quarantine.inbox_table)))
    return {row["_dlq_sk"]: row["_dlq_status"] for row in inbox.where(F.col("_dlq_sk").isin(keys)).collect()}


def quarantined_keys(spark, warehouse, action) -> list[str]:
    from pyspark.sql import functions as F

    inbox = spark.read.format("delta").load(str(warehouse.path(action.quarantine.inbox_table)))
    return sorted(
        row["_dlq_sk"] for row in inbox.where(F.col("_dlq_status") == "quarantined").select("_dlq_sk").collect()
    )


if __name__ == "__main__":
    app()
