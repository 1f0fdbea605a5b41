"""The split: one scan of each source batch yields validated rows and DLQ inbox records."""

from __future__ import annotations

import re
import shlex
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from quarantine_assets import codes
from quarantine_assets.commands import FILES_COMMAND, REDRIVE_FILE, command_line
from quarantine_assets.config.models import DataQualityAction, DeltaSource, FileSource, Rule
from quarantine_assets.engine.lake.delta_log import committed_rows, transaction_writers
from quarantine_assets.engine.lake.dlq_schema import SOURCE_POSITION
from quarantine_assets.engine.lake.tables import Warehouse
from quarantine_assets.engine.spark.claims import before_writing
from quarantine_assets.engine.spark.commits import append_once, append_to_dlq_table
from quarantine_assets.engine.spark.file_quarantine import CSV_HEADER_DETAIL, CSV_HEADER_MISMATCH, FileBatch
from quarantine_assets.engine.spark.inbox import BOOKKEEPING_COLUMNS, Provenance, inbox_records
from quarantine_assets.engine.spark.operational_metadata import with_table_columns, with_view_columns
from quarantine_assets.engine.spark.parse_errors import RecordParsing, parse_reason, record_parsing
from quarantine_assets.engine.spark.payload_types import unstorable_fields
from quarantine_assets.engine.spark.redaction import redacted
from quarantine_assets.engine.spark.rules import (
    EXPECTATION,
    PARSE,
    RECORD_PARSES,
    BatchCounts,
    applicable_rules,
    batch_counts,
    failure_columns,
    failures_from,
    passes,
    passes_all,
    rule_column_problems,
    with_failed_rules,
    with_failure_action,
    with_record_parses,
)
from quarantine_assets.engine.spark.sensitive_columns import sensitive_column_problems
from quarantine_assets.engine.spark.source import ONE_FILE_PER_TASK, read_source_stream, with_delta_file_context
from quarantine_assets.engine.spark.streams import BatchCommit, StageRun, run_action_stream, writer_id
from quarantine_assets.engine.spark.validated import added_columns, create_validated_table
from quarantine_assets.engine.spark.verdict import (
    VerdictCounts,
    VerdictStage,
    judge,
    judged_once,
    judged_outcomes,
    judges_alike_each_time,
    kept_rows,
    verdict_counts,
    without_verdict,
)
from quarantine_assets.errors import ConfigError, DataQualityFailure, Problem, QuarantineError

SPLIT_STREAM = "split"
# Delta's conditions for a source or batch schema that a stream or an append cannot take as it is.
_SCHEMA_CHANGE = re.compile(
    r"\[(DELTA_SCHEMA_CHANGED\w*|DELTA_STREAMING_\w*SCHEMA\w*|DELTA_FAILED_TO_MERGE_FIELDS|DELTA_METADATA_MISMATCH)\]"
)
_FILE_READ = re.compile(r"CSV file: (\S+)")


@dataclass
class SplitReport:
    """Totals over the batches one materialization processed."""

    batches: int = 0
    rows_read: int = 0
    rows_validated: int = 0
    rows_quarantined: int = 0  # mode quarantine: kept in the inbox
    rows_dropped: int = 0  # mode dqe: gone, as the reference does
    rows_held_in_inbox: int = 0  # rows the inbox commit of each batch wrote, by Delta's count
    failures_per_rule: Counter = field(default_factory=Counter)
    parse_errors: Counter = field(default_factory=Counter)  # records that did not parse, by reason code
    warnings: list[str] = field(default_factory=list)  # what this DLQ loses without its missing context columns
    files_set_aside: list[str] = field(default_factory=list)  # source files that could not be read, by URI

    def failures_by_reason(self) -> Counter:
        """By reason code: each rule's name, and for records that did not parse, their parse code."""
        reasons = Counter(self.failures_per_rule)
        if self.parse_errors:
            reasons.pop(RECORD_PARSES.name, None)
            reasons.update(self.parse_errors)
        return reasons

    def failures_by_error_type(self) -> dict[str, int]:
        parse = self.failures_per_rule.get(RECORD_PARSES.name, 0)
        return {EXPECTATION: sum(self.failures_per_rule.values()) - parse, PARSE: parse}


