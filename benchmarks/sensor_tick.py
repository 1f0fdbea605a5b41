"""Recycle sensor tick on an inbox with thousands of commits: delta-rs (what the sensor does) vs Spark.

    .venv/bin/python benchmarks/sensor_tick.py --commits 2000

Builds an inbox with that many commits (one small insert or fix each), then times, in one run:
- the sensor's question ("rows of this source fixed after version V?") answered by delta-rs, as a tick
  with a recent cursor and as a first tick reading the whole history, through the real Dagster sensor;
- the same question answered by Spark (change feed read), the baseline, with and without the JVM start.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from dagster import build_sensor_context
from rich.console import Console
from rich.table import Table

from quarantine_assets.config.models import DataQualityAction, DeltaSource, QuarantineSpec, Rule
from quarantine_assets.defs.resources import WarehouseResource
from quarantine_assets.defs.sensors import recycle_sensor
from quarantine_assets.engine.lake.inbox_feed import fixed_since
from quarantine_assets.engine.lake.tables import Warehouse
from quarantine_assets.engine.spark.dlq_tables import create_dlq_tables

SOURCE = "bench.bronze.orders"
DLQ = "bench.ops.dlq"


def action() -> DataQualityAction:
    return DataQualityAction(
        pipeline="bench",
        flowgroup="orders",
        name="dq_orders",
        config_file=Path("bench.yaml"),
        source=DeltaSource(table="bench.raw.orders"),
        target_table="bench.bronze.orders_validated",
        expectations_file=Path("bench-rules.yaml"),
        rules=(Rule(name="valid_order_id", expression="order_id IS NOT NULL"),),
        mode="quarantine",
        quarantine=QuarantineSpec(inbox_table=DLQ, source_table=SOURCE),
        config_version="bench",
    )


def build_inbox(spark, warehouse: Warehouse, commits: int) -> None:
    create_dlq_tables(spark, warehouse, DLQ)
    path = warehouse.path(DLQ)
    for n in range(commits):
        if n % 10 == 9:  # every tenth commit an operator fixes the row inserted before it
            spark.sql(
                f"UPDATE delta.`{path}` SET _dlq_status = 'fixed' "
                f"WHERE _dlq_source_table = '{SOURCE}' AND _dlq_sk = 'k{n - 1}'"
            )
        else:
            spark.sql(
                f"INSERT INTO delta.`{path}` "
                "(_dlq_sk, _dlq_source_table, _dlq_status, _dlq_timestamp, _row_data, _dlq_attempt) "
                f"VALUES ('k{n}', '{SOURCE}', 'quarantined', current_timestamp(), "
                "parse_json('{\"order_id\": null}'), 1)"
            )


def timed(function, repeats: int) -> tuple[float, object]:
    seconds, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = function()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warehouse", type=Path, help="reuse the inbox a previous run built under this warehouse")
    args = parser.parse_args()
    console = Console()

    from quarantine_assets.engine.spark.session import build_spark_session

    root = args.warehouse or Path(tempfile.mkdtemp(prefix="sensor-bench-"))
    warehouse = Warehouse(root)
    jvm_started = time.perf_counter()
    spark = build_spark_session()
    jvm_seconds = time.perf_counter() - jvm_started
    if args.warehouse is None:
        built = time.perf_counter()
        build_inbox(spark, warehouse, args.commits)
        console.print(f"built an inbox with {args.commits} commits in {time.perf_counter() - built:.0f}s at {root}")
    path = warehouse.path(DLQ)
    latest = warehouse.delta_table(DLQ).version()
    recent_cursor = latest - 10
    sensor = recycle_sensor(action())
    resources = {"warehouse": WarehouseResource(root=str(root))}

    def tick(cursor):
        return lambda: sensor(build_sensor_context(cursor=cursor, resources=resources))

    def spark_question(after: int):
        def ask():
            changes = (
                spark.read.format("delta")
                .option("readChangeFeed", "true")
                .option("startingVersion", after + 1)
                .load(path)
            )
            return changes.where(
                "_change_type IN ('insert', 'update_postimage') AND _dlq_status = 'fixed' "
                f"AND _dlq_source_table = '{SOURCE}'"
            ).count()

        return ask

    rows = [
        ("sensor tick, recent cursor (delta-rs)", *timed(tick(str(recent_cursor)), args.repeats)),
        ("sensor tick, first tick: whole history (delta-rs)", *timed(tick(None), args.repeats)),
        (
            "same question, recent cursor (delta-rs, engine only)",
            *timed(lambda: fixed_since(warehouse.delta_table(DLQ), SOURCE, recent_cursor), args.repeats),
        ),
        ("baseline: Spark change feed, recent cursor (JVM warm)", *timed(spark_question(recent_cursor), args.repeats)),
        ("baseline: Spark change feed, whole history (JVM warm)", *timed(spark_question(-1), args.repeats)),
    ]
    table = Table(title=f"recycle sensor on an inbox with {latest + 1} commits (median of {args.repeats})")
    table.add_column("what")
    table.add_column("seconds", justify="right")
    for name, seconds, _ in rows:
        table.add_row(name, f"{seconds:.3f}")
    table.add_row("baseline: JVM start (a tick that needed Spark would pay this too)", f"{jvm_seconds:.1f}")
    console.print(table)
    tick_recent, spark_recent = rows[0][1], rows[3][1]
    console.print(
        f"ratio, recent cursor: Spark warm / delta-rs tick = {spark_recent / tick_recent:.1f}x; "
        f"Spark incl. JVM start / delta-rs tick = {(spark_recent + jvm_seconds) / tick_recent:.0f}x"
    )


if __name__ == "__main__":
    main()
