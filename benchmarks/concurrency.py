"""Four actions splitting into one DLQ from separate processes, while an operator fixes rows and recycle runs run.

    .venv/bin/python benchmarks/concurrency.py --seed 7 --rounds 3

Each worker is its own process with its own JVM, as Dagster's run launcher starts runs, and none of
them is queued by a Dagster pool: they are the writers outside the instance, which only Delta's
conflict detection and our retries keep apart. At the end the tables are read directly: every
input row is in the validated table once or in the inbox, keys are unique, each (key, attempt) is
in the outbox once, and every worker finished. Conflicts seen and retried are counted per worker.
"""

from __future__ import annotations

import json
import logging
import random
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
ACTIONS = ("dq_orders_a", "dq_orders_b", "dq_orders_c", "dq_orders_d")


def action_named(name: str):
    from builders import orders_action

    return orders_action(name=name, source_table=f"demo.bronze.{name}")


def batch_rows(seed: int, action: str, round_: int, rows: int = 200) -> list[tuple]:
    """Seeded, so a run can be repeated: about a third of the rows fail a rule, some through NULLs."""
    rng = random.Random(f"{seed}/{action}/{round_}")
    first = ACTIONS.index(action) * 1_000_000 + round_ * 10_000
    return [
        (
            first + n,
            rng.choice([None, rng.randint(1, 9), rng.randint(1, 9)]),
            rng.choice([None, -1.0, 2.5, 7.0, 9.5]),
            rng.choice(["EUR", "USD", "USD", "XXX", None]),
        )
        for n in range(rows)
    ]


@app.callback()
def main() -> None:
    """Concurrent writers on one DLQ."""


