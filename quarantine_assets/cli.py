"""`quarantine-assets`: setup, validation, the demo, and the operator tools.

The options every command shares (`--config-dir`, `--env`, `--warehouse`) come before the command:
`quarantine-assets --warehouse /data/wh list --source demo.bronze.orders`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import getpass
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from quarantine_assets import codes, commands
from quarantine_assets.config.loader import load_project
from quarantine_assets.config.models import DataQualityAction, Project, outbox_table
from quarantine_assets.config.validation import rule_expression_problems
from quarantine_assets.display import CELL_CHARACTERS, json_line, shown
from quarantine_assets.engine.lake import statuses
from quarantine_assets.engine.lake.claims import claims
from quarantine_assets.engine.lake.dlq_schema import (
    ERRORS,
    FILE_SIZE,
    ROW_DATA,
    SOURCE_FILE,
    SOURCE_TABLE,
    STATUS,
    TIMESTAMP,
)
from quarantine_assets.engine.lake.locate import record_location
from quarantine_assets.engine.lake.tables import Warehouse, inbox_ddl, outbox_ddl
from quarantine_assets.engine.spark.bulk_fix import DryRun, FieldChanges, FixCommand, apply_fix, field_expressions
from quarantine_assets.engine.spark.claims import release_claim, transfer_claim
from quarantine_assets.engine.spark.dlq_tables import create_dlq_tables, upgrade_dlq_tables
from quarantine_assets.engine.spark.erasure import forget_subject
from quarantine_assets.engine.spark.file_quarantine import set_aside_files
from quarantine_assets.engine.spark.file_redrive import redrive_file
from quarantine_assets.engine.spark.operator import (
    RowFilter,
    action_for_source,
    discard_rows,
    inbox_row,
    listing,
    parse_json_object,
    queue_stats,
)
from quarantine_assets.engine.spark.retention import purge_resolved
from quarantine_assets.engine.spark.source import rules_against_sources
from quarantine_assets.engine.spark.spark_server import DEFAULT_CONNECT_PORT
from quarantine_assets.errors import ConfigError, OperatorError, QuarantineError
from quarantine_assets.settings import STORAGE_OPTIONS_VARIABLE, default_warehouse

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

app = typer.Typer(
    help="A dead-letter queue for Spark + Delta pipelines, orchestrated by Dagster.", no_args_is_help=True
)
console = Console(highlight=False)  # a value that looks like a number or a path is still the value
DlqOption = Annotated[str | None, typer.Option("--dlq", help="DLQ inbox table (needed when configs have several).")]
errors = Console(stderr=True, highlight=False)


@dataclass
class Workspace:
    """What the shared options select: the configs, their environment and the warehouse."""

    config_dir: Path | None
    env: str | None
    root: str

    @cached_property
    def project(self) -> Project:
        return load_project(self.config_dir, self.env, self.root)

    @cached_property
    def warehouse(self) -> Warehouse:
        if not os.environ.get(STORAGE_OPTIONS_VARIABLE):
            return Warehouse(self.root)
        # Storage options are dagster-deltalake's configs; importing Dagster costs a second, so only then.
        from quarantine_assets.defs.resources import warehouse_resource

        return warehouse_resource(self.root).warehouse

    @cached_property
    def spark(self) -> SparkSession:
        """The Spark `QUARANTINE_SPARK_REMOTE` chooses (see `spark_session`). Imported here: commands that
        need no Spark attach to none."""
        from quarantine_assets.engine.spark.session import spark_session

        return spark_session(self.warehouse)

    def dlq(self, name: str | None) -> str:
        """The DLQ a command works on: the only one the configs name, or the one asked for."""
        names = self.project.inbox_tables
        if name is None and len(names) == 1:
            name = names[0]
        if name not in names:
            raise OperatorError(codes.DLQ_AMBIGUOUS, f"name the DLQ with --dlq; the configs have {names}")
        if not self.warehouse.is_delta_table(name):
            raise OperatorError(
                codes.DLQ_TABLE_MISSING,
                f"the warehouse {self.root} holds no DLQ table {name}: give the warehouse it is in (--warehouse), "
                "or create it with create-tables",
                field="--warehouse",
            )
        return name

    def action(self, source_table: str) -> DataQualityAction:
        return action_for_source(list(self.project.actions), source_table)


@app.callback()
def shared_options(
    context: typer.Context,
    config_dir: Annotated[
        Path | None,
        typer.Option(
            "--config-dir", help="Configs folder (default: $QUARANTINE_CONFIG_DIR or the project's configs/)."
        ),
    ] = None,
    env: Annotated[
        str | None, typer.Option("--env", help="Substitutions environment (default: $QUARANTINE_ENV or dev).")
    ] = None,
    warehouse: Annotated[
        str | None,
        typer.Option(
            "--warehouse",
            help="Warehouse root, a folder or URL (default: $QUARANTINE_WAREHOUSE or the project's warehouse/).",
        ),
    ] = None,
) -> None:
    context.obj = Workspace(config_dir, env, warehouse or default_warehouse())


# Longer messages are cut: a value an operator pasted by mistake (a megabyte of it) would fill the terminal.
MESSAGE_CHARACTERS = 4000


def _say(message: str) -> None:
    """A line for the operator. The names, keys and paths in it are shown as text, never read as markup, and
    their control characters as escapes."""
    console.print(shown(message, MESSAGE_CHARACTERS), soft_wrap=True)


def _complain(message: str, style: str = "red") -> None:
    errors.print(shown(message, MESSAGE_CHARACTERS), style=style, soft_wrap=True)


def _print_problems(problems) -> None:
    for problem in problems:
        _complain(str(problem), style="red" if problem.severity == "error" else "yellow")


def _print_warnings(warnings: list[str]) -> None:
    for warning in warnings:
        _complain(f"warning: {warning}", style="yellow")


def _print_rows(rows: list, columns: list[str], title: str) -> None:
    table = Table(title=title)
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*[shown(value, CELL_CHARACTERS) for value in row])
    console.print(table)


@app.command()
def ddl(
    context: typer.Context,
    core: Annotated[
        bool, typer.Option("--core", help="Only the reference's seven columns, in Lakehouse Plumber's exact statement.")
    ] = False,
) -> None:
    """Print the CREATE TABLE statements for every DLQ inbox and outbox the configs name."""
    workspace: Workspace = context.obj
    for inbox_table in workspace.project.inbox_tables:
        inbox = inbox_ddl(workspace.warehouse, inbox_table, core)
        outbox = outbox_ddl(workspace.warehouse, inbox_table, core)
        console.print(f"-- inbox {inbox_table}\n{inbox};\n", markup=False, highlight=False)
        console.print(f"-- outbox {outbox_table(inbox_table)}\n{outbox};\n", markup=False, highlight=False)


@app.command(commands.CREATE_TABLES)
def create_tables(context: typer.Context) -> None:
    """Create every DLQ inbox and outbox the configs name (idempotent)."""
    workspace: Workspace = context.obj
    spark = workspace.spark
    for inbox_table in workspace.project.inbox_tables:
        create_dlq_tables(spark, workspace.warehouse, inbox_table)
        where = workspace.warehouse.path(inbox_table).rsplit("/", 1)[0]
        _say(f"created {inbox_table} and {outbox_table(inbox_table)} under {where}")


@app.command(commands.UPGRADE_TABLES)
def upgrade_tables(context: typer.Context) -> None:
    """Add the context columns a DLQ lacks (one created from Lakehouse Plumber's DDL lacks them all), in place."""
    workspace: Workspace = context.obj
    spark = workspace.spark
    for inbox_table in workspace.project.inbox_tables:
        for table, added in upgrade_dlq_tables(spark, workspace.warehouse, inbox_table).items():
            _say(f"{table}: added {', '.join(added)}" if added else f"{table}: has every context column")


@app.command("claims")
def list_claims(
    context: typer.Context, dlq: Annotated[str | None, typer.Option("--dlq", help="Only this DLQ.")] = None
) -> None:
    """Who owns each slice (source_table) of each DLQ."""
    workspace: Workspace = context.obj
    inbox_tables = [workspace.dlq(dlq)] if dlq else workspace.project.inbox_tables
    rows = [
        (inbox_table, claim.source_table, claim.owner, claim.claimed_by or "")
        for inbox_table in inbox_tables
        for claim in claims(workspace.warehouse, inbox_table).values()
    ]
    _print_rows(rows, ["dlq", "source_table", "owner", "claimed by"], "Claims")


@app.command(commands.RELEASE_CLAIM)
def release(
    context: typer.Context,
    source_table: str,
    dlq: DlqOption = None,
) -> None:
    """Release a slice: its next writer claims it."""
    workspace: Workspace = context.obj
    released = release_claim(workspace.spark, workspace.warehouse, workspace.dlq(dlq), source_table)
    _say(f"released {source_table}" if released else f"{source_table} was not claimed")


@app.command(commands.TRANSFER_CLAIM)
def transfer(
    context: typer.Context,
    source_table: str,
    to: Annotated[str, typer.Option("--to", help="The new owner: pipeline/flowgroup/action.")],
    by: Annotated[str | None, typer.Option("--by", help="Who hands it over (default: your user name).")] = None,
    dlq: DlqOption = None,
) -> None:
    """Hand a slice to another action."""
    workspace: Workspace = context.obj
    transfer_claim(workspace.spark, workspace.warehouse, workspace.dlq(dlq), source_table, to, by or getpass.getuser())
    _say(f"{source_table} now belongs to {to}")


@app.command()
def validate(
    context: typer.Context,
    parse_rules: Annotated[bool, typer.Option(help="Parse every rule with Spark's SQL parser.")] = True,
) -> None:
    """Check every pipeline config; print every problem and exit non-zero if any is an error."""
    workspace: Workspace = context.obj
    project = workspace.project
    problems = list(project.warnings)
    if parse_rules:
        spark = workspace.spark
        parse_problems = rule_expression_problems(project, spark)
        problems += parse_problems or rules_against_sources(spark, project, workspace.warehouse)
    _print_problems(problems)
    if any(problem.severity == "error" for problem in problems):
        raise typer.Exit(1)
    _say(f"{len(project.actions)} data-quality action(s) valid")


@app.command(commands.SPARK_SERVER)
def spark_server(
    context: typer.Context,
    host: Annotated[str, typer.Option(help="Address to listen on; anyone who reaches it can run Spark here.")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(help="Port to listen on.")] = DEFAULT_CONNECT_PORT,
    idle_timeout_minutes: Annotated[
        float, typer.Option(help="Stop after this long without a Spark job; 0 runs until stopped.", min=0)
    ] = 0,
    stop: Annotated[bool, typer.Option("--stop", help="Stop the server running on --port, and start none.")] = False,
) -> None:
    """Run a long-lived Spark that every step and command attaches to (QUARANTINE_SPARK_REMOTE), until stopped.

    It answers only clients that present its token: SPARK_CONNECT_AUTHENTICATE_TOKEN if set, else a new one
    per start, kept in a file only its user can read, where the attaching commands find it."""
    from quarantine_assets.engine.spark.session import (
        build_spark_session,
        connect_server_config,
        is_local_master,
        spark_master,
    )
    from quarantine_assets.engine.spark.spark_server import (
        pid_file,
        server_token,
        stop_server,
        token_file,
        worker_forkserver_file,
        worker_python_file,
        write_worker_python,
    )
    from quarantine_assets.settings import SPARK_REMOTE_VARIABLE

    if stop:
        console.print(stop_server(port), markup=False, highlight=False)
        return
    workspace: Workspace = context.obj
    token = server_token(host, port)
    # Spark runs `foreachBatch` in Python workers of its own: on this interpreter, which has this project. A
    # cluster's executors run theirs on its hosts too, where only the interpreter's own path may exist.
    forkserver = None
    if "PYSPARK_PYTHON" not in os.environ:
        local = is_local_master(spark_master())
        os.environ["PYSPARK_PYTHON"] = str(write_worker_python(port)) if local else sys.executable
        if local:
            forkserver = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "quarantine_assets.engine.spark.worker_forkserver",
                    worker_forkserver_file(port),
                ],
                stdin=subprocess.DEVNULL,
            )
    # Before the start: a stop asked while Spark starts is kept for when it is up, and the files removed.
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    try:
        pid_file(port).write_text(str(os.getpid()), encoding="utf-8")
        spark = build_spark_session(warehouse=workspace.warehouse, extra=connect_server_config(host, port, token))
        idle = f"after {idle_timeout_minutes:g} min without a Spark job, " if idle_timeout_minutes else ""
        console.print(
            f"Spark Connect server on sc://{host}:{port} for warehouse {workspace.root}; attach with "
            f"{SPARK_REMOTE_VARIABLE}=sc://{host}:{port}. Its token is in {token_file(port)} (readable by this "
            f"user only). It stops {idle}on Ctrl-C or with `{commands.SPARK_SERVER_COMMAND} --stop`.",
            markup=False,
            highlight=False,
            soft_wrap=True,  # one line, also in a log: the URL is meant to be copied
        )
        tracker, last_job = spark.sparkContext.statusTracker(), time.monotonic()
        with contextlib.suppress(KeyboardInterrupt):
            # Polled each second: a step runs jobs for seconds at a time, so none goes unseen for long.
            while not stopping.wait(1):
                if tracker.getActiveJobsIds():
                    last_job = time.monotonic()
                elif idle_timeout_minutes and time.monotonic() - last_job > idle_timeout_minutes * 60:
                    break
        spark.stop()
    finally:
        if forkserver is not None:
            forkserver.terminate()
            worker_forkserver_file(port).unlink(missing_ok=True)
        token_file(port).unlink(missing_ok=True)
        pid_file(port).unlink(missing_ok=True)
        worker_python_file(port).unlink(missing_ok=True)