def split_batch(
    run: StageRun,
    batch: DataFrame,
    commit: BatchCommit,
    parsing: RecordParsing | None = None,
    *,
    judges_alike: bool = False,
    files: FileBatch | None = None,
) -> SplitReport:
    """Two appends, each idempotent on (stream, batch): the validated rows, then the rejected ones.

    In quarantine mode the batch is judged once (`_judged`) and both tables are written from
    that verdict; a re-run after a crash between the two commits writes the inbox from the staged verdict
    (`_staged_verdict`). In dqe mode the rejected rows are dropped, so one write judges them. What each
    table received is Delta's count of the rows its commit wrote. `parsing` is how a CSV or JSON source's
    records were parsed: it explains those that did not. `files` are the batch's files, for a file source:
    one that cannot be read is set aside, in quarantine mode.
    """
    action, warehouse = run.action, run.warehouse
    rules = with_record_parses(applicable_rules(action.rules, batch.columns), batch.columns)
    if action.quarantine is None:
        return _split_dropping(run, files.rows(batch) if files else batch, commit, rules)
    judging = _Judging(
        rules,
        kept_by=with_failure_action(rules, "drop"),
        parsing=parsing if RECORD_PARSES in rules else None,
        with_source_file=isinstance(action.source, DeltaSource),
    )
    stage = VerdictStage(warehouse, action.key, SPLIT_STREAM, commit.stream_id, commit.batch_id)
    rows_validated = _validated_earlier(warehouse, action, commit)
    added = []
    if rows_validated is None:
        # Nothing of the batch is committed, whatever a crashed attempt staged: it is judged now.
        with _judged(run, batch, judging, stage, judges_alike, files) as (judged, counts):
            _refuse_over_reject_limit(action, commit.batch_id, counts)
            added = _append_validated(run, commit, without_verdict(kept_rows(judged), judging.rules))
        rows_validated = committed_rows(warehouse.log(action.target_table), commit.writer, commit.batch_id) or 0
    elif stage.is_complete():
        counts = _staged_verdict(run, batch, judging, stage).with_kept(rows_validated)
    else:
        return _written_earlier(warehouse, action, commit, rows_validated)
    held = _append_rejected(run, batch, commit, judging, stage) if counts.rejected else 0
    _refuse_unaccounted(action, commit.batch_id, counts.rows, rows_validated, held)
    stage.remove()
    set_aside = sorted(files.set_aside) if files else []
    return SplitReport(
        batches=1,
        rows_read=counts.rows,
        rows_validated=rows_validated,
        rows_quarantined=held,
        rows_held_in_inbox=held,
        failures_per_rule=Counter(counts.failures_per_rule),
        parse_errors=Counter({code: count for code, count in counts.parse_errors.items() if count}),
        warnings=_added_warnings(action, added) + [_set_aside_warning(file) for file in set_aside],
        files_set_aside=set_aside,
    )


@dataclass(frozen=True)
class _Judging:
    """How a quarantine-mode batch is judged: its rules, the drop rules a kept row passes, how its records
    were parsed (when a rule checks that they were), and whether a rejected row names its source file."""

    rules: list[Rule]
    kept_by: list[Rule]
    parsing: RecordParsing | None
    with_source_file: bool

    def of(self, rows: DataFrame) -> DataFrame:
        return judge(rows, self.rules, self.kept_by, with_source_file=self.with_source_file)


@contextmanager
def _judged(
    run: StageRun,
    batch: DataFrame,
    judging: _Judging,
    stage: VerdictStage,
    judges_alike: bool,
    files: FileBatch | None,
) -> Iterator[tuple[DataFrame, VerdictCounts]]:
    """The batch judged once, and the verdict's counts: its rejected rows are staged before anything of it
    is committed, by the job that reads the batch. The judged batch is kept in Spark's block store while the
    block runs, unless `judges_alike`. A source file that cannot be read is set aside, and the batch judged
    again without it."""
    while True:
        with judged_once(judging.of(files.rows(batch) if files else batch), judges_alike=judges_alike) as judged:
            try:
                counts = stage.write(judged, judging.rules, judging.kept_by, judging.parsing)
            except Exception as error:
                if files is None or not files.set_aside_file_of(run.spark, error):
                    raise
                continue
            yield judged, counts
            return


def _staged_verdict(run: StageRun, batch: DataFrame, judging: _Judging, stage: VerdictStage) -> VerdictCounts:
    """The counts of the rows a crashed attempt rejected and staged, once its validated commit held the rest."""
    return verdict_counts(_staged_rows(run, batch, judging, stage), judging.rules, judging.parsing)


def _staged_rows(run: StageRun, batch: DataFrame, judging: _Judging, stage: VerdictStage) -> DataFrame:
    """The batch's rejected rows as they were judged, from its stage."""
    return stage.read(run.spark, judging.of(batch))


