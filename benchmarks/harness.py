"""What every benchmark shares: one Spark session, generated sources, medians, Spark job counts, JSON results."""

from __future__ import annotations

import json
import platform
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from quarantine_assets.config.models import DataQualityAction, DeltaSource, QuarantineSpec, Rule
from quarantine_assets.engine.lake.tables import Warehouse

RESULTS = Path(__file__).resolve().parent / "results"
RULES = (
    Rule(name="valid_order_id", expression="order_id IS NOT NULL"),
    Rule(name="non_negative_amount", expression="amount >= 0"),
    Rule(name="known_currency", expression="currency IN ('EUR', 'USD', 'GBP')"),
)
CLEAN = " AND ".join(f"({rule.expression})" for rule in RULES)


def generate_orders(spark: SparkSession, rows: int, bad_share: float, seed: int = 7) -> DataFrame:
    """Orders whose bad rows fail one rule each, a third of them through a NULL operand."""
    draw = F.abs(F.xxhash64(F.col("id"), F.lit(seed))) % 1_000_000 / 1_000_000.0
    defect = F.abs(F.xxhash64(F.col("id"), F.lit(seed + 1))) % 3
    bad = draw < bad_share
    return spark.range(rows).select(
        F.col("id").alias("row_no"),
        F.when(bad & (defect == 0), F.lit(None)).otherwise((F.col("id") % 100_000).cast("int")).alias("order_id"),
        F.when(bad & (defect == 1), -F.lit(1.5)).otherwise((F.col("id") % 997) / 10.0).alias("amount"),
        F.when(bad & (defect == 2), F.lit(None))
        .otherwise(F.element_at(F.array(F.lit("EUR"), F.lit("USD"), F.lit("GBP")), (F.col("id") % 3 + 1).cast("int")))
        .alias("currency"),
        F.concat(F.lit("c"), (F.col("id") % 5000).cast("string")).alias("customer_id"),
        (F.lit("2026-11-01 00:00:00").cast("timestamp") + F.make_dt_interval(secs=F.col("id") % 86400)).alias(
            "order_ts"
        ),
        F.when(F.col("id") % 7 == 0, F.lit(None)).otherwise(F.lit("standard delivery")).alias("note"),
    )


ORDERS_DDL = (
    "row_no BIGINT, order_id INT, amount DOUBLE, currency STRING, customer_id STRING, order_ts TIMESTAMP, note STRING"
)


def write_order_lines(spark: SparkSession, folder: Path, rows: int, bad_share: float, malformed_share: float) -> None:
    """`generate_orders` as JSON or CSV lines (by `folder`'s suffix), of which `malformed_share` do not parse:
    half cut short, half with a word where `order_id`'s number belongs."""
    orders = generate_orders(spark, rows, bad_share)
    if folder.suffix == ".json":
        line = F.to_json(F.struct(*orders.columns))
        mistyped = F.regexp_replace(line, '"order_id":[0-9]+', '"order_id":"five"')
    else:
        fields = [F.coalesce(F.col(name).cast("string"), F.lit("")) for name in orders.columns]
        line = F.concat_ws(",", *fields)
        mistyped = F.concat_ws(",", fields[0], F.lit("five"), *fields[2:])
    draw = F.abs(F.xxhash64(F.col("row_no"), F.lit(11))) % 1_000_000 / 1_000_000.0
    malformed = F.when(draw < malformed_share / 2, F.substring(line, 1, 20)).when(draw < malformed_share, mistyped)
    orders.select(malformed.otherwise(line).alias("value")).write.mode("overwrite").text(str(folder))


def bench_action(name: str, source_table: str, inbox_table: str = "bench.ops.dlq") -> DataQualityAction:
    return DataQualityAction(
        pipeline="bench",
        flowgroup="orders",
        name=name,
        config_file=Path("benchmarks/split.py"),
        source=DeltaSource(table=source_table),
        target_table=f"bench.out.{name}_validated",
        expectations_file=Path("benchmarks/split.py"),
        rules=RULES,
        mode="quarantine",
        quarantine=QuarantineSpec(inbox_table=inbox_table, source_table=f"bench.src.{name}"),
        config_version="bench",
    )


class JobCounter:
    """Spark jobs started between two reads: the scheduler's next job id, which every job takes."""

    def __init__(self, spark: SparkSession):
        self._scheduler = spark.sparkContext._jsc.sc().dagScheduler()

    def now(self) -> int:
        return int(self._scheduler.nextJobId())


@dataclass
class Measurement:
    name: str
    seconds: list[float] = field(default_factory=list)
    spark_jobs: list[int] = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "median_seconds": round(self.median, 3),
            "seconds": [round(s, 3) for s in self.seconds],
            "spark_jobs": self.spark_jobs,
            **self.extra,
        }


def measure_side_by_side(
    spark: SparkSession, repeats: int, contenders: dict[str, tuple[Callable[[], None], Callable[[], None]]]
) -> dict[str, Measurement]:
    """Each contender's `(prepare, run)`: prepare untimed, run timed; the contenders take turns in
    every round, so a JVM still warming up or a busy moment costs each of them alike."""
    jobs = JobCounter(spark)
    results = {name: Measurement(name) for name in contenders}
    for _ in range(repeats):
        for name, (prepare, run) in contenders.items():
            prepare()
            before, started = jobs.now(), time.perf_counter()
            run()
            results[name].seconds.append(time.perf_counter() - started)
            results[name].spark_jobs.append(jobs.now() - before)
    return results


def fresh(warehouse: Warehouse, *tables: str) -> None:
    for table in tables:
        shutil.rmtree(warehouse.path(table), ignore_errors=True)


def write_results(kind: str, payload: dict) -> Path:
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS / f"{kind}-{stamp}.json"
    payload = {"benchmark": kind, "at": stamp, "machine": machine()} | payload
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def latest_results(kind: str) -> dict:
    """The newest JSON a benchmark wrote; its name starts with the kind and sorts by time."""
    newest = max(RESULTS.glob(f"{kind}-*.json"), default=None)
    if newest is None:
        raise SystemExit(f"no {kind} results in {RESULTS}: run that benchmark first")
    return json.loads(newest.read_text())


def machine() -> dict:
    cpus = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    return {"python": platform.python_version(), "cpus": cpus, "system": platform.platform()}