@app.command()
def demo(
    context: typer.Context,
    batches: Annotated[int, typer.Option(help="New input files per source to generate and ingest.")] = 1,
) -> None:
    """Generate demo input, create the DLQ tables, and materialize every split through Dagster."""
    from quarantine_assets.demo_run import run_demo

    run_demo(console, batches, context.obj.project, context.obj.root)


SourceOption = Annotated[str | None, typer.Option("--source", help="Only this source_table (catalog.schema.table).")]
StatusOption = Annotated[str | None, typer.Option("--status", help=f"Only this status: {', '.join(statuses.ALL)}.")]
RuleOption = Annotated[str | None, typer.Option("--rule", help="Only rows that failed this rule.")]
OlderOption = Annotated[float | None, typer.Option("--older-than-hours", help="Only rows quarantined before this.")]
ByOption = Annotated[
    str | None, typer.Option("--by", help="Who makes the change, recorded on the row (default: your user name).")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON: one object per line, for another tool.")]
RowsSourceOption = Annotated[str, typer.Option("--source", help="The source_table the rows belong to.")]


@app.command("list")
def list_rows(
    context: typer.Context,
    source: SourceOption = None,
    status: StatusOption = None,
    rule: RuleOption = None,
    older_than_hours: OlderOption = None,
    limit: Annotated[int, typer.Option(help="At most this many rows.")] = 50,
    dlq: DlqOption = None,
    as_json: JsonOption = False,
) -> None:
    """List DLQ rows, oldest first, with their failed rules and payload."""
    workspace: Workspace = context.obj
    row_filter = RowFilter(source, status, rule, _age(older_than_hours, "--older-than-hours", "hours"))
    rows = listing(workspace.spark, workspace.warehouse, workspace.dlq(dlq), row_filter, limit)
    if as_json:
        for row in rows.collect():
            print(json_line(row.asDict(recursive=True) | {"payload": json.loads(row["payload"])}))
        return
    _print_rows(rows.collect(), rows.columns, "DLQ rows")


@app.command()
def show(context: typer.Context, key: str, dlq: DlqOption = None, as_json: JsonOption = False) -> None:
    """Show one DLQ row with every column, and where its record is in its source file."""
    workspace: Workspace = context.obj
    row = inbox_row(workspace.spark, workspace.warehouse, workspace.dlq(dlq), key)
    action = workspace.action(row[SOURCE_TABLE])
    location = record_location(row, action.source)
    if as_json:
        where = {"source_record": location.where} if location else {}
        print(json_line(row | {ROW_DATA: json.loads(row[ROW_DATA])} | where))
        return
    for name, value in row.items():
        console.print(Text.assemble((name, "bold"), ": ", shown(value)), highlight=False)
    if location:
        console.print(f"[bold]{location.label}[/bold]: {escape(location.where)}", highlight=False)
        if location.text is not None and action.quarantine.sensitive_columns:
            # The file holds the record as it was: its sensitive values unredacted.
            hidden = ", ".join(action.quarantine.sensitive_columns)
            console.print(f"(its text is not shown: {escape(action.name)} redacts {escape(hidden)})", highlight=False)
        elif location.text is not None:
            console.print(shown(location.text), highlight=False)


@app.command()
def stats(
    context: typer.Context, source: SourceOption = None, dlq: DlqOption = None, as_json: JsonOption = False
) -> None:
    """Counts by source, failed rule and status, and the age of the oldest quarantined row."""
    workspace: Workspace = context.obj
    found = queue_stats(workspace.spark, workspace.warehouse, workspace.dlq(dlq), RowFilter(source_table=source))
    age = found.oldest_quarantined_age
    if as_json:
        counts = [row.asDict() for row in found.counts]
        age_seconds = age.total_seconds() if age is not None else None
        print(json_line({"counts": counts, "oldest_quarantined_age_seconds": age_seconds}))
        return
    _print_rows(found.counts, [SOURCE_TABLE, "rule", STATUS, "count"], "DLQ rows by rule and status")
    _say(f"oldest quarantined row: {age if age is not None else 'none quarantined'}")


@app.command()
def fix(
    context: typer.Context,
    source: RowsSourceOption,
    keys: Annotated[
        list[str] | None, typer.Argument(help="Keys of the rows to fix; or select them with --where.")
    ] = None,
    where: Annotated[
        str | None,
        typer.Option(help="Fix the rows this Spark SQL condition holds for, over payload fields and _dlq_ columns."),
    ] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="field=value; value is JSON if it parses, else text.")
    ] = None,
    set_expr: Annotated[
        list[str] | None,
        typer.Option("--set-expr", help="field = <Spark SQL> over the row's payload fields (with --where)."),
    ] = None,
    payload: Annotated[str | None, typer.Option("--payload", help="Replace the whole payload with this JSON.")] = None,
    limit: Annotated[int | None, typer.Option(help="With --where: only the oldest this many rows.")] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="With --where: count what would land and what would fail; write nothing.")
    ] = False,
    as_json: JsonOption = False,
    by: ByOption = None,
) -> None:
    """Correct rows and mark them fixed; the recycle sensor picks them up."""
    command = FixCommand(
        keys=tuple(keys or ()),
        where=where,
        changes=FieldChanges(
            field_expressions(set_expr or []), dict(_field_assignment(item) for item in set_) if set_ else {}
        ),
        payload=parse_json_object(payload, "--payload") if payload is not None else None,
        limit=limit,
        dry_run=dry_run,
    )
    _run_fix(context.obj, source, command, as_json, by, "marked fixed")


