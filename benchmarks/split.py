"""The split and the recycle path against their baselines, side by side in one process, one Spark configuration.

    .venv/bin/python benchmarks/split.py throughput     # (a) vs the plain write, (b) vs the reference algorithm
    .venv/bin/python benchmarks/split.py inbox-size     # (d) a fixed batch into an inbox of 0, 1M, 5M rows
    .venv/bin/python benchmarks/split.py recycle        # (e) outbox + recycled vs appending the rows directly
    .venv/bin/python benchmarks/split.py fixed-cost     # (c) a warm 10k split, Spark jobs per step
    .venv/bin/python benchmarks/split.py memory         # (g) peak driver memory per step, 1M vs 5M rows
    .venv/bin/python benchmarks/split.py plot           # PNG plots of the newest results

The baselines are written in `baselines.py`, from seed 000 and from plain Spark, not taken from the engine.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from baselines import direct_append, plain_split, reference_split
from harness import bench_action, fresh, generate_orders, measure_side_by_side, write_results
from quarantine_assets.engine.session import build_spark_session
from quarantine_assets.engine.outbox import run_outbox
from quarantine_assets.engine.recycled import run_recycled
from quarantine_assets.engine.split import run_split
from quarantine_assets.engine.tables import Warehouse, create_dlq_tables

app = typer.Typer(no_args_is_help=True)


@app.callback()
def main() -> None:
    """Each sub-command measures one figure against its baseline."""


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


@app.command()
def recycle(
    rows: Annotated[int, typer.Option(help="Fixed rows to recycle.")] = 10_000,
    repeats: int = 3,
    warehouse_dir: Annotated[Path, typer.Option("--warehouse")] = None,
) -> None:
    """(e) outbox + recycled of fixed rows against appending the same rows directly."""
    root = warehouse_dir or Path(tempfile.mkdtemp(prefix="bench-recycle-"))
    warehouse = Warehouse(root)
    spark = build_spark_session()
    _warm_up(spark, warehouse, rounds=1)
    source = _source(spark, warehouse, rows, 1.0)
    action = bench_action(f"recycle_{rows}", source)
    fixed_rows = root / "_fixed_rows"
    generate_orders(spark, rows, 0.0).write.format("delta").mode("overwrite").save(str(fixed_rows))
    direct_target = root / "_direct_target"

    def quarantine_and_fix() -> None:
        fresh(warehouse, action.target_table, action.quarantine.dlq_table, action.quarantine.outbox_table)
        for stream in ("split", "outbox", "recycled"):
            shutil.rmtree(warehouse.checkpoint(action.key, stream), ignore_errors=True)
        create_dlq_tables(spark, warehouse, action.quarantine.dlq_table)
        run_split(spark, action, warehouse, "bench")
        fix_every_row(spark, warehouse.path(action.quarantine.dlq_table))

    def recycle_all() -> None:
        run_outbox(spark, action, warehouse, "bench")
        report = run_recycled(spark, action, warehouse, "bench")
        assert report.rows_recycled == rows, report

    measured = measure_side_by_side(
        spark,
        repeats,
        {
            "recycle": (quarantine_and_fix, recycle_all),
            "direct_append": (
                lambda: shutil.rmtree(direct_target, ignore_errors=True),
                lambda: direct_append(spark, fixed_rows, direct_target, 0),
            ),
        },
    )
    ours, direct = measured["recycle"], measured["direct_append"]
    ratio = round(ours.median / direct.median, 3)
    typer.echo(
        f"{rows} fixed rows: outbox + recycled {ours.median:.2f}s  direct append {direct.median:.2f}s  ratio {ratio:.2f}"
        f"  jobs {ours.spark_jobs[-1]}/{direct.spark_jobs[-1]}"
    )
    typer.echo(
        write_results("recycle", {"rows": rows, "measurements": [m.as_dict() for m in (ours, direct)], "ratio": ratio})
    )


def fix_every_row(spark: SparkSession, inbox: Path) -> None:
    """What an operator does, for every row at once: a payload that passes every rule, status fixed."""
    value = lambda field, kind: f"variant_get(_row_data, '$.{field}', '{kind}')"  # noqa: E731
    spark.sql(
        f"""UPDATE delta.`{inbox}` SET _dlq_status = 'fixed', _row_data = to_variant_object(named_struct(
            'row_no', {value("row_no", "bigint")}, 'order_id', coalesce({value("order_id", "int")}, 1),
            'amount', abs({value("amount", "double")}), 'currency', coalesce({value("currency", "string")}, 'EUR'),
            'customer_id', {value("customer_id", "string")}, 'order_ts', {value("order_ts", "timestamp")},
            'note', {value("note", "string")}))"""
    )


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
