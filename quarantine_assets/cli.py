"""`quarantine-assets`: setup, validation, the demo, and the operator tools."""

from __future__ import annotations

import getpass
import json
import sys
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Optional

import typer
from pyspark.sql import functions as F
from rich.console import Console
from rich.table import Table

from quarantine_assets.config.loader import load_project
from quarantine_assets.config.models import Project
from quarantine_assets.config.validation import rule_expression_problems
from quarantine_assets.engine.tables import Warehouse, create_dlq_tables, inbox_ddl, outbox_ddl
from quarantine_assets.engine import statuses
from quarantine_assets.engine.operator import (
    RowFilter,
    action_for_source,
    counts_by_rule_and_status,
    discard_rows,
    fix_rows,
    inbox_rows,
    listing,
    oldest_quarantined_age,
    parse_json_object,
)
from quarantine_assets.errors import ConfigError, OperatorError, QuarantineError
from quarantine_assets.settings import default_warehouse

app = typer.Typer(
    help="A dead-letter queue for Spark + Delta pipelines, orchestrated by Dagster.", no_args_is_help=True
)
console = Console()
errors = Console(stderr=True)

ConfigDirOption = Annotated[
    Optional[Path], typer.Option("--config-dir", help="Configs folder (default: $QUARANTINE_CONFIG_DIR or ./configs).")
]
EnvOption = Annotated[
    Optional[str], typer.Option("--env", help="Substitutions environment (default: $QUARANTINE_ENV or dev).")
]
WarehouseOption = Annotated[
    Optional[Path], typer.Option("--warehouse", help="Warehouse root (default: $QUARANTINE_WAREHOUSE or ./warehouse).")
]


def _load(config_dir: Path | None, env: str | None, warehouse: Path | None) -> tuple[Project, Warehouse]:
    root = warehouse or default_warehouse()
    return load_project(config_dir, env, root), Warehouse(root)


def _print_problems(problems) -> None:
    for problem in problems:
        errors.print(
            str(problem), style="red" if problem.severity == "error" else "yellow", markup=False, soft_wrap=True
        )


def _dlq_tables(project: Project) -> list[str]:
    return sorted({action.quarantine.dlq_table for action in project.actions if action.quarantine})


@app.command()
def ddl(config_dir: ConfigDirOption = None, env: EnvOption = None, warehouse: WarehouseOption = None) -> None:
    """Print the CREATE TABLE statements for every DLQ inbox and outbox the configs name."""
    project, tables = _load(config_dir, env, warehouse)
    for dlq_table in _dlq_tables(project):
        console.print(f"-- inbox {dlq_table}\n{inbox_ddl(tables, dlq_table)};\n", markup=False, highlight=False)
        console.print(
            f"-- outbox {dlq_table}_outbox\n{outbox_ddl(tables, dlq_table)};\n", markup=False, highlight=False
        )


@app.command("create-tables")
def create_tables(config_dir: ConfigDirOption = None, env: EnvOption = None, warehouse: WarehouseOption = None) -> None:
    """Create every DLQ inbox and outbox the configs name (idempotent)."""
    from quarantine_assets.engine.session import build_spark_session

    project, tables = _load(config_dir, env, warehouse)
    spark = build_spark_session()
    for dlq_table in _dlq_tables(project):
        create_dlq_tables(spark, tables, dlq_table)
        console.print(f"created {dlq_table} and {dlq_table}_outbox under {tables.path(dlq_table).parent}")


@app.command()
def validate(
    config_dir: ConfigDirOption = None,
    env: EnvOption = None,
    parse_rules: Annotated[bool, typer.Option(help="Parse every rule with Spark's SQL parser (starts a JVM).")] = True,
) -> None:
    """Check every pipeline config; print every problem and exit non-zero if any is an error."""
    project, _ = _load(config_dir, env, None)
    problems = list(project.warnings)
    if parse_rules:
        from quarantine_assets.engine.session import build_spark_session

        problems += rule_expression_problems(project, build_spark_session())
    _print_problems(problems)
    if any(problem.severity == "error" for problem in problems):
        raise typer.Exit(1)
    console.print(f"{len(project.actions)} data-quality action(s) valid")


@app.command()
def demo(
    batches: Annotated[int, typer.Option(help="New input files per source to generate and ingest.")] = 1,
    warehouse: WarehouseOption = None,
) -> None:
    """Generate demo input, create the DLQ tables, and materialize every split through Dagster."""
    from quarantine_assets.demo_run import run_demo

    run_demo(console, batches, warehouse or default_warehouse())


SourceOption = Annotated[Optional[str], typer.Option("--source", help="Only this source_table (catalog.schema.table).")]
StatusOption = Annotated[Optional[str], typer.Option("--status", help=f"Only this status: {', '.join(statuses.ALL)}.")]
RuleOption = Annotated[Optional[str], typer.Option("--rule", help="Only rows that failed this rule.")]
OlderOption = Annotated[Optional[float], typer.Option("--older-than-hours", help="Only rows quarantined before this.")]
ByOption = Annotated[
    Optional[str], typer.Option("--by", help="Who makes the change, recorded on the row (default: your user name).")
]
RowsSourceOption = Annotated[str, typer.Option("--source", help="The source_table the rows belong to.")]