def _append_rejected(
    run: StageRun, batch: DataFrame, commit: BatchCommit, judging: _Judging, stage: VerdictStage
) -> int:
    """The inbox append of the staged rejected rows, each with the rules it failed and the batch's
    provenance; returns the rows the inbox commit wrote, by Delta's count."""
    action, spark = run.action, run.spark
    quarantine = action.quarantine
    provenance = Provenance(
        source_table=quarantine.source_table,
        owner=action.owner,
        run_id=run.run_id,
        config_version=action.config_version,
        stream_id=commit.stream_id,
        batch_id=commit.batch_id,
    )
    rejected = _staged_rows(run, batch, judging, stage)
    if isinstance(action.source, DeltaSource):
        rejected = with_delta_file_context(spark, rejected, action.source, run.warehouse)
    reason = parse_reason(judging.parsing) if judging.parsing else None
    explained = with_failed_rules(rejected, judging.rules, judged_outcomes(judging.rules), reason)
    records = inbox_records(
        redacted(without_verdict(explained, judging.rules), quarantine.sensitive_columns, quarantine.redaction),
        provenance,
    )
    return append_to_dlq_table(spark, records, run.warehouse, quarantine.inbox_table, commit.writer, commit.batch_id)


def _split_dropping(run: StageRun, batch: DataFrame, commit: BatchCommit, rules: list[Rule]) -> SplitReport:
    """dqe mode: one write, which judges each row once; rows failing a drop rule are gone, as the
    reference does. The scan counts rows on the way (an observation, not an action of its own); a batch
    whose append a crashed attempt committed is counted again instead, as Delta skips that append."""
    action, warehouse, batch_id = run.action, run.warehouse, commit.batch_id
    if with_failure_action(rules, "fail"):
        _refuse_fail_rule_violations(batch_counts(batch, rules), rules, action, batch_id)
    if _validated_earlier(warehouse, action, commit) is not None:
        counts = batch_counts(batch, rules)
        rows, failures, added = counts.rows, counts.failures_per_rule, []
    else:
        read = Observation(f"split_{action.key}_{batch_id}")
        observed = batch.observe(read, F.count(F.lit(1)).alias("rows"), *failure_columns(rules))
        added = _append_validated(run, commit, observed.where(passes_all(with_failure_action(rules, "drop"))))
        rows, failures = read.get["rows"], failures_from(read.get, rules)
    rows_validated = committed_rows(warehouse.log(action.target_table), commit.writer, batch_id) or 0
    return SplitReport(
        batches=1,
        rows_read=rows,
        rows_validated=rows_validated,
        rows_dropped=rows - rows_validated,
        failures_per_rule=Counter(failures),
        warnings=_added_warnings(action, added),
    )


def _append_validated(run: StageRun, commit: BatchCommit, rows: DataFrame) -> list[str]:
    """The append of a batch's validated rows, without what the split added to them; returns the source
    columns it added to the table."""
    spark, action, warehouse = run.spark, run.action, run.warehouse
    validated = with_table_columns(rows.drop(*BOOKKEEPING_COLUMNS), action.operational_metadata)
    create_validated_table(spark, warehouse, action, validated.schema)
    added = added_columns(spark, warehouse, action, validated.schema)
    target = warehouse.path(action.target_table)
    append_once(validated, target, commit.writer, commit.batch_id, add_columns=bool(added))
    return added


def _added_warnings(action: DataQualityAction, added: list[str]) -> list[str]:
    return [f"source columns {added} were added to validated table {action.target_table}"] if added else []


def _set_aside_warning(file: str) -> str:
    return (
        f"source file {file} could not be read and was set aside whole (`{FILES_COMMAND}` says why); "
        f"fix or replace it under the same name, then `{command_line(REDRIVE_FILE, shlex.quote(file))}`"
    )


def _validated_earlier(warehouse: Warehouse, action: DataQualityAction, commit: BatchCommit) -> int | None:
    """The rows the validated commit of the batch wrote, by Delta's count; None when there is no such commit."""
    if not warehouse.is_delta_table(action.target_table):
        return None
    return committed_rows(warehouse.log(action.target_table), commit.writer, commit.batch_id)


def _written_earlier(
    warehouse: Warehouse, action: DataQualityAction, commit: BatchCommit, rows_validated: int
) -> SplitReport:
    """The report of a batch whose commits were all made before a crash, from Delta's own counts. A stage
    is removed only once both commits hold its batch, so without one, the validated commit of the batch
    says that the inbox commit, if it had rows, is there too."""
    held = committed_rows(warehouse.log(action.quarantine.inbox_table), commit.writer, commit.batch_id) or 0
    return SplitReport(
        batches=1,
        rows_read=rows_validated + held,
        rows_validated=rows_validated,
        rows_quarantined=held,
        rows_held_in_inbox=held,
    )