@app.command()
def redrive(
    context: typer.Context,
    source: RowsSourceOption,
    rule: Annotated[str | None, typer.Option(help="Only rows that failed this rule.")] = None,
    run: Annotated[str | None, typer.Option(help="Only rows quarantined by this Dagster run id.")] = None,
    since: Annotated[datetime | None, typer.Option(help="Only rows quarantined at or after this time (UTC).")] = None,
    where: Annotated[str | None, typer.Option(help="Only rows this Spark SQL condition holds for.")] = None,
    limit: Annotated[int | None, typer.Option(help="Only the oldest this many rows.")] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Count what would land and what would fail again; write nothing.")
    ] = False,
    as_json: JsonOption = False,
    by: ByOption = None,
) -> None:
    """Send quarantined rows back through the recycle path as they are, to be judged by the rules configured now:
    after a rule was too strict. Rows that still fail return to the inbox with their new failed rules; a redrive
    counts as an attempt, like every trip through the recycle path."""
    command = FixCommand(where=where, limit=limit, dry_run=dry_run, redrive=True, rule=rule, run_id=run, since=since)
    _run_fix(context.obj, source, command, as_json, by, "sent back to be judged again")


def _run_fix(workspace: Workspace, source: str, command: FixCommand, as_json: bool, by: str | None, done: str):
    action = workspace.action(source)
    outcome = apply_fix(workspace.spark, workspace.warehouse, action, command, by=by or getpass.getuser())
    if isinstance(outcome, DryRun):
        _print_dry_run(outcome, as_json)
        return
    _print_warnings(outcome.warnings)
    _say(f"{outcome.rows_changed} row(s) of {source} {done}")


