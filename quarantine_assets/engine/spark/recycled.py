"""The recycled stream: outbox payloads back into typed rows, re-validated, into validated or back to the inbox."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from quarantine_assets import codes
from quarantine_assets.config.models import DataQualityAction
from quarantine_assets.engine.lake.delta_log import committed_rows
from quarantine_assets.engine.lake.dlq_columns import DlqColumns
from quarantine_assets.engine.lake.dlq_schema import (
    ATTEMPT,
    ERRORS,
    FAILED_RULES,
    INBOX_CONTEXT_COLUMNS,
    INBOX_CORE_COLUMNS,
    KEY,
    REASON,
    RESOLVED_AT,
    RESOLVED_BY,
    RUN_ID,
    SOURCE_TABLE,
    STATUS,
    UPDATED_AT,
    UPDATED_BY,
)
from quarantine_assets.engine.lake.statuses import EXHAUSTED, QUARANTINED, RECYCLED
from quarantine_assets.engine.lake.tables import Warehouse
from quarantine_assets.engine.spark.claims import before_writing
from quarantine_assets.engine.spark.commits import append_once
from quarantine_assets.engine.spark.inbox import (
    attempt_column,
    quote,
    same_attempt,
    scoped_key_condition,
    scoped_source,
)
from quarantine_assets.engine.spark.merge import merge_into, update_where, when_matched_update
from quarantine_assets.engine.spark.operational_metadata import with_table_columns
from quarantine_assets.engine.spark.payload_types import PAYLOAD, payload_type_failures, sql_string, typed_columns
from quarantine_assets.engine.spark.redaction import holds_clear_values, redacted_payload
from quarantine_assets.engine.spark.rules import applicable_rules, error_details, failed_rules_column
from quarantine_assets.engine.spark.streams import BatchCommit, StageRun, run_action_stream, writer_id
from quarantine_assets.engine.spark.validated import payload_schema, validated_schema
from quarantine_assets.engine.spark.verdict import judged_once
from quarantine_assets.errors import DataQualityFailure

RECYCLED_STREAM = "recycled"
# Outcomes of a recycled row, besides going back to quarantined or exhausted.
LANDS = "lands"
ALREADY_LANDED = "already_landed"
UNACCOUNTED = "unaccounted"


@dataclass
class RecycleReport:
    batches: int = 0
    rows_landed: int = 0  # re-validated and appended to the validated table
    rows_appended: int = 0  # what the validated table's commits of these landings wrote, by Delta's count
    rows_requarantined: int = 0  # failed again: back in the inbox
    rows_exhausted: int = 0  # failed again at the attempt cap: closed
    rows_already_landed: int = 0  # passed, but an earlier landing already appended them: not appended again
    warnings: list[str] = field(default_factory=list)  # what this DLQ loses without its missing context columns


def recycle_batch(run: StageRun, outbox_rows: DataFrame, commit: BatchCommit) -> RecycleReport:
    """Re-validate a batch of outbox rows; each passing row lands in the validated table once.

    Three commits, each safe to repeat: a MERGE settles the failing rows (back to quarantined, or
    exhausted) and tags each passing row with this landing; the append lands the rows tagged so,
    idempotent on (stream, batch); an UPDATE stamps them landed (`_dlq_resolved_at`). A row is
    never stamped before its append commits, so a purge cannot remove a row that has not landed; a
    row tagged by a landing whose append never committed (a crash, then a reset checkpoint) is tagged
    again and lands; one whose append did commit is stamped and not appended again. Where the action has
    sensitive columns, the first MERGE redacts the values the fix supplied in the inbox row, and a last one
    in the batch's outbox rows, once nothing of the batch needs them.
    """
    spark, action, warehouse, columns, run_id = run.spark, run.action, run.warehouse, run.columns, run.run_id
    batch_id = commit.batch_id
    rows = outbox_rows.alias("out").where(F.col(SOURCE_TABLE) == action.quarantine.source_table)
    typed = judged_payloads(
        rows,
        action,
        payload_schema(spark, warehouse, action),
        KEY,
        SOURCE_TABLE,
        attempt_column(columns, "out").alias(ATTEMPT),
    )
    # Judged once for the MERGEs, the landing join and the append: a rule that reads the clock or is not
    # deterministic cannot settle a row one way and land it the other.
    with judged_once(typed.withColumn(ERRORS, error_details(F.col(FAILED_RULES), action.rules))) as judged:
        landing = Landing(action, commit.stream_id, batch_id)
        inbox_path = warehouse.path(action.quarantine.inbox_table)
        settled_now = _settle_in_inbox(spark, inbox_path, judged, action, columns, run_id, landing)
        with _landing_outcomes(spark, warehouse, inbox_path, judged, action, columns, landing, settled_now) as (
            outcomes,
            count,
            landed_elsewhere,
        ):
            _refuse_unaccounted(outcomes, count, action, batch_id)
            appended = _append_landed(run, outcomes, count.get(LANDS, 0), landing)
            if columns.stamps_landings:
                _stamp_landed(spark, inbox_path, [landing.tag, *landed_elsewhere], action, columns)
            if action.quarantine.sensitive_columns:
                _redact_outbox_rows(warehouse, judged, action)
    return RecycleReport(
        batches=1,
        rows_landed=count.get(LANDS, 0),
        rows_appended=appended,
        rows_requarantined=count.get(QUARANTINED, 0),
        rows_exhausted=count.get(EXHAUSTED, 0),
        rows_already_landed=count.get(ALREADY_LANDED, 0),
    )


def _append_landed(run: StageRun, outcomes: DataFrame, landing_rows: int, landing: Landing) -> int:
    """The append of the rows this landing lands, in the validated table's columns, idempotent on (landing,
    batch); returns the rows its commit wrote, by Delta's count, once it is the `landing_rows` decided."""
    action, warehouse = run.action, run.warehouse
    schema = validated_schema(run.spark, warehouse, action)
    landed = with_table_columns(outcomes.where(F.col("_outcome") == LANDS), action.operational_metadata)
    append_once(
        landed.select(*[quote(field.name) for field in schema]),
        warehouse.path(action.target_table),
        landing.writer,
        landing.batch_id,
    )
    appended = committed_rows(warehouse.log(action.target_table), landing.writer, landing.batch_id) or 0
    if appended != landing_rows:
        raise _unaccounted(
            action, landing.batch_id, f"{landing_rows} row(s) landed, but the validated commit wrote {appended}"
        )
    return appended


