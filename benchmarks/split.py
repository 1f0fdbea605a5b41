"""The split and the recycle path against their baselines, side by side in one process, one Spark configuration.

    .venv/bin/python benchmarks/split.py throughput     # (a) vs the plain write, (b) vs the reference algorithm
    .venv/bin/python benchmarks/split.py inbox-size     # (d) a fixed batch into an inbox of 0, 1M, 5M rows
    .venv/bin/python benchmarks/split.py recycle        # (e) outbox + recycled vs appending the rows directly
    .venv/bin/python benchmarks/split.py fixed-cost     # (c) a warm 10k split, Spark jobs per step
    .venv/bin/python benchmarks/split.py fix-commit     # a one-row fix's commit: UPDATE vs MERGE
    .venv/bin/python benchmarks/split.py bulk-fix       # fix --where of 10k and 100k rows, and their recycle
    .venv/bin/python benchmarks/split.py memory         # (g) peak driver memory per step, 1M vs 5M rows
    .venv/bin/python benchmarks/split.py table-properties   # an append's cost under each property an inbox needs
    .venv/bin/python benchmarks/split.py context        # the record's added context (errors, times, redaction)
    .venv/bin/python benchmarks/split.py context --source json   # ... of JSON lines, some of which do not parse
    .venv/bin/python benchmarks/split.py plot           # PNG plots of the newest results

The baselines are written in `baselines.py`, from Lakehouse Plumber's quarantine and from plain Spark, not taken
from the engine.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer
from baselines import create_rejected_table, direct_append, plain_split, reference_split, two_appends
from dagster import DagsterInstance
from delta.tables import DeltaTable
from harness import (
    ORDERS_DDL,
    RESULTS,
    RULES,
    Measurement,
    bench_action,
    fresh,
    generate_orders,
    latest_results,
    measure_side_by_side,
    write_order_lines,
    write_results,
)
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from quarantine_assets.config.models import FileSource
from quarantine_assets.demo import generate_batch, next_batch_number
from quarantine_assets.engine.lake.dlq_schema import (
    CLUSTERING_COLUMN,
    INBOX_CONTEXT_COLUMNS,
    INBOX_CORE_COLUMNS,
    KEY,
    ROW_DATA,
)
from quarantine_assets.engine.lake.tables import INBOX_PROPERTIES, Warehouse
from quarantine_assets.engine.spark.bulk_fix import FieldChanges, Selection, fix_where
from quarantine_assets.engine.spark.claims import claim_slice
from quarantine_assets.engine.spark.dlq_tables import create_dlq_tables
from quarantine_assets.engine.spark.inbox import Provenance, inbox_records
from quarantine_assets.engine.spark.operator import (
    RowFilter,
    fix_rows,
    fixed_row_data,
    inbox_rows,
    marked_fixed,
    oldest_quarantined_age,
    payload_with_changes,
    update_open_keys,
    update_open_rows,
)
from quarantine_assets.engine.spark.outbox import run_outbox
from quarantine_assets.engine.spark.recycled import run_recycled
from quarantine_assets.engine.spark.rules import passes, with_failed_rules
from quarantine_assets.engine.spark.session import build_spark_session
from quarantine_assets.engine.spark.split import run_split

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
    rows: Annotated[list[int], typer.Option(help="Source sizes.")] = [10_000, 1_000_000, 5_000_000],
    bad: Annotated[list[float], typer.Option(help="Shares of bad rows.")] = [0.02, 0.2],
    repeats: int = 3,
    warehouse_dir: Annotated[Path, typer.Option("--warehouse")] = None,
) -> None:
    """(a) our split against the plain write; (b) against the reference algorithm; and against two appends,
    the least any DLQ on Delta writes (the plain write, then the rejected rows as they are into a table
    with the inbox's properties)."""
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
            rejected_table = root / "_rejected_as_they_are"

            def prepare() -> None:
                fresh(warehouse, action.target_table, action.quarantine.inbox_table, action.quarantine.outbox_table)
                shutil.rmtree(checkpoint, ignore_errors=True)
                shutil.rmtree(rejected_table, ignore_errors=True)
                shutil.rmtree(warehouse.checkpoint(action.key, "split"), ignore_errors=True)
                create_dlq_tables(spark, warehouse, action.quarantine.inbox_table)
                create_rejected_table(
                    spark, rejected_table, spark.read.format("delta").load(str(warehouse.path(source)))
                )
                claim_slice(spark, warehouse, action, "bench")  # once per slice in production: not timed

            measured = measure_side_by_side(
                spark,
                repeats,
                {
                    "split": (prepare, lambda: run_split(spark, action, warehouse, "bench")),
                    "plain": (prepare, lambda: plain_split(spark, action, warehouse, checkpoint)),
                    "reference": (prepare, lambda: reference_split(spark, action, warehouse, checkpoint)),
                    "two_appends": (
                        prepare,
                        lambda: two_appends(spark, action, warehouse, rejected_table, checkpoint),
                    ),
                },
            )
            ours, plain, reference, floor = (measured[name] for name in ("split", "plain", "reference", "two_appends"))
            row = _compared(
                size,
                share,
                measured,
                {
                    "ratio_to_plain": ("split", "plain"),
                    "ratio_to_reference": ("split", "reference"),
                    "ratio_to_two_appends": ("split", "two_appends"),
                    "two_appends_to_plain": ("two_appends", "plain"),
                },
            )
            results.append(row)
            typer.echo(
                f"{size:>9} rows {share:>5.0%} bad: split {ours.median:6.2f}s  plain {plain.median:6.2f}s  "
                f"reference {reference.median:6.2f}s  two appends {floor.median:6.2f}s  "
                f"split/plain {row['ratio_to_plain']:.2f}  split/reference {row['ratio_to_reference']:.2f}  "
                f"split/two appends {row['ratio_to_two_appends']:.2f}  two appends/plain "
                f"{row['two_appends_to_plain']:.2f}  jobs {ours.spark_jobs[-1]}/{plain.spark_jobs[-1]}/"
                f"{reference.spark_jobs[-1]}/{floor.spark_jobs[-1]}"
            )
    typer.echo(write_results("split-throughput", {"results": results}))


def _compared(
    rows: int, bad_share: float, measured: dict[str, Measurement], ratios: dict[str, tuple[str, str]]
) -> dict:
    """One source size's measurements, and each named ratio of one contender's median to another's."""
    return {
        "rows": rows,
        "bad_share": bad_share,
        "measurements": [measurement.as_dict() for measurement in measured.values()],
    } | {name: round(measured[ours].median / measured[baseline].median, 3) for name, (ours, baseline) in ratios.items()}


# The context columns the record's context added (`_dlq_errors`, arrival and resolution): a DLQ
# without them is what the split wrote before, and the split computes nothing for absent columns.
ADDED_CONTEXT = (
    "_dlq_errors",
    "_dlq_arrived_at",
    "_dlq_resolved_by",
    "_dlq_source_file",
    "_dlq_source_position",
    "_dlq_source_version",
)


def _create_inbox_without(
    spark: SparkSession, warehouse: Warehouse, inbox_table: str, left_out: tuple[str, ...]
) -> None:
    columns = {name: sql_type for name, sql_type in (INBOX_CORE_COLUMNS | INBOX_CONTEXT_COLUMNS).items()}
    columns = {name: sql_type for name, sql_type in columns.items() if name not in left_out}
    properties = ", ".join(f"'{key}' = '{value}'" for key, value in INBOX_PROPERTIES.items())
    spark.sql(
        f"CREATE TABLE delta.`{warehouse.path(inbox_table)}` ({', '.join(f'{n} {t}' for n, t in columns.items())}) "
        f"USING DELTA CLUSTER BY ({CLUSTERING_COLUMN}) TBLPROPERTIES ({properties})"
    )


@app.command()
def context(
    rows: Annotated[list[int], typer.Option(help="Source sizes.")] = [100_000, 1_000_000],
    bad: float = 0.2,
    repeats: int = 3,
    source_format: Annotated[str, typer.Option("--source", help="delta, or json or csv lines.")] = "delta",
    malformed: Annotated[float, typer.Option(help="Share of json or csv lines that do not parse.")] = 0.05,
    warehouse_dir: Annotated[Path, typer.Option("--warehouse")] = None,
) -> None:
    """The split as it was (a DLQ without the added context columns) against the split writing every
    context column, and against the same with two sensitive columns redacted. For json or csv lines,
    the context includes the message of each record that did not parse."""
    root = warehouse_dir or Path(tempfile.mkdtemp(prefix="bench-context-"))
    warehouse = Warehouse(root)
    spark = build_spark_session()
    _warm_up(spark, warehouse)
    results = []
    for size in rows:
        if source_format == "delta":
            action = bench_action(f"context_{size}", _source(spark, warehouse, size, bad))
        else:
            lines = root / "landing" / f"orders_{size}_{int(bad * 100)}_{int(malformed * 100)}.{source_format}"
            if not lines.exists():
                write_order_lines(spark, lines, size, bad, malformed)
            source = FileSource(path=str(lines), format=source_format, schema_ddl=ORDERS_DDL)
            action = bench_action(f"context_{size}", lines.stem).model_copy(update={"source": source})
        quarantine = action.quarantine.model_copy(update={"sensitive_columns": ("customer_id", "note")})
        redacting = action.model_copy(update={"quarantine": quarantine})

        def prepare(left_out: tuple[str, ...]):
            def run() -> None:
                fresh(warehouse, action.target_table, action.quarantine.inbox_table, action.quarantine.outbox_table)
                shutil.rmtree(warehouse.checkpoint(action.key, "split"), ignore_errors=True)
                _create_inbox_without(spark, warehouse, action.quarantine.inbox_table, left_out)
                create_dlq_tables(spark, warehouse, action.quarantine.inbox_table)
                claim_slice(spark, warehouse, action, "bench")

            return run

        measured = measure_side_by_side(
            spark,
            repeats,
            {
                "before": (prepare(ADDED_CONTEXT), lambda: run_split(spark, action, warehouse, "bench")),
                "context": (prepare(()), lambda: run_split(spark, action, warehouse, "bench")),
                "redacted": (prepare(()), lambda: run_split(spark, redacting, warehouse, "bench")),
            },
        )
        before, with_context, redacted = measured["before"], measured["context"], measured["redacted"]
        row = _compared(
            size,
            bad,
            measured,
            {"context_to_before": ("context", "before"), "redacted_to_before": ("redacted", "before")},
        )
        row |= {"source": source_format, "malformed_share": malformed if source_format != "delta" else 0.0}
        results.append(row)
        typer.echo(
            f"{size:>9} rows {bad:.0%} bad: before {before.median:6.2f}s  context {with_context.median:6.2f}s  "
            f"redacted {redacted.median:6.2f}s  context/before {row['context_to_before']:.2f}  "
            f"redacted/before {row['redacted_to_before']:.2f}"
        )
    typer.echo(write_results("split-context", {"results": results}))


@app.command("inbox-size")
def inbox_size(
    sizes: Annotated[list[int], typer.Option("--inbox-rows", help="Rows already in the inbox.")] = [
        0,
        1_000_000,
        5_000_000,
    ],
    batch_rows: int = 100_000,
    bad: float = 0.2,
    repeats: int = 3,
    warehouse_dir: Annotated[Path, typer.Option("--warehouse")] = None,
) -> None:
    """(d) the split step of a fixed batch into an inbox already holding rows of other sources and its own.

    Timed as the asset runs it: the split, then the oldest-quarantined-age check on the slice.
    """
    root = warehouse_dir or Path(tempfile.mkdtemp(prefix="bench-inbox-"))
    warehouse = Warehouse(root)
    spark = build_spark_session()
    _warm_up(spark, warehouse)
    source = _source(spark, warehouse, batch_rows, bad)
    results = []
    for size in sizes:
        action = bench_action("inbox_size", source, inbox_table=f"bench.ops.dlq_{size}")
        if not DeltaTable.isDeltaTable(spark, str(warehouse.path(action.quarantine.inbox_table))):
            create_dlq_tables(spark, warehouse, action.quarantine.inbox_table)
            claim_slice(spark, warehouse, action, "bench")  # once per slice in production: not timed
            fill_inbox(spark, warehouse, action, size)

        def prepare() -> None:
            fresh(warehouse, action.target_table)
            shutil.rmtree(warehouse.checkpoint(action.key, "split"), ignore_errors=True)

        def split_step() -> None:
            run_split(spark, action, warehouse, "bench")
            this_slice = RowFilter(source_table=action.quarantine.source_table)
            oldest_quarantined_age(inbox_rows(spark, warehouse, action.quarantine.inbox_table, this_slice))

        measured = measure_side_by_side(spark, repeats, {"split_step": (prepare, split_step)})["split_step"]
        results.append({"inbox_rows": size, "measurements": [measured.as_dict()]})
        typer.echo(f"inbox of {size:>9} rows: split step {measured.median:.2f}s  jobs {measured.spark_jobs[-1]}")
    base = results[0]["measurements"][0]["median_seconds"]
    for row in results:
        row["ratio_to_empty_inbox"] = round(row["measurements"][0]["median_seconds"] / base, 3)
    typer.echo(f"ratios to the empty inbox: {[row['ratio_to_empty_inbox'] for row in results]}")
    typer.echo(write_results("inbox-size", {"batch_rows": batch_rows, "bad_share": bad, "results": results}))


def fill_inbox(spark: SparkSession, warehouse: Warehouse, action, rows: int) -> None:
    """Half the rows from three other sources, half from the action's own source, in batches as splits write them."""
    if not rows:
        return
    other = [f"bench.src.other_{n}" for n in range(3)]
    sources = [*other, action.quarantine.source_table, action.quarantine.source_table, action.quarantine.source_table]
    per_batch = max(rows // len(sources), 1)
    for batch_id, source_table in enumerate(sources):
        provenance = Provenance(source_table, "bench/fill/" + source_table, "fill", "bench", "fill", batch_id)
        outcomes = {rule.name: passes(rule) for rule in RULES}  # the generated rows are judged alike each time
        quarantined = with_failed_rules(generate_orders(spark, per_batch, 1.0, seed=batch_id), RULES, outcomes)
        inbox_records(quarantined, provenance).write.format("delta").mode("append").save(
            str(warehouse.path(action.quarantine.inbox_table))
        )


@app.command()
def recycle(
    rows: Annotated[int, typer.Option(help="Fixed rows to recycle.")] = 10_000,
    repeats: int = 3,
    warehouse_dir: Annotated[Path, typer.Option("--warehouse")] = None,
) -> None:
    """(e) outbox + recycled of fixed rows against appending the same rows directly, with a txn id, into an existing
    table."""
    root = warehouse_dir or Path(tempfile.mkdtemp(prefix="bench-recycle-"))
    warehouse = Warehouse(root)
    spark = build_spark_session()
    _warm_up(spark, warehouse, rounds=1)
    source = _source(spark, warehouse, rows, 1.0)
    action = bench_action(f"recycle_{rows}", source)
    fixed_rows = root / "_fixed_rows"
    generate_orders(spark, rows, 0.0).write.format("delta").mode("overwrite").save(str(fixed_rows))
    # The fair floor appends into a validated table that already holds rows, as the recycled step does.
    direct_target = root / "_direct_target"
    direct_append(spark, fixed_rows, direct_target, 0)
    direct_batches = itertools.count(1)

    def quarantine_and_fix() -> None:
        quarantine_from_scratch(spark, warehouse, action)
        fix_every_row(spark, warehouse.path(action.quarantine.inbox_table))

    def recycle_all() -> None:
        run_outbox(spark, action, warehouse, "bench")
        report = run_recycled(spark, action, warehouse, "bench")
        assert report.rows_landed == rows, report

    measured = measure_side_by_side(
        spark,
        repeats,
        {
            "recycle": (quarantine_and_fix, recycle_all),
            "direct_append": (
                lambda: None,
                lambda: direct_append(spark, fixed_rows, direct_target, next(direct_batches)),
            ),
        },
    )
    ours, direct = measured["recycle"], measured["direct_append"]
    ratio = round(ours.median / direct.median, 3)
    typer.echo(
        f"{rows} fixed rows: outbox + recycled {ours.median:.2f}s  direct append {direct.median:.2f}s"
        f"  ratio {ratio:.2f}"
        f"  jobs {ours.spark_jobs[-1]}/{direct.spark_jobs[-1]}"
    )
    typer.echo(
        write_results("recycle", {"rows": rows, "measurements": [m.as_dict() for m in (ours, direct)], "ratio": ratio})
    )


def quarantine_from_scratch(spark: SparkSession, warehouse: Warehouse, action) -> None:
    """The action's tables and checkpoints anew, then its split: every bad row of its source quarantined."""
    fresh(warehouse, action.target_table, action.quarantine.inbox_table, action.quarantine.outbox_table)
    for stream in ("split", "outbox", "recycled"):
        shutil.rmtree(warehouse.checkpoint(action.key, stream), ignore_errors=True)
    create_dlq_tables(spark, warehouse, action.quarantine.inbox_table)
    run_split(spark, action, warehouse, "bench")


@app.command("bulk-fix")
def bulk_fix(
    rows: Annotated[list[int], typer.Option(help="Quarantined rows to fix at once.")] = [10_000, 100_000],
    repeats: int = 3,
    warehouse_dir: Annotated[Path, typer.Option("--warehouse")] = None,
) -> None:
    """`fix --where ... --set-expr ...` of every quarantined row, alone and with the recycle that lands them,
    against appending the same rows, fixed, directly with a txn id."""
    root = warehouse_dir or Path(tempfile.mkdtemp(prefix="bench-bulk-fix-"))
    warehouse = Warehouse(root)
    spark = build_spark_session()
    _warm_up(spark, warehouse, rounds=1)
    selection = Selection("_dlq_status = 'quarantined'")
    # Each generated bad row fails one rule: a NULL order_id, a negative amount or a NULL currency.
    changes = FieldChanges(
        {"order_id": "coalesce(order_id, 1)", "amount": "abs(amount)", "currency": "coalesce(currency, 'EUR')"}
    )
    results = []
    for size in rows:
        source = _source(spark, warehouse, size, 1.0)
        action = bench_action(f"bulk_fix_{size}", source)
        fixed_rows = root / f"_fixed_rows_{size}"
        generate_orders(spark, size, 0.0).write.format("delta").mode("overwrite").save(str(fixed_rows))
        direct_target = root / "_direct_target"

        quarantine = functools.partial(quarantine_from_scratch, spark, warehouse, action)

        def fix() -> None:
            assert fix_where(spark, warehouse, action, selection, changes, by="bench").rows_changed == size

        def fix_and_recycle() -> None:
            fix()
            run_outbox(spark, action, warehouse, "bench")
            report = run_recycled(spark, action, warehouse, "bench")
            assert report.rows_landed == report.rows_appended == size, report

        measured = measure_side_by_side(
            spark,
            repeats,
            {
                "fix": (quarantine, fix),
                "fix_and_recycle": (quarantine, fix_and_recycle),
                "direct_append": (
                    lambda: shutil.rmtree(direct_target, ignore_errors=True),
                    lambda: direct_append(spark, fixed_rows, direct_target, 0),
                ),
            },
        )
        row = _compared(
            size,
            1.0,
            measured,
            {
                "fix_to_direct": ("fix", "direct_append"),
                "fix_and_recycle_to_direct": ("fix_and_recycle", "direct_append"),
            },
        )
        results.append(row)
        typer.echo(
            f"{size:>7} rows: fix {measured['fix'].median:6.2f}s"
            f"  fix + recycle {measured['fix_and_recycle'].median:6.2f}s"
            f"  direct append {measured['direct_append'].median:6.2f}s  fix/direct {row['fix_to_direct']:.2f}"
            f"  fix + recycle/direct {row['fix_and_recycle_to_direct']:.2f}"
        )
    typer.echo(write_results("bulk-fix", {"results": results}))


@app.command("fix-commit")
def fix_commit(
    repeats: int = 5,
    warehouse_dir: Annotated[Path, typer.Option("--warehouse")] = None,
) -> None:
    """The commit of a one-row `fix <key> --set`: the UPDATE that names the key against a MERGE of the same values
    from a one-row DataFrame (how `fix` committed before; `fix --where` still MERGEs), into one inbox, alternately."""
    root = warehouse_dir or Path(tempfile.mkdtemp(prefix="bench-fix-commit-"))
    warehouse = Warehouse(root)
    spark = build_spark_session()
    action = bench_action("fix_commit", _source(spark, warehouse, 1_000, 0.05))
    quarantine_from_scratch(spark, warehouse, action)
    inbox = warehouse.path(action.quarantine.inbox_table)
    key = spark.read.format("delta").load(inbox).select(KEY).first()[KEY]
    changes = {"amount": 12.5}
    values = {ROW_DATA: fixed_row_data(changes, whole_payload=False)}

    def merged() -> None:
        fixed = {name: F.expr(value) for name, value in marked_fixed("bench").items()}
        one_row = spark.createDataFrame([(key, json.dumps(changes))], f"{KEY} STRING, payload STRING")
        updates = one_row.withColumn("_changes", F.variant_get(F.parse_json("payload"), "$", "map<string, variant>"))
        computed = {ROW_DATA: payload_with_changes(f"dlq.{ROW_DATA}", "new._changes")}
        assert update_open_rows(spark, warehouse, action, updates.withColumns(fixed), "bench", computed).rows_changed

    def updated() -> None:
        assert update_open_keys(spark, warehouse, action, [key], values | marked_fixed("bench"), "bench").rows_changed

    measured = measure_side_by_side(
        spark, repeats, {"update": (lambda: None, updated), "merge": (lambda: None, merged)}
    )
    ours, before = measured["update"], measured["merge"]
    ratio = round(ours.median / before.median, 3)
    typer.echo(
        f"one-row fix: UPDATE {ours.median:.2f}s  MERGE {before.median:.2f}s  ratio {ratio:.2f}"
        f"  jobs {ours.spark_jobs[-1]}/{before.spark_jobs[-1]}"
    )
    typer.echo(write_results("fix-commit", {"measurements": [m.as_dict() for m in (ours, before)], "ratio": ratio}))


@app.command("fixed-cost")
def fixed_cost(
    repeats: int = 3,
    warehouse_dir: Annotated[Path, typer.Option("--warehouse")] = None,
) -> None:
    """(c) what a step costs whatever its size: a warm 10k-row split, the demo's `split_all` run, each step's
    Spark jobs, and a second `quarantine-assets demo` in its own process against a fresh JVM's first Delta write."""
    root = warehouse_dir or Path(tempfile.mkdtemp(prefix="bench-fixed-"))
    warehouse = Warehouse(root)
    spark = build_spark_session()
    _warm_up(spark, warehouse)
    source = _source(spark, warehouse, 10_000, 0.02)
    action = bench_action("fixed_10k", source)
    steps = {}

    def prepare() -> None:
        fresh(warehouse, action.target_table, action.quarantine.inbox_table, action.quarantine.outbox_table)
        for stream in ("split", "outbox", "recycled"):
            shutil.rmtree(warehouse.checkpoint(action.key, stream), ignore_errors=True)
        create_dlq_tables(spark, warehouse, action.quarantine.inbox_table)
        claim_slice(spark, warehouse, action, "bench")  # once per slice in production: not timed

    steps |= measure_side_by_side(
        spark, repeats, {"split_10k": (prepare, lambda: run_split(spark, action, warehouse, "bench"))}
    )
    inbox = warehouse.path(action.quarantine.inbox_table)

    def one_key() -> str:
        return spark.read.format("delta").load(str(inbox)).where("_dlq_status = 'quarantined'").first()["_dlq_sk"]

    steps |= measure_side_by_side(
        spark,
        repeats,
        {
            "fix_one_row": (
                lambda: None,
                lambda: fix_rows(spark, warehouse, action, [one_key()], set_fields={"order_id": 1}, by="bench"),
            ),
            "outbox": (lambda: None, lambda: run_outbox(spark, action, warehouse, "bench")),
            "recycled": (lambda: None, lambda: run_recycled(spark, action, warehouse, "bench")),
        },
    )
    demo_project = root / "_demo"
    steps |= measure_side_by_side(
        spark,
        repeats,
        {
            "demo_split_all_run": (
                lambda: generate_batch(demo_project / "_landing", next_batch_number(demo_project / "_landing")),
                demo_split_all(spark, demo_project),
            )
        },
    )
    for name, measured in steps.items():
        typer.echo(f"{name:>20}: {measured.median:6.2f}s warm, {measured.spark_jobs[-1]} Spark jobs")
    processes = {
        "second_demo_process": [
            str(Path(sys.executable).parent / "quarantine-assets"),
            "--warehouse",
            str(root / "_demo_cli"),
            "demo",
        ],
        "fresh_jvm_first_delta_write": [sys.executable, __file__, "first-delta-write", str(root / "_first_write")],
    }
    walls = {}
    for name, command in processes.items():
        walls[name] = [_wall(command) for _ in range(repeats + (name == "second_demo_process"))]
        if name == "second_demo_process":
            walls[name] = walls[name][1:]  # the first run creates the tables and pays Ivy's first resolution
        typer.echo(f"{name:>28}: {statistics.median(walls[name]):6.2f}s wall (median of {len(walls[name])})")
    typer.echo(
        write_results(
            "fixed-cost",
            {
                "steps": [measured.as_dict() for measured in steps.values()],
                "processes": {
                    name: {"median_seconds": round(statistics.median(w), 3), "seconds": [round(s, 3) for s in w]}
                    for name, w in walls.items()
                },
            },
        )
    )


@app.command("table-properties")
def table_properties(
    rows: Annotated[int, typer.Option(help="Rows per append.")] = 10_000,
    repeats: int = 5,
    warehouse_dir: Annotated[Path, typer.Option("--warehouse")] = None,
) -> None:
    """What each table property Lakehouse Plumber requires of an inbox adds to one append, against a table without them.

    Every DLQ commit (the split's inbox append, the outbox's append and both MERGEs of a recycle)
    is made into such a table, so this is a floor under each of them."""
    root = warehouse_dir or Path(tempfile.mkdtemp(prefix="bench-properties-"))
    spark = build_spark_session()
    orders = generate_orders(spark, rows, 1.0)
    variants = {"no_properties": {}} | {key: {key: "true"} for key in INBOX_PROPERTIES} | {"inbox": INBOX_PROPERTIES}
    contenders = {}
    for name, properties in variants.items():
        path = root / name
        listed = ", ".join(f"'{key}' = '{value}'" for key, value in properties.items())
        spark.sql(
            f"CREATE TABLE delta.`{path}` ({ORDERS_DDL}) USING delta" + (f" TBLPROPERTIES ({listed})" if listed else "")
        )
        append = functools.partial(orders.write.format("delta").mode("append").save, str(path))
        contenders[name] = (lambda: None, append)
    measure_side_by_side(spark, 1, contenders)  # the first append of each pays the JVM's warm-up
    measured = measure_side_by_side(spark, repeats, contenders)
    baseline = measured["no_properties"].median
    for name, measurement in measured.items():
        typer.echo(
            f"{name:>28}: {measurement.median:5.2f}s  ratio {measurement.median / baseline:4.2f}  "
            f"{measurement.spark_jobs[-1]} Spark jobs"
        )
    typer.echo(
        write_results(
            "table-properties",
            {
                "rows": rows,
                "measurements": [m.as_dict() for m in measured.values()],
                "ratio_to_no_properties": {name: round(m.median / baseline, 3) for name, m in measured.items()},
            },
        )
    )


def demo_split_all(spark: SparkSession, root: Path):
    """The demo's `split_all` job, in this process: the Spark session is already warm."""
    from quarantine_assets.config.loader import load_project
    from quarantine_assets.defs.definitions import SPLIT_JOB, build_definitions
    from quarantine_assets.defs.resources import default_resources
    from quarantine_assets.demo_run import QUIET_RUN

    project = load_project(warehouse=root)
    for inbox_table in project.inbox_tables:
        create_dlq_tables(spark, Warehouse(root), inbox_table)
    job = build_definitions(project, default_resources(root)).resolve_job_def(SPLIT_JOB)
    instance = DagsterInstance.ephemeral()
    return lambda: job.execute_in_process(run_config=QUIET_RUN, instance=instance)


@app.command("first-delta-write", hidden=True)
def first_delta_write(path: Path) -> None:
    """The floor of any step in a new process: start the JVM, append one row to a Delta table."""
    build_spark_session().range(1).write.format("delta").mode("append").save(str(path))


def _wall(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, capture_output=True, check=True, env=os.environ | {"DAGSTER_HOME": tempfile.mkdtemp()})
    return time.perf_counter() - started


MEMORY_STEPS = ("source", "split", "fix", "recycle")


@app.command()
def memory(
    rows: Annotated[list[int], typer.Option(help="Source sizes.")] = [1_000_000, 5_000_000],
    bad: float = 0.02,
    warehouse_dir: Annotated[Path, typer.Option("--warehouse")] = None,
) -> None:
    """(g) peak resident memory of the driver JVM and of Python, per step, each step in its own process."""
    root = warehouse_dir or Path(tempfile.mkdtemp(prefix="bench-memory-"))
    results = []
    for size in rows:
        for step in MEMORY_STEPS:
            completed = subprocess.run(
                [sys.executable, __file__, "memory-step", step, str(size), str(bad), str(root)],
                capture_output=True,
                text=True,
                check=True,
            )
            peak = json.loads(completed.stdout.strip().splitlines()[-1])
            if step in ("split", "recycle"):
                results.append({"rows": size, "step": step} | peak)
                typer.echo(
                    f"{size:>9} rows {step:>8}: JVM peak {peak['jvm_peak_mib']} MiB, "
                    f"Python peak {peak['python_peak_mib']} MiB, {peak['seconds']}s"
                )
    typer.echo(write_results("memory", {"bad_share": bad, "results": results}))


@app.command("memory-step", hidden=True)
def memory_step(step: str, rows: int, bad: float, root: Path) -> None:
    """One step of `memory`, alone in this process, then its peaks as one line of JSON."""
    warehouse = Warehouse(root)
    spark = build_spark_session()
    action = bench_action(f"memory_{rows}", f"bench.raw.orders_{rows}_{int(bad * 100)}")
    started = time.perf_counter()
    if step == "source":
        _source(spark, warehouse, rows, bad)
    elif step == "split":
        fresh(warehouse, action.target_table, action.quarantine.inbox_table, action.quarantine.outbox_table)
        for stream in ("split", "outbox", "recycled"):
            shutil.rmtree(warehouse.checkpoint(action.key, stream), ignore_errors=True)
        create_dlq_tables(spark, warehouse, action.quarantine.inbox_table)
        run_split(spark, action, warehouse, "bench")
    elif step == "fix":
        fix_every_row(spark, warehouse.path(action.quarantine.inbox_table))
    else:
        run_outbox(spark, action, warehouse, "bench")
        run_recycled(spark, action, warehouse, "bench")
    seconds = round(time.perf_counter() - started, 2)
    jvm_pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    print(
        json.dumps(
            {"jvm_peak_mib": peak_rss_mib(jvm_pid), "python_peak_mib": peak_rss_mib(os.getpid()), "seconds": seconds}
        )
    )


def peak_rss_mib(pid: int) -> int:
    """The kernel's high-water mark of the process's resident memory (VmHWM)."""
    status = Path(f"/proc/{pid}/status").read_text()
    kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
    return kib // 1024


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


@app.command()
def plot() -> None:
    """PNG plots of the newest results: time against rows (throughput), time against inbox size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    throughput_results = latest_results("split-throughput")["results"]
    shares = sorted({row["bad_share"] for row in throughput_results})
    figure, axes = plt.subplots(1, len(shares), figsize=(6 * len(shares), 4.5), squeeze=False)
    for axis, share in zip(axes[0], shares):
        rows = sorted((row for row in throughput_results if row["bad_share"] == share), key=lambda row: row["rows"])
        for contender in ("split", "plain", "reference", "two_appends"):
            seconds = [next(m["median_seconds"] for m in row["measurements"] if m["name"] == contender) for row in rows]
            axis.plot([row["rows"] for row in rows], seconds, marker="o", label=contender)
        axis.set(xscale="log", xlabel="rows in the batch", ylabel="seconds (median)", title=f"{share:.0%} bad rows")
        axis.legend()
        axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(RESULTS / "split-throughput.png", dpi=110)

    inbox_results = latest_results("inbox-size")
    figure, axis = plt.subplots(figsize=(6, 4.5))
    sizes = [row["inbox_rows"] for row in inbox_results["results"]]
    axis.plot(sizes, [row["measurements"][0]["median_seconds"] for row in inbox_results["results"]], marker="o")
    axis.set(
        xlabel="rows already in the inbox",
        ylabel="seconds (median)",
        ylim=(0, None),
        title=f"split step, {inbox_results['batch_rows']:,} rows, {inbox_results['bad_share']:.0%} bad",
    )
    axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(RESULTS / "inbox-size.png", dpi=110)
    typer.echo(f"wrote {RESULTS / 'split-throughput.png'} and {RESULTS / 'inbox-size.png'}")


def _warm_up(spark: SparkSession, warehouse: Warehouse, rounds: int = 3) -> None:
    """Each contender a few times on 100k rows: a JVM keeps getting faster for its first minute."""
    source = _source(spark, warehouse, 100_000, 0.2)
    for round_ in range(rounds):
        action = bench_action(f"warm_up_{round_}", source)
        create_dlq_tables(spark, warehouse, action.quarantine.inbox_table)
        run_split(spark, action, warehouse, "warm-up")
        plain_split(spark, action, warehouse, Path(warehouse.root, "_bench_checkpoints", f"warm_up_plain_{round_}"))
        reference_split(spark, action, warehouse, Path(warehouse.root, "_bench_checkpoints", f"warm_up_ref_{round_}"))


if __name__ == "__main__":
    app()
