"""The split against its baselines, side by side in one process with one Spark configuration.

    .venv/bin/python benchmarks/split.py throughput --rows 10000 --rows 1000000 --bad 0.02 --bad 0.2

Baselines, both written here:
- plain: the same `availableNow` stream and `foreachBatch`, filter, idempotent append to Delta
  (what `mode: dqe` with drop rules does, without the DLQ);
- reference: seed 000's algorithm: two reads of the source (clean filter, inverse filter) and an
  insert-only MERGE into the inbox on an `xxhash64` key alone.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from harness import CLEAN, RULES, bench_action, fresh, generate_orders, measure_side_by_side, write_results
from quarantine_assets.config.models import DataQualityAction
from quarantine_assets.engine.session import build_spark_session
from quarantine_assets.engine.split import run_split
from quarantine_assets.engine.tables import Warehouse, create_dlq_tables

app = typer.Typer(no_args_is_help=True)


@app.callback()
def main() -> None:
    """Each sub-command measures one figure against its baseline."""


def plain_split(spark: SparkSession, action: DataQualityAction, warehouse: Warehouse, checkpoint: Path) -> None:
    target = str(warehouse.path(action.target_table))

    def write(batch: DataFrame, batch_id: int) -> None:
        batch.where(F.coalesce(F.expr(CLEAN), F.lit(False))).write.format("delta").mode("append").option(
            "txnAppId", "plain"
        ).option("txnVersion", batch_id).save(target)

    _available_now(spark.readStream.format("delta").load(str(warehouse.path(action.source.table))), write, checkpoint)


def reference_split(spark: SparkSession, action: DataQualityAction, warehouse: Warehouse, checkpoint: Path) -> None:
    """Seed 000: a clean stream and a quarantine stream, each reading the source."""
    source = str(warehouse.path(action.source.table))
    clean = F.coalesce(F.expr(CLEAN), F.lit(False))
    target = str(warehouse.path(action.target_table))
    source_table = action.quarantine.source_table

    def write_clean(batch: DataFrame, batch_id: int) -> None:
        batch.where(clean).write.format("delta").mode("append").option("txnAppId", "ref").option(
            "txnVersion", batch_id
        ).save(target)

    failed = F.filter(
        F.array(
            *[
                F.when(~F.coalesce(F.expr(r.expression), F.lit(False)), F.struct(F.lit(r.name).alias("name"), F.lit(r.expression).alias("rule")))
                for r in RULES
            ]
        ),
        lambda x: x.isNotNull(),
    )
    inbox = DeltaTable.forPath(spark, str(warehouse.path(action.quarantine.dlq_table)))

    def merge_quarantined(batch: DataFrame, batch_id: int) -> None:
        columns = batch.columns
        records = batch.where(~clean).select(
            F.xxhash64(F.lit(source_table), F.to_json(F.struct(*columns))).cast("string").alias("_dlq_sk"),
            F.lit(source_table).alias("_dlq_source_table"),
            F.lit("quarantined").alias("_dlq_status"),
            F.current_timestamp().alias("_dlq_timestamp"),
            failed.alias("_dlq_failed_rules"),
            F.lit(None).cast("string").alias("_dlq_rescued_data"),
            F.to_variant_object(F.struct(*columns)).alias("_row_data"),
        )
        (
            inbox.alias("dlq")
            .merge(records.alias("new"), f"dlq._dlq_source_table = '{source_table}' AND dlq._dlq_sk = new._dlq_sk")
            .whenNotMatchedInsert(values={c: F.col(f"new.{c}") for c in records.columns})
            .execute()
        )

    stream = spark.readStream.format("delta").load(source)
    _available_now(stream, write_clean, checkpoint / "clean")
    _available_now(stream, merge_quarantined, checkpoint / "quarantine")


def _available_now(stream: DataFrame, on_batch, checkpoint: Path) -> None:
    query = stream.writeStream.foreachBatch(on_batch).option("checkpointLocation", str(checkpoint))
    query.trigger(availableNow=True).start().awaitTermination()


def _source(spark: SparkSession, warehouse: Warehouse, rows: int, bad: float) -> str:
    table = f"bench.raw.orders_{rows}_{int(bad * 100)}"
    path = warehouse.path(table)
    if not DeltaTable.isDeltaTable(spark, str(path)):
        generate_orders(spark, rows, bad).write.format("delta").save(str(path))
    return table


@app.command()
def throughput(
    rows: Annotated[list[int], typer.Option(help="Source sizes.")] = [10_000, 1_000_000],
    bad: Annotated[list[float], typer.Option(help="Shares of bad rows.")] = [0.02, 0.2],
    repeats: int = 3,
    warehouse_dir: Annotated[Path, typer.Option("--warehouse")] = None,
) -> None:
    """(a) our split against the plain write; (b) against the reference algorithm."""
    root = warehouse_dir or Path(tempfile.mkdtemp(prefix="bench-split-"))
    warehouse = Warehouse(root)
    spark = build_spark_session()
    _warm_up(spark, warehouse)
    results = []
    for size in rows:
        for share in bad:
            source = _source(spark, warehouse, size, share)
            action = bench_action(f"orders_{size}_{int(share * 100)}", source)
            checkpoint = root / "_bench_checkpoints" / action.key

            def prepare() -> None:
                fresh(warehouse, action.target_table, action.quarantine.dlq_table, action.quarantine.outbox_table)
                shutil.rmtree(checkpoint, ignore_errors=True)
                shutil.rmtree(warehouse.checkpoint(action.key, "split"), ignore_errors=True)
                create_dlq_tables(spark, warehouse, action.quarantine.dlq_table)

            measured = measure_side_by_side(
                spark,
                repeats,
                {
                    "split": (prepare, lambda: run_split(spark, action, warehouse, "bench")),
                    "plain": (prepare, lambda: plain_split(spark, action, warehouse, checkpoint)),
                    "reference": (prepare, lambda: reference_split(spark, action, warehouse, checkpoint)),
                },
            )
            ours, plain, reference = measured["split"], measured["plain"], measured["reference"]
            row = {
                "rows": size,
                "bad_share": share,
                "measurements": [m.as_dict() for m in (ours, plain, reference)],
                "ratio_to_plain": round(ours.median / plain.median, 3),
                "ratio_to_reference": round(ours.median / reference.median, 3),
            }
            results.append(row)
            typer.echo(
                f"{size:>9} rows {share:>5.0%} bad: split {ours.median:6.2f}s  plain {plain.median:6.2f}s  "
                f"reference {reference.median:6.2f}s  split/plain {row['ratio_to_plain']:.2f}  "
                f"split/reference {row['ratio_to_reference']:.2f}  jobs {ours.spark_jobs[-1]}/{plain.spark_jobs[-1]}/"
                f"{reference.spark_jobs[-1]}"
            )
    typer.echo(write_results("split-throughput", {"results": results}))


def _warm_up(spark: SparkSession, warehouse: Warehouse, rounds: int = 3) -> None:
    """Each contender a few times on 100k rows: a JVM keeps getting faster for its first minute."""
    source = _source(spark, warehouse, 100_000, 0.2)
    for round_ in range(rounds):
        action = bench_action(f"warm_up_{round_}", source)
        create_dlq_tables(spark, warehouse, action.quarantine.dlq_table)
        run_split(spark, action, warehouse, "warm-up")
        plain_split(spark, action, warehouse, warehouse.root / "_bench_checkpoints" / f"warm_up_plain_{round_}")
        reference_split(spark, action, warehouse, warehouse.root / "_bench_checkpoints" / f"warm_up_ref_{round_}")


if __name__ == "__main__":
    app()