def judged_payloads(
    rows: DataFrame, action: DataQualityAction, payload_fields: StructType, *kept: str | Column
) -> DataFrame:
    """Each row's payload (`_row_data`) in the columns and types of `payload_fields`, and the rules it fails
    (`FAILED_RULES`) as the recycled stream judges it: a value that does not come back exactly in its column's
    type fails `payload_type`, then the action's rules. `kept`: columns of `rows` kept beside them."""
    rules = applicable_rules(action.rules, payload_fields.fieldNames())
    typed = rows.select(
        *kept,
        payload_type_failures(payload_fields, action.quarantine.sensitive_columns).alias("_type_failures"),
        *typed_columns(payload_fields),
    )
    return typed.withColumn(FAILED_RULES, F.concat(F.col("_type_failures"), failed_rules_column(rules)))


@dataclass(frozen=True)
class Landing:
    """One recycled batch's landing: its tag on the inbox rows it lands, and its append's Delta txn."""

    action: DataQualityAction
    stream_id: str
    batch_id: int

    @property
    def tag(self) -> str:
        return f"{RECYCLED_STREAM}:{self.stream_id}:{self.batch_id}"

    @property
    def writer(self) -> str:
        return writer_id(self.action, RECYCLED_STREAM, self.stream_id)

    @classmethod
    def from_tag(cls, action: DataQualityAction, tag: str) -> Landing:
        _, stream_id, batch_id = tag.rsplit(":", 2)
        return cls(action, stream_id, int(batch_id))

    def committed(self, warehouse: Warehouse) -> bool:
        """Whether the validated table holds this landing's append: its snapshot remembers each writer's last
        transaction for as long as the table lives, after the commit files are cleaned up, and a stream's
        batches commit in order."""
        version = warehouse.delta_table(self.action.target_table).transaction_version(self.writer)
        return version is not None and version >= self.batch_id