def _print_dry_run(report: DryRun, as_json: bool) -> None:
    if as_json:
        print(json_line(dataclasses.asdict(report)))
        return
    console.print(
        f"dry run, nothing written: {report.rows_matched} row(s) match, {report.rows_to_fix} would be fixed; "
        f"{report.rows_landing} would land and {report.rows_failing_again} would fail again",
        highlight=False,
    )
    if report.failures_per_rule:
        _print_rows(list(report.failures_per_rule.items()), ["rule", "rows failing it again"], "Would fail again")
        examples = [(example["key"], ", ".join(example["failed_rules"])) for example in report.examples]
        _print_rows(examples, ["key", "failed rules"], "Examples")


def _field_assignment(item: str) -> tuple[str, object]:
    name, sep, text = item.partition("=")
    if not sep or not name:
        raise OperatorError(codes.BAD_FIELD_ASSIGNMENT, f"--set takes field=value, got {item!r}", field="--set")
    try:
        return name, json.loads(text)
    except json.JSONDecodeError:
        return name, text


@app.command()
def discard(
    context: typer.Context,
    keys: list[str],
    source: RowsSourceOption,
    reason: Annotated[str, typer.Option("--reason", help="Why the rows are closed; recorded on each row.")],
    by: ByOption = None,
) -> None:
    """Close rows that cannot be fixed, with a reason."""
    workspace: Workspace = context.obj
    result = discard_rows(
        workspace.spark, workspace.warehouse, workspace.action(source), keys, reason=reason, by=by or getpass.getuser()
    )
    _print_warnings(result.warnings)
    _say(f"{result.rows_changed} row(s) of {source} discarded")