@app.command()
def run(
    seed: int = 7,
    rounds: Annotated[int, typer.Option(help="Batches each split worker ingests.")] = 3,
    warehouse_dir: Annotated[Path, typer.Option("--warehouse")] = None,
) -> None:
    from quarantine_assets.engine.lake.tables import Warehouse
    from quarantine_assets.engine.spark.dlq_tables import create_dlq_tables
    from quarantine_assets.engine.spark.session import build_spark_session

    root = warehouse_dir or Path(tempfile.mkdtemp(prefix="bench-concurrency-"))
    spark = build_spark_session()
    create_dlq_tables(spark, Warehouse(root), "demo.ops.dlq")
    started = time.perf_counter()
    workers = [("split", name) for name in ACTIONS] + [("operator", "all"), ("recycle", "all")]
    processes = {
        worker: subprocess.Popen(
            [sys.executable, __file__, "worker", *worker, str(root), str(seed), str(rounds)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for worker in workers
    }
    reports = {}
    for worker, process in processes.items():
        stdout, stderr = process.communicate()
        lines = stdout.strip().splitlines()
        reports["/".join(worker)] = (
            json.loads(lines[-1]) if process.returncode == 0 and lines else {"failed": stderr.strip().splitlines()[-1:]}
        )
    elapsed = time.perf_counter() - started
    reconciled = reconcile(spark, Warehouse(root), seed, rounds)
    for name, report in reports.items():
        typer.echo(f"{name:>18}: {report}")
    typer.echo(f"reconciled: {reconciled}")
    typer.echo(f"{len(workers)} workers in {elapsed:.0f}s")
    written = write_results(
        "concurrency", {"seed": seed, "rounds": rounds, "seconds": round(elapsed, 1), "workers": reports} | reconciled
    )
    typer.echo(written)
    failed = [name for name, report in reports.items() if "failed" in report]
    if failed or not reconciled["ok"]:
        raise typer.Exit(1)


@app.command(hidden=True)
def worker(role: str, name: str, root: Path, seed: int, rounds: int) -> None:
    """One process: its writes, then one line of JSON with what it did and the conflicts it retried."""
    from quarantine_assets.engine.lake.tables import Warehouse
    from quarantine_assets.engine.spark.session import build_spark_session

    conflicts = Counter()
    logging.getLogger("quarantine_assets.engine.spark.commits").addHandler(_CountingHandler(conflicts))
    spark = build_spark_session("local[1]")
    warehouse = Warehouse(root)
    rng = random.Random(f"{seed}/{role}")
    done = Counter()
    finished = root / "finished"
    try:
        done["rounds"] = _work(spark, warehouse, role, name, seed, rounds, finished, rng, done)
    finally:
        # Failed or not, so that the workers waiting for it stop.
        finished.mkdir(exist_ok=True)
        (finished / f"{role}-{name}").touch()
    print(json.dumps(dict(done) | {"conflicts_retried": dict(conflicts)}))


def _work(spark, warehouse, role: str, name: str, seed: int, rounds: int, finished: Path, rng, done: Counter) -> int:
    """The worker's rounds. The operator keeps fixing until every split has finished, and the recycler
    keeps recycling until the operator has too, so that every writer overlaps the others."""
    awaited = {"split": [], "operator": ["split-"], "recycle": ["split-", "operator-"]}[role]
    from quarantine_assets.engine.spark.operator import fix_rows
    from quarantine_assets.engine.spark.outbox import run_outbox
    from quarantine_assets.engine.spark.recycled import run_recycled
    from quarantine_assets.engine.spark.split import run_split

    round_ = 0
    while round_ < rounds or any(not _all_finished(finished, prefix) for prefix in awaited):
        if role == "split":
            action = action_named(name)
            spark.createDataFrame(
                batch_rows(seed, name, round_), "row_no INT, order_id INT, amount DOUBLE, currency STRING"
            ).write.format("delta").mode("append").save(str(warehouse.path(action.source.table)))
            done["rows_read"] += run_split(spark, action, warehouse, f"split-{round_}").rows_read
        elif role == "operator":
            for action in map(action_named, ACTIONS):
                keys = _quarantined_keys(spark, warehouse, action, rng, 5)
                if keys:
                    fixed = fix_rows(
                        spark,
                        warehouse,
                        action,
                        keys,
                        set_fields={"order_id": 1, "amount": 1.0, "currency": "EUR"},
                        by="operator",
                    )
                    done["rows_fixed"] += fixed.rows_changed
        else:
            actions = map(action_named, ACTIONS)
            targets = [action for action in actions if Path(warehouse.path(action.target_table)).exists()]
            for action in targets:
                done["rows_sent"] += run_outbox(spark, action, warehouse, f"recycle-{round_}").rows_sent
                done["rows_landed"] += run_recycled(spark, action, warehouse, f"recycle-{round_}").rows_landed
            if not targets:
                time.sleep(1)  # no split has written yet: nothing to recycle
        round_ += 1
    return round_


def _all_finished(finished: Path, prefix: str) -> bool:
    return len(list(finished.glob(f"{prefix}*"))) == (len(ACTIONS) if prefix == "split-" else 1)


def _quarantined_keys(spark, warehouse, action, rng: random.Random, count: int) -> list[str]:
    from pyspark.sql import functions as F

    inbox = spark.read.format("delta").load(str(warehouse.path(action.quarantine.inbox_table)))
    keys = [
        row["_dlq_sk"]
        for row in inbox.where(
            (F.col("_dlq_source_table") == action.quarantine.source_table) & (F.col("_dlq_status") == "quarantined")
        )
        .select("_dlq_sk")
        .collect()
    ]
    return rng.sample(keys, min(count, len(keys)))


def reconcile(spark, warehouse, seed: int, rounds: int) -> dict:
    """After a last recycle: every input row landed once or still sits in the inbox; nothing twice."""
    from pyspark.sql import functions as F

    from quarantine_assets.engine.spark.outbox import run_outbox
    from quarantine_assets.engine.spark.recycled import run_recycled

    result = {"ok": True}
    for action in map(action_named, ACTIONS):
        run_outbox(spark, action, warehouse, "final")
        run_recycled(spark, action, warehouse, "final")
    # Read after the last recycle: a Delta DataFrame keeps the snapshot it was created on.
    inbox = spark.read.format("delta").load(str(warehouse.path("demo.ops.dlq")))
    outbox = spark.read.format("delta").load(str(warehouse.path("demo.ops.dlq_outbox")))
    for action in map(action_named, ACTIONS):
        sent = {row[0] for round_ in range(rounds) for row in batch_rows(seed, action.name, round_)}
        landed = Counter(
            row["row_no"] for row in spark.read.format("delta").load(str(warehouse.path(action.target_table))).collect()
        )
        waiting = Counter(
            row["row_no"]
            for row in inbox.where(
                (F.col("_dlq_source_table") == action.quarantine.source_table) & F.col("_dlq_resolved_at").isNull()
            )
            .select(F.variant_get("_row_data", "$.row_no", "int").alias("row_no"))
            .collect()
        )
        duplicates = [row for row, times in (landed + waiting).items() if times > 1]
        missing = sent - set(landed) - set(waiting)
        result[action.name] = {
            "sent": len(sent),
            "landed": len(landed),
            "waiting": len(waiting),
            "duplicates": len(duplicates),
            "missing": len(missing),
        }
        result["ok"] &= not duplicates and not missing
    keys = inbox.groupBy("_dlq_sk").count().where("count > 1").count()
    sent_twice = outbox.groupBy("_dlq_sk", "_dlq_attempt").count().where("count > 1").count()
    result |= {"inbox_keys_twice": keys, "outbox_keys_sent_twice": sent_twice}
    result["ok"] &= keys == 0 and sent_twice == 0
    return result


class _CountingHandler(logging.Handler):
    def __init__(self, counts: Counter):
        super().__init__(logging.WARNING)
        self.counts = counts

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[record.args[0]] += 1


if __name__ == "__main__":
    app()
