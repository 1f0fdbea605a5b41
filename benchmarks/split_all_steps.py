"""Where the demo's `split_all` run could go faster by running its split steps side by side, attached to the
local server, each round a new demo batch, the contenders in turns:

- `in_process`: the run as it is, each action's split a step, one after the other in the run's process;
- `multiprocess`: the same steps, two at a time, each in a process forked from a fork server that
  preloaded the definitions (Dagster's multiprocess executor), no pool limit;
- `actions_in_sequence` and `actions_in_threads`: each action's split, metrics row and examples, without
  Dagster, one after the other or in threads of one process (what one step per DLQ would run).

    .venv/bin/python benchmarks/split_all_steps.py --rounds 4
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

WAREHOUSE_VARIABLE = "SPLIT_ALL_STEPS_WAREHOUSE"

if os.environ.get(WAREHOUSE_VARIABLE):  # loaded again by Dagster's step processes
    from dagster import Definitions, in_process_executor, multiprocess_executor

    from quarantine_assets.config.loader import load_project
    from quarantine_assets.defs.definitions import build_definitions
    from quarantine_assets.defs.resources import default_resources

    _root = os.environ[WAREHOUSE_VARIABLE]
    _built = build_definitions(load_project(warehouse=_root), default_resources(_root))
    in_process_defs, multiprocess_defs = (
        Definitions(
            assets=_built.assets,
            asset_checks=_built.asset_checks,
            jobs=_built.jobs,
            resources=_built.resources,
            executor=executor,
        )
        for executor in (in_process_executor, multiprocess_executor)
    )


def main(rounds: int) -> None:
    from dagster import DagsterInstance, execute_job
    from dagster._core.definitions.reconstruct import ReconstructableRepository
    from harness import write_results

    from quarantine_assets.config.loader import load_project
    from quarantine_assets.defs.definitions import SPLIT_JOB
    from quarantine_assets.demo import generate_batch, next_batch_number
    from quarantine_assets.demo_run import QUIET_RUN
    from quarantine_assets.engine.lake.tables import Warehouse
    from quarantine_assets.engine.spark.dlq_tables import create_dlq_tables
    from quarantine_assets.engine.spark.metrics import record_step
    from quarantine_assets.engine.spark.operator import examples_by_rule
    from quarantine_assets.engine.spark.session import spark_session
    from quarantine_assets.engine.spark.split import run_split

    root = Path(tempfile.mkdtemp(prefix="bench-split-all-steps-"))
    os.environ[WAREHOUSE_VARIABLE] = str(root)
    warehouse = Warehouse(root)
    project = load_project(warehouse=root)
    spark = spark_session(warehouse)
    for inbox_table in project.inbox_tables:
        create_dlq_tables(spark, warehouse, inbox_table)
    actions = [action for action in project.actions if action.quarantine]
    jobs = {
        executor: ReconstructableRepository.for_file(
            __file__, f"{executor}_defs", working_directory=str(Path(__file__).parent)
        ).get_reconstructable_job(SPLIT_JOB)
        for executor in ("in_process", "multiprocess")
    }
    forked = QUIET_RUN | {
        "execution": {
            "config": {"max_concurrent": 2, "start_method": {"forkserver": {"preload_modules": ["split_all_steps"]}}}
        }
    }

    def run(executor: str, run_config: dict) -> None:
        assert execute_job(jobs[executor], instance=instance, run_config=run_config).success

    def action_split(action, run_id: str) -> None:
        report = run_split(spark, action, warehouse, run_id)
        with ThreadPoolExecutor(max_workers=1) as beside:  # as the split step writes its metrics row
            recorded = beside.submit(record_step, spark, warehouse, action, run_id, "split", {"read": report.rows_read})
            top = [name for name, count in report.failures_per_rule.most_common(3) if count]
            if top:
                examples_by_rule(spark, warehouse, action, run_id, top, 3)
            recorded.result()

    def in_sequence() -> None:
        run_id = f"sequence-{time.time_ns()}"
        for action in actions:
            action_split(action, run_id)

    def in_threads() -> None:
        run_id = f"threads-{time.time_ns()}"
        with ThreadPoolExecutor(max_workers=len(actions)) as pool:
            list(pool.map(lambda action: action_split(action, run_id), actions))

    contenders = {
        "in_process": lambda: run("in_process", QUIET_RUN),
        "multiprocess": lambda: run("multiprocess", forked),
        "actions_in_sequence": in_sequence,
        "actions_in_threads": in_threads,
    }
    seconds = {name: [] for name in contenders}
    with DagsterInstance.local_temp(tempfile.mkdtemp(prefix="bench-dagster-")) as instance:
        for name, contender in contenders.items():  # warm-up round, not counted
            generate_batch(root / "_landing", next_batch_number(root / "_landing"))
            contender()
        for _ in range(rounds):
            for name, contender in contenders.items():
                generate_batch(root / "_landing", next_batch_number(root / "_landing"))
                started = time.perf_counter()
                contender()
                seconds[name].append(round(time.perf_counter() - started, 3))
    medians = {name: statistics.median(taken) for name, taken in seconds.items()}
    for name, taken in seconds.items():
        print(f"{name:>20}: median {medians[name]:5.2f} s  {taken}")
    path = write_results(
        "split-all-steps",
        {
            "rounds": rounds,
            "actions": [action.key for action in actions],
            "seconds": seconds,
            "median_seconds": medians,
            "multiprocess_over_in_process": round(medians["multiprocess"] / medians["in_process"], 2),
            "threads_over_sequence": round(medians["actions_in_threads"] / medians["actions_in_sequence"], 2),
        },
    )
    print(f"results: {path}")


if __name__ == "__main__":  # the fork server imports this module again
    main(int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 4)