@app.command(commands.FILES)
def list_files(context: typer.Context, dlq: DlqOption = None, as_json: JsonOption = False) -> None:
    """Source files set aside whole because they could not be read, newest first, with why."""
    workspace: Workspace = context.obj
    inbox_tables = [workspace.dlq(dlq)] if dlq else workspace.project.inbox_tables
    found = set_aside_files(workspace.warehouse, inbox_tables)
    if as_json:
        for record in found:
            print(json_line(record))
        return
    rows = [
        (
            record[SOURCE_FILE],
            record[SOURCE_TABLE],
            record[STATUS],
            record[ERRORS][0]["code"],
            record[ERRORS][0]["message"],
            record[FILE_SIZE],
            record[TIMESTAMP],
        )
        for record in found
    ]
    _print_rows(rows, ["file", "source_table", "status", "code", "reason", "bytes", "set aside at"], "Files set aside")


@app.command(commands.REDRIVE_FILE)
def redrive_set_aside_file(
    context: typer.Context,
    path: Annotated[str, typer.Argument(help="The file, as `files` lists it or as a local path.")],
    by: ByOption = None,
) -> None:
    """Read a file that was set aside again through the split, once fixed or replaced under the same name."""
    workspace: Workspace = context.obj
    actions = list(workspace.project.actions)
    for redriven in redrive_file(workspace.spark, actions, workspace.warehouse, path, by or getpass.getuser()):
        _say(
            f"{redriven.file}: {redriven.rows_validated} row(s) validated, {redriven.rows_quarantined} quarantined "
            f"({redriven.source_table})"
        )