def _settle_in_inbox(
    spark: SparkSession,
    inbox_path: str,
    judged: DataFrame,
    action: DataQualityAction,
    columns: DlqColumns,
    run_id: str,
    landing: Landing,
) -> int:
    """One MERGE: a failing row goes back to quarantined with attempt + 1, or is closed as exhausted at
    the cap (its attempt stays the last one made); a passing row is tagged with this landing. Only rows
    still `recycled`, not tagged by a landing and not stamped landed change: what the MERGE decided is
    recorded in the inbox, and a re-run of the batch, which judges it again, changes nothing. Returns the
    inbox rows it changed, by Delta's count.
    """
    max_attempts = action.quarantine.max_attempts
    attempt = f"coalesce(dlq.{ATTEMPT}, 1)"
    at_cap = _at_cap(f"dlq.{ATTEMPT}", action, columns)
    unsettled = f"dlq.{STATUS} = '{RECYCLED}'" + (f" AND dlq.{RESOLVED_AT} IS NULL" if columns.stamps_landings else "")
    touched = {RUN_ID: sql_string(run_id), UPDATED_AT: "current_timestamp()"}
    failed_again = touched | {
        STATUS: f"CASE WHEN {at_cap} THEN '{EXHAUSTED}' ELSE '{QUARANTINED}' END",
        **({ATTEMPT: f"CASE WHEN {at_cap} THEN {attempt} ELSE {attempt} + 1 END"} if columns.counts_attempts else {}),
        FAILED_RULES: f"new.{FAILED_RULES}",
        ERRORS: f"new.{ERRORS}",
        # The row's own count: a cap lowered since its last attempt closes it past the cap.
        REASON: f"CASE WHEN {at_cap} THEN concat('failed validation on each of its ', "
        f"{attempt if columns.counts_attempts else max_attempts}, ' attempt(s) (cap {max_attempts})') END",
        UPDATED_BY: f"'{RECYCLED_STREAM}'",
        RESOLVED_AT: f"CASE WHEN {at_cap} THEN current_timestamp() END",
        RESOLVED_BY: f"CASE WHEN {at_cap} THEN '{RECYCLED_STREAM}' END",
    }
    if columns.stamps_landings:
        # A row a landing tagged passed when it was judged: a re-run of the batch does not judge it again.
        unsettled += f" AND NOT startswith(coalesce(dlq.{UPDATED_BY}, ''), '{RECYCLED_STREAM}:')"
    # The sensitive values of the fix: the landing appends them from the outbox's row, not from this one.
    passed = _supplied_values_redacted(action, "dlq")
    if columns.stamps_landings:
        passed |= touched | {UPDATED_BY: sql_string(landing.tag)}
    failed_again |= _supplied_values_redacted(action, "dlq")
    clauses = [when_matched_update(f"{unsettled} AND size(new.{FAILED_RULES}) > 0", columns.inbox_values(failed_again))]
    if passed:
        clauses.append(when_matched_update(f"{unsettled} AND size(new.{FAILED_RULES}) = 0", passed))
    on = same_attempt("dlq", "new", action.quarantine.source_table, columns)
    return int(merge_into(inbox_path, judged, on, clauses)["num_updated_rows"])


def _at_cap(attempt: str, action: DataQualityAction, columns: DlqColumns) -> str:
    """Whether a row at `attempt` (a column, NULL before the column was added: the first) that fails again is
    closed as exhausted rather than returned, as SQL."""
    return f"coalesce({attempt}, 1) >= {action.quarantine.max_attempts}" if columns.counts_attempts else "false"


