"""A tiny split attached to a local Spark server, whose `foreachBatch` worker (a Python process per
streaming query) starts in each setting: forked from the server's fork server (the default); a new
process on the PySpark installed beside the server (the same server, its fork server's socket set
aside, so its launcher starts the worker itself); and, as the first baseline, a new process on the same
interpreter given as `PYSPARK_PYTHON`, which imports Spark's zipped copy of PySpark first and compiles it
at each start.

    .venv/bin/python benchmarks/worker_python.py [--rounds 6]

A DLQ and a Delta source of 30 orders, then `rounds` splits of 30 new orders each per setting, attached;
forked and new-process splits take turns on one server, so both meet it equally warm. The first split of
each server, which warms it, is left out of the medians.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import write_results

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from builders import ORDERS_SCHEMA, orders_action  # noqa: E402
from dagster_dev import free_port  # noqa: E402

from quarantine_assets.engine.lake.tables import Warehouse  # noqa: E402
from quarantine_assets.engine.spark.dlq_tables import create_dlq_tables  # noqa: E402
from quarantine_assets.engine.spark.local_server import local_server_url  # noqa: E402
from quarantine_assets.engine.spark.session import spark_session  # noqa: E402
from quarantine_assets.engine.spark.spark_server import worker_forkserver_file  # noqa: E402
from quarantine_assets.engine.spark.split import run_split  # noqa: E402

CLI = Path(sys.executable).parent / "quarantine-assets"
ROWS = 30


def orders(first: int) -> list[tuple]:
    rng = random.Random(first)
    return [(first + n, rng.choice([None, 1, 2]), rng.choice([-1.0, 12.5]), "EUR") for n in range(ROWS)]


def split_seconds(rounds: int, settings: tuple[str, ...]) -> dict[str, list[float]]:
    """Seconds of each attached split by setting, taking turns on a server started now with the environment
    as it is: `forked`, or a `new process` while the fork server's socket is set aside."""
    port = free_port()
    warehouse = Warehouse(Path(tempfile.mkdtemp(prefix="bench-warehouse-")))
    spark = spark_session(warehouse, remote=local_server_url(warehouse, port))
    forkserver = worker_forkserver_file(port)
    aside = forkserver.with_suffix(".aside")
    try:
        action = orders_action()
        create_dlq_tables(spark, warehouse, action.quarantine.inbox_table)
        seconds = {setting: [] for setting in settings}
        for number in range(rounds):
            for turn, setting in enumerate(settings):
                rows = spark.createDataFrame(orders((number * len(settings) + turn) * ROWS), ORDERS_SCHEMA)
                rows.write.format("delta").mode("append").save(warehouse.path(action.source.table))
                if setting == NEW_PROCESS:
                    forkserver.rename(aside)
                started = time.perf_counter()
                try:
                    run_split(spark, action, warehouse, run_id=f"bench-{number}-{turn}")
                finally:
                    if setting == NEW_PROCESS:
                        aside.rename(forkserver)
                seconds[setting].append(round(time.perf_counter() - started, 3))
        return seconds
    finally:
        spark.stop()
        subprocess.run([str(CLI), "spark-server", "--stop", "--port", str(port)], capture_output=True, check=True)


FORKED, NEW_PROCESS, ZIPPED = "forked", "new process", "new process, zipped PySpark"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=6)
    rounds = parser.parse_args().rounds
    os.environ.pop("PYSPARK_PYTHON", None)
    seconds = split_seconds(rounds, (FORKED, NEW_PROCESS))
    # A server whose workers run on an interpreter given by the user gets no launcher, and no fork server.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    seconds |= split_seconds(rounds, (ZIPPED,))
    medians = {setting: statistics.median(each[1:]) for setting, each in seconds.items()}
    for setting, median in medians.items():
        print(f"{setting:28} split of {ROWS} rows attached: median {median:.2f} s")
    ratios = {
        "forked_over_new_process": round(medians[FORKED] / medians[NEW_PROCESS], 2),
        "new_process_over_zipped": round(medians[NEW_PROCESS] / medians[ZIPPED], 2),
    }
    print(ratios)
    print(write_results("worker-python", {"seconds": seconds, "medians": medians} | ratios))


if __name__ == "__main__":
    main()