PhysicallyOption = Annotated[
    bool,
    typer.Option(
        "--physically",
        help="Also remove the deleted rows from the tables' files (earlier images and change data included), "
        "once no stream still reads those files; time travel to before then fails.",
    ),
]


@app.command()
def forget(
    context: typer.Context,
    source: RowsSourceOption,
    where: Annotated[
        str, typer.Option("--where", help='Spark SQL over the payload\'s fields, e.g. "customer_id = 42".')
    ],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Count what would be erased; erase nothing.")] = False,
    by: ByOption = None,
) -> None:
    """Erase a subject: its rows, whatever their status, from the inbox and the outbox, and from their files.
    Files a stream has yet to read are pending: run the recycle, then forget again."""
    workspace: Workspace = context.obj
    erasure = forget_subject(
        workspace.spark,
        workspace.warehouse,
        workspace.action(source),
        where,
        dry_run=dry_run,
        by=by or getpass.getuser(),
    )
    rows = sum(erasure.inbox_rows_by_status.values())
    verb = "would erase" if dry_run else "erased"
    statuses_found = ", ".join(f"{count} {status}" for status, count in sorted(erasure.inbox_rows_by_status.items()))
    _say(
        f"{verb} {rows} inbox row(s) of {source}{f' ({statuses_found})' if rows else ''} and "
        f"{erasure.outbox_rows} outbox row(s)"
    )
    _print_file_removal(erasure.files_removed, erasure.files_pending, dry_run)


