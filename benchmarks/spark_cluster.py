"""The demo and a recycle on a Spark standalone cluster against local mode, both as a user runs them.

    .venv/bin/python benchmarks/spark_cluster.py [--repeat 3]

Each trial runs, in new processes: `quarantine-assets demo` into a fresh warehouse, one operator fix,
then `dagster job execute` of the recycle job; once with `local[*]` and once against a master and a
worker started on 127.0.0.1 (2 cores, 2 GiB). Prints medians and writes JSON to benchmarks/results/.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "e2e")]

from harness import write_results  # noqa: E402
from spark_cluster import spark_standalone  # noqa: E402
from test_spark_cluster import as_a_user  # noqa: E402

from quarantine_assets.engine.spark.session import build_spark_session  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=1)
    repeat = parser.parse_args().repeat
    spark = build_spark_session("local[1]")  # reads tables and makes the operator's fix
    root = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    trials: dict[str, list[dict[str, float]]] = {"local[*]": [], "standalone": []}
    with spark_standalone(root / "spark-standalone") as master:
        for trial in range(repeat):
            trials["local[*]"].append(
                as_a_user(spark, root / f"local-{trial}", "local[*]", root / f"local-{trial}.log")
            )
            trials["standalone"].append(
                as_a_user(spark, root / f"cluster-{trial}", master, root / f"cluster-{trial}.log")
            )
    medians = {
        mode: {step: statistics.median(run[step] for run in runs) for step in runs[0]} for mode, runs in trials.items()
    }
    for step in medians["local[*]"]:
        local, cluster = medians["local[*]"][step], medians["standalone"][step]
        print(f"{step:8} local[*] {local:6.1f} s   standalone {cluster:6.1f} s   ratio {cluster / local:.2f}")
    write_results("spark-cluster", {"repeat": repeat, "trials": trials, "medians": medians})


if __name__ == "__main__":
    main()