def _supplied_values_redacted(action: DataQualityAction, alias: str) -> dict[str, str]:
    """The payload's update that redacts the sensitive values a fix supplied, for an action that has them."""
    quarantine = action.quarantine
    if not quarantine.sensitive_columns:
        return {}
    return {PAYLOAD: redacted_payload(f"{alias}.{PAYLOAD}", quarantine.sensitive_columns, quarantine.redaction)}


def _redact_outbox_rows(warehouse: Warehouse, judged: DataFrame, action: DataQualityAction) -> None:
    """Once the batch has landed or returned every row, the outbox rows that carried them keep no sensitive value
    in clear. Last, so that a re-run of the batch still finds the values it lands; a replay redacts nothing twice."""
    quarantine = action.quarantine
    sent = judged.select(KEY, SOURCE_TABLE).distinct()
    in_clear = holds_clear_values(f"dlq.{PAYLOAD}", quarantine.sensitive_columns, quarantine.redaction)
    merge_into(
        warehouse.path(quarantine.outbox_table),
        sent,
        scoped_key_condition("dlq", "new", quarantine.source_table),
        [when_matched_update(in_clear, _supplied_values_redacted(action, "dlq"))],
    )


@contextmanager
def _landing_outcomes(
    spark: SparkSession,
    warehouse: Warehouse,
    inbox_path: str,
    judged: DataFrame,
    action: DataQualityAction,
    columns: DlqColumns,
    landing: Landing,
    settled_now: int,
) -> Iterator[tuple[DataFrame, dict[str, int], list[str]]]:
    """Each row's outcome and the rows per outcome, and beside them the tags of the other landings whose rows
    of the batch have landed already.

    Where the settling MERGE changed every row of the batch (`settled_now`, as the first run of a batch
    does), it decided each outcome as the judged batch says: a passing row is tagged with this landing, a
    failing one returned or closed at the cap. Otherwise each outcome is read back from the inbox, where the
    settling MERGE recorded it the first time the batch ran: only rows tagged with this landing are appended.
    The inbox is read once, kept in Spark's block store for the block: the outcomes are counted, checked and
    appended from that one read.

    A row tagged by another landing, and not stamped, was left by a crash between that landing's append
    and its stamp, and then a reset checkpoint: if the validated table's log holds that append, the row
    has landed; if not, it is tagged again with this landing and lands now. Without the tag columns, a
    passing row lands and a failing one is back in the inbox, as judged now: the append's transaction id
    still keeps a replayed batch from landing twice.
    """
    passed = F.size(FAILED_RULES) == 0
    if not columns.stamps_landings:
        as_judged = judged.withColumn("_outcome", F.when(passed, F.lit(LANDS)).otherwise(F.lit(QUARANTINED)))
        yield as_judged, _counted(as_judged), []
        return
    closed = F.expr(_at_cap(ATTEMPT, action, columns))
    as_judged = judged.withColumn(
        "_outcome", F.when(passed, F.lit(LANDS)).when(closed, F.lit(EXHAUSTED)).otherwise(F.lit(QUARANTINED))
    )
    count = _counted(as_judged)
    # The inbox holds one row per key, which the MERGE matched on: as many changed as the batch has rows
    # means each row of the batch was changed by this MERGE, as it judged it.
    if sum(count.values()) == settled_now:
        yield as_judged, count, []
        return
    settled = _settled(spark, inbox_path, judged, action, columns).persist()
    try:
        landed_elsewhere, never_landed = _other_landings(warehouse, action, landing, settled)
        if never_landed:  # rare: the inbox is read again, as the tagging left it
            _tag_again(spark, inbox_path, judged, action, columns, never_landed, landing)
            settled.unpersist()
            settled = _settled(spark, inbox_path, judged, action, columns).persist()
        outcomes = _with_outcome(settled, warehouse, columns, landing, landed_elsewhere)
        yield outcomes, _counted(outcomes), landed_elsewhere
    finally:
        settled.unpersist()


