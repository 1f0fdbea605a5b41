"""Wall time of one operator command from a shell: a `fix` that starts its own JVM, against the same
`fix` attached to a long-lived Spark (`quarantine-assets spark-server`, QUARANTINE_SPARK_REMOTE).

    .venv/bin/python benchmarks/operator_cli.py [--repeats 3]

Ingests the demo into a fresh warehouse, then fixes one quarantined order `--repeats` times each way,
each time as a new `quarantine-assets` process, as an operator types it. The first command after the
server starts is reported apart: it pays the server's first Delta reads and writes.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import write_results

CLI = Path(sys.executable).parent / "quarantine-assets"
WIDE = {"COLUMNS": "250"}


def timed(args: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run([str(CLI), *args], env=env, capture_output=True, text=True, check=True)
    return round(time.perf_counter() - started, 3)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    repeats = parser.parse_args().repeats
    root = tempfile.mkdtemp(prefix="bench-warehouse-")
    own = os.environ | WIDE | {"DAGSTER_HOME": tempfile.mkdtemp(prefix="bench-dagster-")}
    own["QUARANTINE_SPARK_REMOTE"] = "embedded"
    subprocess.run([str(CLI), "--warehouse", root, "demo"], env=own, capture_output=True, check=True)
    listed = subprocess.run(
        [str(CLI), "--warehouse", root, "list", "--source", "demo.bronze.orders", "--status", "quarantined"],
        env=own,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    key = re.search(r"│ ([0-9a-f]{24}-\d+) │", listed).group(1)
    fix = ["--warehouse", root, "fix", key, "--source", "demo.bronze.orders", "--set", "amount=12.5", "--by", "bench"]

    own_jvm = [timed(fix, own) for _ in range(repeats)]
    port = free_port()
    started = time.perf_counter()
    server = subprocess.Popen(
        [str(CLI), "--warehouse", root, "spark-server", "--port", str(port)],
        env=own,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        server.stdout.readline()
        server_start = round(time.perf_counter() - started, 3)
        attached_env = own | {"QUARANTINE_SPARK_REMOTE": f"sc://127.0.0.1:{port}"}
        first = timed(fix, attached_env)
        attached = [timed(fix, attached_env) for _ in range(repeats)]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=120)

    own_median, attached_median = statistics.median(own_jvm), statistics.median(attached)
    path = write_results(
        "operator-cli",
        {
            "command": "quarantine-assets fix <key> --set amount=12.5",
            "own_jvm_seconds": own_jvm,
            "own_jvm_median": own_median,
            "server_start_seconds": server_start,
            "attached_first_seconds": first,
            "attached_seconds": attached,
            "attached_median": attached_median,
            "own_jvm_over_attached": round(own_median / attached_median, 2),
        },
    )
    print(f"fix, own JVM: median {own_median:.1f} s {own_jvm}")
    print(f"spark-server start: {server_start:.1f} s; first fix attached: {first:.1f} s")
    print(f"fix, attached: median {attached_median:.1f} s {attached} ({own_median / attached_median:.1f}x faster)")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
