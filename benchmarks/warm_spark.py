"""Wall time of `quarantine-assets demo` as a newcomer types it twice: on a JVM of its own each time
(`QUARANTINE_SPARK_REMOTE=embedded`, the baseline), and on the default, a local Spark server started by
the first command and reused by the second.

    .venv/bin/python benchmarks/warm_spark.py

Stops the local server first, so the first attached demo pays the server's start, and at the end.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import write_results

from quarantine_assets.engine.spark.session import EMBEDDED, LOCAL_SERVER
from quarantine_assets.settings import SPARK_REMOTE_VARIABLE

CLI = Path(sys.executable).parent / "quarantine-assets"


def demo_seconds(env: dict[str, str]) -> float:
    """One `demo` into a warehouse of its own, as a second `make demo` runs into the first one's."""
    started = time.perf_counter()
    subprocess.run([str(CLI), "demo"], env=env, capture_output=True, text=True, check=True)
    return round(time.perf_counter() - started, 3)


def stop_local_server() -> None:
    subprocess.run([str(CLI), "spark-server", "--stop"], capture_output=True, check=True)
    time.sleep(5)


def main() -> None:
    base = os.environ | {"DAGSTER_HOME": tempfile.mkdtemp(prefix="bench-dagster-")}
    embedded = base | {SPARK_REMOTE_VARIABLE: EMBEDDED, "QUARANTINE_WAREHOUSE": tempfile.mkdtemp(prefix="bench-")}
    attached = base | {SPARK_REMOTE_VARIABLE: LOCAL_SERVER, "QUARANTINE_WAREHOUSE": tempfile.mkdtemp(prefix="bench-")}
    stop_local_server()
    own_jvm = [demo_seconds(embedded), demo_seconds(embedded)]
    try:
        warm = [demo_seconds(attached), demo_seconds(attached)]
    finally:
        stop_local_server()
    path = write_results(
        "warm-spark",
        {
            "command": "quarantine-assets demo, twice",
            "own_jvm_seconds": own_jvm,
            "local_server_seconds": warm,
            "second_demo_own_jvm_over_local_server": round(own_jvm[1] / warm[1], 2),
        },
    )
    print(f"demo on a JVM of its own: first {own_jvm[0]:.1f} s, second {own_jvm[1]:.1f} s")
    print(f"demo on the local server: first (starts it) {warm[0]:.1f} s, second {warm[1]:.1f} s")
    print(f"second demo: {own_jvm[1] / warm[1]:.1f}x faster; results: {path}")


if __name__ == "__main__":
    main()
