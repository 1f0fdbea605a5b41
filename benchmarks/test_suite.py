"""Test files of the suite run as `make test` runs them (expressions interpreted, the suite's setting), and with
Spark's default, code generation, as the baseline: the same files, in turns, each run in a JVM of its own.

    .venv/bin/python benchmarks/test_suite.py [--rounds 2] [tests/spark/test_data_checks.py ...]

Each run's wall time includes its JVM start, the same in both settings. Results go to
`benchmarks/results/test-suite-*.json`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from harness import write_results

REPO = Path(__file__).resolve().parent.parent
DEFAULT_FILES = ("tests/spark/test_data_checks.py",)
# The suite's conftest sets PYSPARK_SUBMIT_ARGS only when it is unset: given, it keeps Spark's defaults.
SETTINGS = {
    "interpreted (the suite's)": {},
    "code generation (Spark's default)": {"PYSPARK_SUBMIT_ARGS": "pyspark-shell"},
}


def run_seconds(files: list[str], extra: dict[str, str]) -> float:
    env = {key: value for key, value in os.environ.items() if key != "PYSPARK_SUBMIT_ARGS"} | extra
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"{files} failed:\n{done.stdout[-3000:]}")
    return round(time.perf_counter() - started, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("files", nargs="*", default=list(DEFAULT_FILES))
    options = parser.parse_args()
    seconds = {setting: [] for setting in SETTINGS}
    for _ in range(options.rounds):
        for setting, extra in SETTINGS.items():
            seconds[setting].append(run_seconds(options.files, extra))
            print(setting, seconds[setting][-1], flush=True)
    medians = {setting: statistics.median(values) for setting, values in seconds.items()}
    interpreted, generated = medians.values()
    path = write_results(
        "test-suite",
        {
            "files": options.files,
            "seconds": seconds,
            "medians": medians,
            "interpreted_over_code_generation": round(interpreted / generated, 2),
        },
    )
    print(f"interpreted / code generation: {interpreted / generated:.2f}; results in {path}")


if __name__ == "__main__":
    main()