def _refuse_unaccounted(action: DataQualityAction, batch_id: int, rows: int, validated: int, held: int) -> None:
    """The promise, checked on Delta's own counts before the batch is committed in the checkpoint: a
    batch whose commits do not add up fails the run, and the stage stays for the retry to write from."""
    if rows != validated + held:
        raise DataQualityFailure(
            codes.SPLIT_UNACCOUNTED,
            f"batch {batch_id} of {action.name} read {rows} row(s), but its validated commit wrote {validated} and "
            f"its inbox commit {held}: {rows - validated - held} row(s) are in neither table or in both. The batch "
            "stays uncommitted in the checkpoint, so every run stops at it, and its rejected rows stay as judged "
            "beside the checkpoint (verdicts/), for the difference to be found",
            file=action.config_file,
            field=action.name,
        )


def _refuse_over_reject_limit(action: DataQualityAction, batch_id: int, counts: VerdictCounts) -> None:
    """A circuit breaker: a batch rejecting more than `max_reject_ratio` of its rows, or more than
    `max_rejected_rows`, is a producer's broken batch, not rows to fix one by one. Checked before the batch's
    first commit, so nothing of it is written, and the checkpoint does not move: every run reads it again,
    until the source is fixed or the limit raised."""
    quarantine = action.quarantine
    ratio = counts.rejected / counts.rows if counts.rows else 0.0
    over_ratio = quarantine.max_reject_ratio is not None and ratio > quarantine.max_reject_ratio
    over_rows = quarantine.max_rejected_rows is not None and counts.rejected > quarantine.max_rejected_rows
    if not (over_ratio or over_rows):
        return
    limit = (
        f"quarantine.max_reject_ratio {quarantine.max_reject_ratio}"
        if over_ratio
        else f"quarantine.max_rejected_rows {quarantine.max_rejected_rows}"
    )
    top = sorted(counts.failures_per_rule.items(), key=lambda item: -item[1])[:3]
    reasons = ", ".join(f"{name} ({count})" for name, count in top if count)
    raise DataQualityFailure(
        codes.REJECT_LIMIT_EXCEEDED,
        f"batch {batch_id} of {action.name} rejected {counts.rejected} of {counts.rows} row(s) ({ratio:.1%}), over "
        f"{limit}; top reasons: {reasons}. Nothing of the batch was written, and every run reads it again: fix "
        "the source, or raise the limit",
        file=action.config_file,
        field="quarantine.max_reject_ratio" if over_ratio else "quarantine.max_rejected_rows",
    )


def _judges_alike(spark: SparkSession, action: DataQualityAction, stream: DataFrame) -> bool:
    """Whether each query of a batch judges its rows alike: its rules read no clock and are deterministic,
    and its source is a Delta table, whose files are never rewritten and whose removed or unreadable files
    fail a query, unless Spark is told to skip them."""
    if not isinstance(action.source, DeltaSource):
        return False
    options = {key.lower(): value for key, value in action.source.options.items()}
    # A file skipped by one query and read by the other splits its rows between both tables or neither.
    for skipping in ("ignoreMissingFiles", "ignoreCorruptFiles"):
        chosen = options.get(skipping.lower()) or spark.conf.get(f"spark.sql.files.{skipping}", "false")
        if chosen.lower() == "true":
            return False
    rules = with_record_parses(applicable_rules(action.rules, stream.columns), stream.columns)
    return judges_alike_each_time(stream.select(*[passes(rule) for rule in rules]))


def _refuse_fail_rule_violations(counts: BatchCounts, rules, action: DataQualityAction, batch_id: int) -> None:
    """dqe mode: a violated `fail` rule stops the batch before anything of it is written."""
    if counts.fail_rule_violations:
        failed = [rule.name for rule in with_failure_action(rules, "fail") if counts.failures_per_rule[rule.name]]
        raise DataQualityFailure(
            codes.FAIL_RULE_VIOLATED,
            f"{counts.fail_rule_violations} row(s) violate fail rule(s) {failed} in batch {batch_id}; "
            "nothing from this batch was written",
            file=action.config_file,
            field=action.name,
        )


