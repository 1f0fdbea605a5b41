"""The split: one scan of each source batch yields validated rows and DLQ inbox records."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from quarantine_assets import codes
from quarantine_assets.config.models import DataQualityAction, DeltaSource
from quarantine_assets.engine.claims import before_writing
from quarantine_assets.engine.commits import append_once, append_to_dlq_table
from quarantine_assets.engine.delta_log import committed_rows, transaction_writers
from quarantine_assets.engine.inbox import BOOKKEEPING_COLUMNS, Provenance, inbox_records
from quarantine_assets.engine.operational_metadata import with_table_columns, with_view_columns
from quarantine_assets.engine.parse_errors import (
    RecordParsing,
    parse_code_counts,
    parse_codes_from,
    parse_reason,
    record_parsing,
)
from quarantine_assets.engine.payload_types import unstorable_fields
from quarantine_assets.engine.redaction import redacted
from quarantine_assets.engine.rules import (
    EXPECTATION,
    PARSE,
    RECORD_PARSES,
    BatchCounts,
    applicable_rules,
    batch_counts,
    failure_columns,
    failures_from,
    passes_all,
    rule_column_problems,
    with_action,
    with_failed_rules,
    with_record_parses,
)
from quarantine_assets.engine.source import (
    ONE_FILE_PER_TASK,
    SOURCE_POSITION,
    read_source_stream,
    with_delta_file_context,
    with_source_position,
)
from quarantine_assets.engine.streams import observed_metrics, run_action_stream, writer_id
from quarantine_assets.engine.tables import Warehouse
from quarantine_assets.engine.validated import added_columns, create_validated_table
from quarantine_assets.errors import ConfigError, DataQualityFailure, Problem, QuarantineError

SPLIT_STREAM = "split"
# Delta's conditions for a source or batch schema that a stream or an append cannot take as it is.
_SCHEMA_CHANGE = re.compile(
    r"\[(DELTA_SCHEMA_CHANGED\w*|DELTA_STREAMING_\w*SCHEMA\w*|DELTA_FAILED_TO_MERGE_FIELDS|DELTA_METADATA_MISMATCH)\]"
)
# Spark's reader with `enforceSchema` off, on a CSV file whose header disagrees with the columns.
_CSV_HEADER_MISMATCH = re.compile(
    r"CSV header does not conform to the schema|Number of column in CSV header is not equal to number of fields"
)
_FILE_READ = re.compile(r"CSV file: (\S+)")
_HEADER_DETAIL = re.compile(r"Expected: \S+ but found: \S+|Header length: \d+, schema size: \d+")


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
    spark: SparkSession,
    batch: DataFrame,
    batch_id: int,
    stream_id: str,
    action: DataQualityAction,
    warehouse: Warehouse,
    run_id: str,
    parsing: RecordParsing | None = None,
) -> SplitReport:
    """Two appends, each idempotent on (stream, batch): the validated rows, then the rejected ones.

    The full scan evaluates each rule as a plain boolean and counts rows on the way (an observation,
    not an action of its own); what each table received is Delta's count of the rows its commit
    wrote. Nothing is cached: the rejected rows are a second, filtered read of the batch, and only
    they carry the array of failed rules and are counted per rule. A batch without rejected rows
    leaves the inbox untouched. `parsing` is how a CSV or JSON source's records were parsed: it
    explains those that did not.
    """
    rules = with_record_parses(applicable_rules(action.rules, batch.columns), batch.columns)
    if with_action(rules, "fail"):
        _refuse_fail_rule_violations(batch_counts(batch, rules), rules, action, batch_id)
    kept = passes_all(with_action(rules, "drop"))
    writer = writer_id(action, SPLIT_STREAM, stream_id)
    target = warehouse.path(action.target_table)
    quarantining = action.quarantine is not None
    # In quarantine mode every failing row is rejected, so its failures are counted on the rejected rows.
    read = Observation(f"split_{action.key}_{batch_id}")
    counted = [F.count(F.lit(1)).alias("rows")] + ([] if quarantining else failure_columns(rules))
    validated = with_table_columns(
        batch.observe(read, *counted).where(kept).drop(*BOOKKEEPING_COLUMNS), action.operational_metadata
    )
    create_validated_table(spark, warehouse, action, validated.schema)
    added = added_columns(spark, warehouse, action, validated.schema)
    append_once(validated, target, writer, batch_id, add_columns=bool(added))
    read_metrics = observed_metrics(read)
    rows_validated = committed_rows(warehouse.log(action.target_table), writer, batch_id) or 0
    # None: Delta skipped the append of a batch it had committed before a crash; count it again.
    recount = batch_counts(batch, rules) if read_metrics is None else None
    rows = recount.rows if recount else read_metrics["rows"]
    failures = recount.failures_per_rule if recount else ({} if quarantining else failures_from(read_metrics, rules))
    rejected_count = rows - rows_validated
    held, parse_errors = 0, {}
    if quarantining and rejected_count:
        provenance = Provenance(
            source_table=action.quarantine.source_table,
            action=action.owner,
            run_id=run_id,
            config_version=action.config_version,
            stream_id=stream_id,
            batch_id=batch_id,
        )
        rejected = Observation(f"rejected_{action.key}_{batch_id}")
        parsing = parsing if RECORD_PARSES in rules else None
        counted = failure_columns(rules) + (parse_code_counts(parsing) if parsing else [])
        rejected_rows = with_source_position(batch).where(~kept)
        if isinstance(action.source, DeltaSource):
            rejected_rows = with_delta_file_context(spark, rejected_rows, action.source, warehouse)
        reason = parse_reason(parsing) if parsing else None
        judged = with_failed_rules(rejected_rows, rules, reason).observe(rejected, *counted)
        quarantine = action.quarantine
        records = inbox_records(redacted(judged, quarantine.sensitive_columns, quarantine.redaction), provenance)
        held = append_to_dlq_table(spark, records, warehouse, action.quarantine.dlq_table, writer, batch_id)
        rejected_metrics = observed_metrics(rejected)
        if parsing and rejected_metrics:
            parse_errors = parse_codes_from(rejected_metrics, parsing)
        if not recount:
            failures = (
                failures_from(rejected_metrics, rules)
                if rejected_metrics
                else batch_counts(batch, rules).failures_per_rule
            )
    return SplitReport(
        batches=1,
        rows_read=rows,
        rows_validated=rows_validated,
        rows_quarantined=rejected_count if quarantining else 0,
        rows_dropped=0 if quarantining else rejected_count,
        rows_held_in_inbox=held,
        failures_per_rule=Counter(failures),
        parse_errors=Counter({code: count for code, count in parse_errors.items() if count}),
        warnings=[f"source columns {added} were added to validated table {action.target_table}"] if added else [],
    )


def _refuse_fail_rule_violations(counts: BatchCounts, rules, action: DataQualityAction, batch_id: int) -> None:
    """dqe mode: a violated `fail` rule stops the batch before anything of it is written."""
    if counts.fail_rule_violations:
        failed = [rule.name for rule in with_action(rules, "fail") if counts.failures_per_rule[rule.name]]
        raise DataQualityFailure(
            codes.FAIL_RULE_VIOLATED,
            f"{counts.fail_rule_violations} row(s) violate fail rule(s) {failed} in batch {batch_id}; "
            "nothing from this batch was written",
            file=action.config_file,
            field=action.name,
        )


def run_split(spark: SparkSession, action: DataQualityAction, warehouse: Warehouse, run_id: str) -> SplitReport:
    """Process every source batch not yet seen by this action's checkpoint, then stop."""

    def process(batch: DataFrame, batch_id: int, stream_id: str) -> SplitReport:
        return split_batch(spark, batch, batch_id, stream_id, action, warehouse, run_id, parsing)

    source_rows = read_source_stream(spark, action.source, warehouse)
    sensitive = action.quarantine is not None and bool(action.quarantine.sensitive_columns)
    parsing = record_parsing(action.source, source_rows.schema, shows_values=not sensitive)
    stream = with_view_columns(source_rows, action.operational_metadata)
    # A rule naming a column the source lacks is a config mistake: refuse it before any row is written.
    problems = rule_column_problems(spark, stream.schema, action.rules, action.expectations_file)
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
    _refuse_restart_without_checkpoint(warehouse, action)
    # Claimed only once the config is known to be right: a refused run leaves no trace, not even a claim.
    warnings, conf = [], {}
    if action.quarantine is not None:
        columns = before_writing(spark, warehouse, action, by=run_id)
        warnings = columns.warnings(action.quarantine.inbox_table, action.quarantine.outbox_table)
        # A task per source file: a rejected row's position in its file is then its number in its task.
        conf = ONE_FILE_PER_TASK if SOURCE_POSITION in columns.inbox else {}
    try:
        report = SplitReport(warnings=warnings)
        return run_action_stream(stream, action, warehouse, SPLIT_STREAM, process, report, conf)
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
    if _CSV_HEADER_MISMATCH.search(error):
        file = _FILE_READ.search(error)
        mismatch = _HEADER_DETAIL.search(error)
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