def _print_file_removal(removed: int, pending: dict[str, int], dry_run: bool) -> None:
    _say(f"{'would remove' if dry_run else 'removed'} {removed} file(s) that held them")
    for stream, count in sorted(pending.items()):
        _complain(
            f"pending: {count} file(s) still to be read by the stream {stream}; run that step, then the same "
            "command again removes them",
            style="yellow",
        )


_EARLIEST = datetime.min.replace(tzinfo=timezone.utc)


def _age(amount: float | None, option: str, unit: str) -> timedelta | None:
    """An age given on the command line, refused before anything is read unless it is a number, 0 or more, that
    reaches back no further than the calendar does. A negative age would reach into the future: a purge would
    delete every resolved row."""
    if amount is None:
        return None
    with contextlib.suppress(OverflowError, ValueError):  # an age past what timedelta or datetime can hold
        if (
            math.isfinite(amount)
            and amount >= 0
            and _EARLIEST + timedelta(**{unit: amount}) < datetime.now(timezone.utc)
        ):
            return timedelta(**{unit: amount})
    raise OperatorError(
        codes.BAD_AGE,
        f"{option} must be a number of {unit}, 0 or more, reaching back no further than year 1; got {amount}. "
        "Nothing was read or changed",
        field=option,
    )


@app.command()
def purge(
    context: typer.Context,
    source: SourceOption = None,
    older_than_days: Annotated[
        float | None,
        typer.Option("--older-than-days", help="Resolved more than this many days ago (default: retention_days)."),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Count what would be deleted; delete nothing.")] = False,
    physically: PhysicallyOption = False,
    by: ByOption = None,
) -> None:
    """Delete resolved rows (landed, discarded, exhausted) past retention; quarantined and fixed rows stay."""
    older_than = _age(older_than_days, "--older-than-days", "days")
    workspace: Workspace = context.obj
    quarantined = [action for action in workspace.project.actions if action.quarantine is not None]
    actions = [workspace.action(source)] if source else quarantined
    if older_than is None:
        unset = [action.quarantine.source_table for action in actions if action.quarantine.retention_days is None]
        if source and unset:
            raise OperatorError(
                codes.RETENTION_UNSET,
                f"the action of {source} sets no quarantine.retention_days; give --older-than-days",
                field="--older-than-days",
            )
        actions = [action for action in actions if action.quarantine.retention_days is not None]
    table = Table(title="dry run: nothing deleted" if dry_run else "purged")
    for column in ("source_table", "resolved before", *statuses.RESOLVED, "rows"):
        table.add_column(column)
    for action in actions:
        report = purge_resolved(
            workspace.spark,
            workspace.warehouse,
            action,
            older_than if older_than is not None else timedelta(days=action.quarantine.retention_days),
            dry_run=dry_run,
            by=by or getpass.getuser(),
            physically=physically,
        )
        _print_warnings(report.warnings)
        counts = [str(report.rows_by_status.get(status, 0)) for status in statuses.RESOLVED]
        table.add_row(report.source_table, f"{report.cutoff:%Y-%m-%d %H:%M:%S} UTC", *counts, str(report.rows))
        _say(
            f"{'would delete' if dry_run else 'deleted'} {report.rows} resolved row(s) of {report.source_table}"
            + (f" and {report.file_records} record(s) of redriven files" if report.file_records else "")
        )
        if report.files is not None:
            _print_file_removal(report.files.files_removed, report.files.files_pending, dry_run)
    console.print(table)


def main() -> None:
    """Refused input ends with its coded problems on stderr and exit 1 (2 for a command line that does not
    parse), never a traceback."""
    try:
        exit_code = app(standalone_mode=False)
    except typer.TyperException as error:  # from typer's own click: the command line does not parse
        context, message = getattr(error, "ctx", None), error.format_message()
        if message:  # empty when typer printed the help of a command given nothing
            usage = f"\n{context.get_usage()}" if context is not None else ""
            _complain(f"{codes.COMMAND_USAGE} error: {message}{usage}")
        sys.exit(error.exit_code)
    except typer.Abort:
        _complain("aborted")
        sys.exit(1)
    except ConfigError as error:
        _print_problems(error.problems)
        sys.exit(1)
    except QuarantineError as error:
        _complain(str(error))
        sys.exit(1)
    # Without standalone mode, click returns the code a command exited with, and None when it returned.
    sys.exit(exit_code or 0)


if __name__ == "__main__":
    main()