def _dlq_for(project: Project, dlq: str | None) -> str:
    names = _dlq_tables(project)
    if dlq is None and len(names) == 1:
        return names[0]
    if dlq not in names:
        raise OperatorError("QA-OPS-008", f"name the DLQ with --dlq; the configs have {names}")
    return dlq


def _operator_session():
    from quarantine_assets.engine.session import build_spark_session

    return build_spark_session()


DlqOption = Annotated[Optional[str], typer.Option("--dlq", help="DLQ inbox table (needed when configs have several).")]


def _print_frame(rows, title: str) -> None:
    table = Table(title=title)
    for column in rows.columns:
        table.add_column(column, overflow="fold")
    for row in rows.collect():
        table.add_row(*["" if value is None else str(value) for value in row])
    console.print(table)


@app.command("list")
def list_rows(
    source: SourceOption = None,
    status: StatusOption = None,
    rule: RuleOption = None,
    older_than_hours: OlderOption = None,
    limit: Annotated[int, typer.Option(help="At most this many rows.")] = 50,
    dlq: DlqOption = None,
    config_dir: ConfigDirOption = None,
    env: EnvOption = None,
    warehouse: WarehouseOption = None,
) -> None:
    """List DLQ rows, oldest first, with their failed rules and payload."""
    project, tables = _load(config_dir, env, warehouse)
    row_filter = RowFilter(source, status, rule, timedelta(hours=older_than_hours) if older_than_hours else None)
    rows = listing(inbox_rows(_operator_session(), tables, _dlq_for(project, dlq), row_filter)).limit(limit)
    _print_frame(rows, "DLQ rows")


@app.command()
def show(
    key: str,
    dlq: DlqOption = None,
    config_dir: ConfigDirOption = None,
    env: EnvOption = None,
    warehouse: WarehouseOption = None,
) -> None:
    """Show one DLQ row with every column."""
    project, tables = _load(config_dir, env, warehouse)
    rows = inbox_rows(_operator_session(), tables, _dlq_for(project, dlq), RowFilter())
    row = rows.where(F.col("_dlq_sk") == key).withColumn("_row_data", F.to_json("_row_data")).first()
    if row is None:
        raise OperatorError("QA-OPS-001", f"no DLQ row with key {key}", field=key)
    for name, value in row.asDict().items():
        console.print(f"[bold]{name}[/bold]: {value}", highlight=False)


@app.command()
def stats(
    source: SourceOption = None,
    dlq: DlqOption = None,
    config_dir: ConfigDirOption = None,
    env: EnvOption = None,
    warehouse: WarehouseOption = None,
) -> None:
    """Counts by source, failed rule and status, and the age of the oldest quarantined row."""
    project, tables = _load(config_dir, env, warehouse)
    rows = inbox_rows(_operator_session(), tables, _dlq_for(project, dlq), RowFilter(source_table=source)).cache()
    _print_frame(counts_by_rule_and_status(rows), "DLQ rows by rule and status")
    age = oldest_quarantined_age(rows)
    console.print(f"oldest quarantined row: {age if age is not None else 'none quarantined'}")


@app.command()
def fix(
    keys: list[str],
    source: RowsSourceOption,
    set_: Annotated[
        Optional[list[str]], typer.Option("--set", help="field=value; value is JSON if it parses, else text.")
    ] = None,
    payload: Annotated[
        Optional[str], typer.Option("--payload", help="Replace the whole payload with this JSON.")
    ] = None,
    by: ByOption = None,
    config_dir: ConfigDirOption = None,
    env: EnvOption = None,
    warehouse: WarehouseOption = None,
) -> None:
    """Correct rows and mark them fixed; the recycle sensor picks them up."""
    project, tables = _load(config_dir, env, warehouse)
    action = action_for_source(list(project.actions), source)
    changed = fix_rows(
        _operator_session(),
        tables,
        action,
        keys,
        set_fields=dict(_field_assignment(item) for item in set_) if set_ else None,
        payload=parse_json_object(payload, "--payload") if payload is not None else None,
        by=by or getpass.getuser(),
    )
    console.print(f"{changed} row(s) of {source} marked fixed")


def _field_assignment(item: str) -> tuple[str, object]:
    name, sep, text = item.partition("=")
    if not sep or not name:
        raise OperatorError("QA-OPS-005", f"--set takes field=value, got {item!r}", field="--set")
    try:
        return name, json.loads(text)
    except json.JSONDecodeError:
        return name, text


@app.command()
def discard(
    keys: list[str],
    source: RowsSourceOption,
    reason: Annotated[str, typer.Option("--reason", help="Why the rows are closed; recorded on each row.")],
    by: ByOption = None,
    config_dir: ConfigDirOption = None,
    env: EnvOption = None,
    warehouse: WarehouseOption = None,
) -> None:
    """Close rows that cannot be fixed, with a reason."""
    project, tables = _load(config_dir, env, warehouse)
    action = action_for_source(list(project.actions), source)
    changed = discard_rows(_operator_session(), tables, action, keys, reason=reason, by=by or getpass.getuser())
    console.print(f"{changed} row(s) of {source} discarded")


def main() -> None:
    """Refused input ends with its coded problems on stderr and exit 1, never a traceback."""
    try:
        app()
    except ConfigError as error:
        _print_problems(error.problems)
        sys.exit(1)
    except QuarantineError as error:
        errors.print(str(error), style="red", markup=False, soft_wrap=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