def run_split(spark: SparkSession, action: DataQualityAction, warehouse: Warehouse, run_id: str) -> SplitReport:
    """Process every source batch not yet seen by this action's checkpoint, then stop."""

    def process(batch: DataFrame, commit: BatchCommit) -> SplitReport:
        files = None
        if isinstance(action.source, FileSource):
            files = FileBatch.of(action, warehouse, SPLIT_STREAM, commit.stream_id, commit.batch_id, run_id)
        return split_batch(run, batch, commit, parsing, judges_alike=judges_alike, files=files)

    # Without a DLQ to set a file aside in, a file gone since its listing is skipped, as a file moved out is.
    source_rows = read_source_stream(spark, action.source, warehouse, skip_missing_files=action.quarantine is None)
    sensitive = action.quarantine is not None and bool(action.quarantine.sensitive_columns)
    parsing = record_parsing(action.source, source_rows.schema, shows_values=not sensitive)
    stream = with_view_columns(source_rows, action.operational_metadata)
    # A rule naming a column the source lacks is a config mistake: refuse it before any row is written.
    problems = rule_column_problems(spark, stream.schema, action.rules, action.expectations_file)
    problems += sensitive_column_problems(action, source_rows.schema)
    if action.quarantine is not None:
        problems += [
            Problem(
                codes.UNSTORABLE_SOURCE_COLUMN,
                f"source column {path} is a map whose keys are not strings; a DLQ payload is a variant, whose "
                "objects key by text only, so its rows could not be kept. Cast the keys to STRING in the source",
                file=action.config_file,
                field=path,
            )
            for path in unstorable_fields(stream.schema)
        ]
    if problems:
        raise ConfigError(problems)
    judges_alike = action.quarantine is not None and _judges_alike(spark, action, stream)
    _refuse_restart_without_checkpoint(warehouse, action)
    # Claimed only once the config is known to be right: a refused run leaves no trace, not even a claim.
    warnings, conf, columns = [], {}, None
    if action.quarantine is not None:
        columns = before_writing(spark, warehouse, action, by=run_id)
        warnings = columns.warnings(action.quarantine.inbox_table, action.quarantine.outbox_table)
        # A task per source file: a rejected row's position in its file is then its number in its task.
        conf = ONE_FILE_PER_TASK if SOURCE_POSITION in columns.inbox else {}
    run = StageRun(spark, action, warehouse, run_id, columns)
    try:
        report = SplitReport(warnings=warnings)
        return run_action_stream(run, stream, SPLIT_STREAM, process, report, conf)
    except Exception as error:
        refused = _source_refused(str(error), action)
        if refused is None:
            raise
        raise refused from None


def _source_refused(error: str, action: DataQualityAction) -> QuarantineError | None:
    """Spark's and Delta's errors for a source the split cannot read as declared, as coded errors.
    Both stop the batch before its first append: nothing of it is written, and the next run retries it."""
    where = {"file": action.config_file, "field": action.name}
    if condition := _SCHEMA_CHANGE.search(error):
        return QuarantineError(
            codes.SOURCE_SCHEMA_CHANGED,
            f"the source of {action.name} changed its schema in a way the split cannot follow ({condition[1]}: "
            f"{error.splitlines()[0][:300]}). Nothing of the batch was written and the next run retries it. "
            "Columns added to a source are added to the validated table; to retype or drop one, restore it in "
            "the source, or start the action over with a new target_table and checkpoint",
            **where,
        )
    if CSV_HEADER_MISMATCH.search(error):
        file = _FILE_READ.search(error)
        mismatch = CSV_HEADER_DETAIL.search(error)
        return QuarantineError(
            codes.CSV_HEADER_MISMATCH,
            f"the header of CSV file {file[1] if file else '?'} does not name the source's columns in order"
            f"{f' ({mismatch[0]})' if mismatch else ''}, so its values would land in the wrong columns. Nothing "
            "of the batch was written. Move the file out of the source folder (the next run reads the batch "
            "without it), then back in with its columns in the declared order under a new name",
            **where,
        )
    return None


def _refuse_restart_without_checkpoint(warehouse: Warehouse, action: DataQualityAction) -> None:
    """A split checkpoint holds the stream's id and its place in the source. Without it the stream
    would start over under a new id, and Delta would take every row it reads again for new data."""
    checkpoint = warehouse.checkpoint(action.key, SPLIT_STREAM)
    if warehouse.checkpoint_started(action.key, SPLIT_STREAM) or not warehouse.is_delta_table(action.target_table):
        return
    writers = transaction_writers(warehouse.log(action.target_table), writer_id(action, SPLIT_STREAM, ""))
    if writers:
        raise QuarantineError(
            codes.SPLIT_CHECKPOINT_LOST,
            f"the split checkpoint of {action.name} ({checkpoint}) is gone, but validated table "
            f"{action.target_table} holds batches its stream committed ({sorted(writers)[0]}): a new checkpoint "
            "would read the source from the start and write every row again. Restore the checkpoint folder; or, "
            "to start over, drop the validated table and the action's inbox rows first. Nothing was written",
            file=action.config_file,
            field=action.name,
        )
