"""`quarantine-assets`: setup, validation, and the demo."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from quarantine_assets.config.loader import load_project
from quarantine_assets.config.models import Project
from quarantine_assets.config.validation import rule_expression_problems
from quarantine_assets.engine.tables import Warehouse, create_dlq_tables, inbox_ddl, outbox_ddl
from quarantine_assets.errors import ConfigError, QuarantineError
from quarantine_assets.settings import default_warehouse

app = typer.Typer(help="A dead-letter queue for Spark + Delta pipelines, orchestrated by Dagster.", no_args_is_help=True)
console = Console()
errors = Console(stderr=True)

ConfigDirOption = Annotated[
    Optional[Path], typer.Option("--config-dir", help="Configs folder (default: $QUARANTINE_CONFIG_DIR or ./configs).")
]
EnvOption = Annotated[Optional[str], typer.Option("--env", help="Substitutions environment (default: $QUARANTINE_ENV or dev).")]
WarehouseOption = Annotated[
    Optional[Path], typer.Option("--warehouse", help="Warehouse root (default: $QUARANTINE_WAREHOUSE or ./warehouse).")
]


def _load(config_dir: Path | None, env: str | None, warehouse: Path | None) -> tuple[Project, Warehouse]:
    root = warehouse or default_warehouse()
    try:
        return load_project(config_dir, env, root), Warehouse(root)
    except ConfigError as error:
        _print_problems(error.problems)
        raise typer.Exit(1) from None


def _print_problems(problems) -> None:
    for problem in problems:
        errors.print(str(problem), style="red" if problem.severity == "error" else "yellow", markup=False)


def _dlq_tables(project: Project) -> list[str]:
    return sorted({action.quarantine.dlq_table for action in project.actions if action.quarantine})


@app.command()
def ddl(config_dir: ConfigDirOption = None, env: EnvOption = None, warehouse: WarehouseOption = None) -> None:
    """Print the CREATE TABLE statements for every DLQ inbox and outbox the configs name."""
    project, tables = _load(config_dir, env, warehouse)
    for dlq_table in _dlq_tables(project):
        console.print(f"-- inbox {dlq_table}\n{inbox_ddl(tables, dlq_table)};\n", markup=False, highlight=False)
        console.print(f"-- outbox {dlq_table}_outbox\n{outbox_ddl(tables, dlq_table)};\n", markup=False, highlight=False)


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

    try:
        run_demo(console, batches, warehouse or default_warehouse())
    except QuarantineError as error:
        errors.print(str(error), style="red", markup=False)
        raise typer.Exit(1) from None


if __name__ == "__main__":
    app()