def _counted(outcomes: DataFrame) -> dict[str, int]:
    return {row["_outcome"]: row["count"] for row in outcomes.groupBy("_outcome").count().collect()}


def _other_landings(
    warehouse: Warehouse, action: DataQualityAction, landing: Landing, settled: DataFrame
) -> tuple[list[str], list[str]]:
    """The tags of the other landings that tagged rows of the batch and did not stamp them: those whose append
    the validated table holds, and those whose append never committed."""
    others = [
        Landing.from_tag(action, row[UPDATED_BY])
        for row in settled.where(F.col(RESOLVED_AT).isNull() & (F.col(UPDATED_BY) != landing.tag))
        .where(F.startswith(UPDATED_BY, F.lit(f"{RECYCLED_STREAM}:")))
        .select(UPDATED_BY)
        .distinct()
        .collect()
    ]
    landed_elsewhere = [other.tag for other in others if other.committed(warehouse)]
    return landed_elsewhere, [other.tag for other in others if other.tag not in landed_elsewhere]


def _with_outcome(
    settled: DataFrame, warehouse: Warehouse, columns: DlqColumns, landing: Landing, landed_elsewhere: list[str]
) -> DataFrame:
    same_attempt_row = F.col("_settled_attempt") == F.col(ATTEMPT)
    status, tagged = F.col(STATUS), F.col(UPDATED_BY)
    # Back in the inbox at a later attempt, whatever the operator did with it since: returned by this batch,
    # or, when a reset checkpoint replays the batch, by it and by later ones.
    returned = F.col("_settled_attempt") > F.col(ATTEMPT)
    if not columns.counts_attempts:
        returned = same_attempt_row & (status == QUARANTINED)
    # A row gone from the inbox after this batch's append committed was settled by it (landed, or returned
    # and closed since) and then purged, which removes closed rows only: a replay finds it accounted for.
    purged_since = status.isNull() & F.lit(landing.committed(warehouse))
    outcome = (
        F.when(same_attempt_row & (status == RECYCLED) & (tagged == landing.tag), F.lit(LANDS))
        .when(purged_since & (F.size(FAILED_RULES) == 0), F.lit(LANDS))
        .when(purged_since, F.lit(QUARANTINED))
        .when(
            same_attempt_row & (status == RECYCLED) & (F.col(RESOLVED_AT).isNotNull() | tagged.isin(landed_elsewhere)),
            F.lit(ALREADY_LANDED),
        )
        .when(returned, F.lit(QUARANTINED))
        .when(same_attempt_row & (status == EXHAUSTED), F.lit(EXHAUSTED))
        .otherwise(F.lit(UNACCOUNTED))
    )
    return settled.withColumn("_outcome", outcome)


def _settled(
    spark: SparkSession, inbox_path: str, judged: DataFrame, action: DataQualityAction, columns: DlqColumns
) -> DataFrame:
    """The batch's rows beside their inbox rows as they are now."""
    inbox = (
        spark.read.format("delta")
        .load(str(inbox_path))
        .alias("settled")
        .where(F.col(SOURCE_TABLE) == action.quarantine.source_table)
        .select(
            KEY,
            attempt_column(columns, "settled").alias("_settled_attempt"),
            STATUS,
            RESOLVED_AT,
            UPDATED_BY,
        )
    )
    return judged.join(inbox, KEY, "left")


def _tag_again(
    spark: SparkSession,
    inbox_path: str,
    judged: DataFrame,
    action: DataQualityAction,
    columns: DlqColumns,
    never_landed: list[str],
    landing: Landing,
) -> None:
    orphaned = ", ".join(sql_string(tag) for tag in never_landed)
    condition = f"dlq.{STATUS} = '{RECYCLED}' AND dlq.{RESOLVED_AT} IS NULL AND dlq.{UPDATED_BY} IN ({orphaned})"
    values = {UPDATED_AT: "current_timestamp()", UPDATED_BY: sql_string(landing.tag)}
    on = same_attempt("dlq", "new", action.quarantine.source_table, columns)
    merge_into(inbox_path, judged, on, [when_matched_update(condition, columns.inbox_values(values))])


