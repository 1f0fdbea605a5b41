"""A tiny split attached to a local Spark server, whose `foreachBatch` worker (a Python process per
streaming query) runs on each interpreter setting: the PySpark installed beside the server (the default)
and, as the baseline, the same interpreter given as `PYSPARK_PYTHON`, which imports Spark's zipped copy
of PySpark first and compiles it at each start.

    .venv/bin/python benchmarks/worker_python.py [--rounds 6]

Each setting: a server of its own on a free port, a DLQ and a Delta source of 30 orders, then `rounds`
splits of 30 new orders each, attached; the first one, which warms the server, is left out of the median.
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
from quarantine_assets.engine.spark.split import run_split  # noqa: E402

CLI = Path(sys.executable).parent / "quarantine-assets"
ROWS = 30


def orders(first: int) -> list[tuple]:
    rng = random.Random(first)
    return [(first + n, rng.choice([None, 1, 2]), rng.choice([-1.0, 12.5]), "EUR") for n in range(ROWS)]


def split_seconds(rounds: int) -> list[float]:
    """Seconds of each attached split, on a server started now with the environment as it is."""
    port = free_port()
    warehouse = Warehouse(Path(tempfile.mkdtemp(prefix="bench-warehouse-")))
    spark = spark_session(warehouse, remote=local_server_url(warehouse, port))
    try:
        action = orders_action()
        create_dlq_tables(spark, warehouse, action.quarantine.inbox_table)
        seconds = []
        for number in range(rounds):
            rows = spark.createDataFrame(orders(number * ROWS), ORDERS_SCHEMA)
            rows.write.format("delta").mode("append").save(warehouse.path(action.source.table))
            started = time.perf_counter()
            run_split(spark, action, warehouse, run_id=f"bench-{number}")
            seconds.append(round(time.perf_counter() - started, 3))
        return seconds
    finally:
        spark.stop()
        subprocess.run([str(CLI), "spark-server", "--stop", "--port", str(port)], capture_output=True, check=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=6)
    rounds = parser.parse_args().rounds
    os.environ.pop("PYSPARK_PYTHON", None)
    installed = split_seconds(rounds)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    zipped = split_seconds(rounds)
    medians = {"installed PySpark": statistics.median(installed[1:]), "zipped PySpark": statistics.median(zipped[1:])}
    for setting, median in medians.items():
        print(f"{setting:20} split of {ROWS} rows attached: median {median:.2f} s")
    ratio = round(medians["zipped PySpark"] / medians["installed PySpark"], 2)
    print(f"zipped / installed: {ratio}")
    payload = {"seconds": {"installed PySpark": installed, "zipped PySpark": zipped}, "medians": medians}
    print(write_results("worker-python", payload | {"zipped_over_installed": ratio}))


if __name__ == "__main__":
    main()
