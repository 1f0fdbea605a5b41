"""Cold and warm demo run times: a fresh warehouse, then the same warehouse again.

    .venv/bin/python benchmarks/demo_times.py

Each run is `quarantine-assets demo` in its own process, as a user runs it, so each pays a JVM start.
The demo itself prints its JVM start and Dagster run times.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLI = Path(sys.executable).parent / "quarantine-assets"


def run(label: str, warehouse: Path) -> None:
    started = time.perf_counter()
    completed = subprocess.run(
        [str(CLI), "--warehouse", str(warehouse), "demo"],
        env=os.environ | {"DAGSTER_HOME": tempfile.mkdtemp(prefix="bench-dagster-")},
        capture_output=True,
        text=True,
        check=True,
    )
    elapsed = time.perf_counter() - started
    summary = [line for line in completed.stdout.splitlines() if line.startswith("JVM start")]
    print(f"{label}: {elapsed:.1f} s wall ({summary[-1] if summary else 'no summary'})")


def main() -> None:
    warehouse = Path(tempfile.mkdtemp(prefix="bench-warehouse-"))
    run("cold (new warehouse, tables created, first batch)", warehouse)
    run("warm (same warehouse, next batch)", warehouse)


if __name__ == "__main__":
    main()