def _stamp_landed(
    spark: SparkSession, inbox_path: str, landed_tags: list[str], action: DataQualityAction, columns: DlqColumns
) -> None:
    """Rows tagged by a landing whose append has committed (`landed_tags`) are stamped landed;
    `_dlq_resolved_by` stays the operator whose fix landed. Their failed rules were those of the attempt
    before the fix: they move into the reason, as history, and the row fails no rule now.

    The tags find the rows: a tag is set on the rows of one landing's batch only, at the attempt it
    judged, and a tagged row changes no more until it is stamped, so no join with the batch is needed."""
    attempt = f"coalesce(dlq.{ATTEMPT}, 1)" if columns.counts_attempts else "1"
    earlier_failures = f"array_join(transform(dlq.{FAILED_RULES}, failure -> failure.name), ', ')"
    values = {
        RESOLVED_AT: "current_timestamp()",
        UPDATED_AT: "current_timestamp()",
        REASON: f"concat('landed on attempt ', {attempt}, '; before its fix it failed: ', {earlier_failures})",
        FAILED_RULES: f"CAST(array() AS {INBOX_CORE_COLUMNS[FAILED_RULES]})",
        ERRORS: f"CAST(array() AS {INBOX_CONTEXT_COLUMNS[ERRORS]})",
    }
    tags = ", ".join(sql_string(tag) for tag in landed_tags)
    condition = (
        f"{scoped_source('dlq', action.quarantine.source_table)} AND dlq.{STATUS} = '{RECYCLED}' "
        f"AND dlq.{RESOLVED_AT} IS NULL AND dlq.{UPDATED_BY} IN ({tags})"
    )
    update_where(spark, inbox_path, columns.inbox_values(values), condition)


def _refuse_unaccounted(outcomes: DataFrame, count: dict[str, int], action: DataQualityAction, batch_id: int) -> None:
    """A row that neither lands nor is back in the inbox fails the batch before anything of it lands:
    the run fails, the checkpoint does not move past the batch, and the next run retries it."""
    if not count.get(UNACCOUNTED):
        return
    keys = [row[KEY] for row in outcomes.where(F.col("_outcome") == UNACCOUNTED).limit(5).collect()]
    raise _unaccounted(
        action,
        batch_id,
        f"{count[UNACCOUNTED]} row(s) (keys {keys}) are neither landed nor back in the inbox: their inbox row is "
        "missing or at another attempt",
    )


def _unaccounted(action: DataQualityAction, batch_id: int, what: str) -> DataQualityFailure:
    return DataQualityFailure(
        codes.RECYCLE_UNACCOUNTED,
        f"recycled batch {batch_id} of {action.name}: {what}. Nothing of the batch was stamped landed; the next "
        "run retries it",
        file=action.config_file,
        field=action.name,
    )


def run_recycled(spark: SparkSession, action: DataQualityAction, warehouse: Warehouse, run_id: str) -> RecycleReport:
    """Re-validate every outbox row this action's checkpoint has not seen; each lands once."""
    columns = before_writing(spark, warehouse, action, by=run_id)

    # The outbox is appended to; its only other commits are erasures, which delete rows that landed already.
    outbox = (
        spark.readStream.format("delta")
        .option("skipChangeCommits", "true")
        .load(warehouse.path(action.quarantine.outbox_table))
    )
    warnings = columns.warnings(action.quarantine.inbox_table, action.quarantine.outbox_table)
    run = StageRun(spark, action, warehouse, run_id, columns)
    return run_action_stream(
        run, outbox, RECYCLED_STREAM, functools.partial(recycle_batch, run), RecycleReport(warnings=warnings)
    )
