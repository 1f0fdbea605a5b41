"""Test files of the suite run with its setting (expressions interpreted; in one process, where `make test` runs two
workers), and with Spark's default, code generation, as the baseline: the same files, in turns, each run in a JVM of
its own.

    .venv/bin/python benchmarks/test_suite.py [--rounds 2] [--submit-args="--conf ..."]... [tests/spark/...py ...]

Each `--submit-args` adds a setting: the suite's, with those `spark-submit` arguments before its own (a
Spark setting, `--conf spark.sql.adaptive.enabled=false`; the JVM's options, `--driver-java-options
'-XX:TieredStopAtLevel=1'`). Each run's wall time includes its JVM start, the same in every
setting. Results go to `benchmarks/results/test-suite-*.json`.
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
sys.path.insert(0, str(REPO / "tests"))
from conftest import INTERPRETED  # noqa: E402

DEFAULT_FILES = ("tests/spark/test_data_checks.py",)
# The suite's conftest sets PYSPARK_SUBMIT_ARGS only when it is unset: given, it keeps Spark's defaults.
SUITE = "interpreted (the suite's)"
CODE_GENERATION = "code generation (Spark's default)"
SETTINGS = {SUITE: {}, CODE_GENERATION: {"PYSPARK_SUBMIT_ARGS": "pyspark-shell"}}


def with_submit_args(arguments: str) -> dict[str, str]:
    """The suite's setting, with more `spark-submit` arguments."""
    return {"PYSPARK_SUBMIT_ARGS": f"{arguments} {INTERPRETED}"}


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
    parser.add_argument("--no-code-generation", action="store_true", help="leave out Spark's default setting")
    parser.add_argument("--submit-args", action="append", default=[], help="spark-submit arguments of one more setting")
    parser.add_argument("files", nargs="*", default=list(DEFAULT_FILES))
    options = parser.parse_args()
    baselines = {SUITE: SETTINGS[SUITE]} if options.no_code_generation else SETTINGS
    settings = baselines | {f"the suite's, with {more}": with_submit_args(more) for more in options.submit_args}
    seconds = {setting: [] for setting in settings}
    for _ in range(options.rounds):
        for setting, extra in settings.items():
            seconds[setting].append(run_seconds(options.files, extra))
            print(setting, seconds[setting][-1], flush=True)
    medians = {setting: statistics.median(values) for setting, values in seconds.items()}
    over_suite = {setting: round(median / medians[SUITE], 2) for setting, median in medians.items()}
    path = write_results(
        "test-suite",
        {
            "files": options.files,
            "seconds": seconds,
            "medians": medians,
            "interpreted_over_code_generation": (
                round(medians[SUITE] / medians[CODE_GENERATION], 2) if CODE_GENERATION in medians else None
            ),
            "over_the_suites_setting": over_suite,
        },
    )
    for setting, ratio in over_suite.items():
        print(f"{setting}: {ratio:.2f} of the suite's time")
    print(f"results in {path}")


if __name__ == "__main__":
    main()
