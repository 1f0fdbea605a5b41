"""The split's judge: every row of a batch judged once, and the verdict kept on disk until both tables hold it.

Rules may read the clock (`current_timestamp()`), draw at random or call a function; the source may
lose or rewrite a file, or be vacuumed, after the batch was read. Judged twice, in the two queries
that feed the validated table and the inbox, such a batch puts rows in both tables or in neither.
So the batch is read and judged once, into a local checkpoint that both appends read, and its
rejected rows are written as Parquet beside the split's checkpoint before the first commit. A re-run
after a crash between the two commits, minutes or days later, writes the inbox from that stage
instead of judging again; before the validated commit nothing of the batch is written, so a re-run
judges it afresh. The stage is removed once both commits hold the batch.

Keeping the judged batch in Spark's block store costs a copy of every row. It is needed only where judging
again could decide otherwise: rules over a Delta source's immutable files that read no clock and that Spark
knows to be deterministic give the same verdict each time, so there the appends judge the batch again
instead, and the stage still holds the rejected rows before the first commit.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from py4j.protocol import Py4JJavaError
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from quarantine_assets.config.models import Rule
from quarantine_assets.engine.lake.dlq_schema import SOURCE_FILE
from quarantine_assets.engine.lake.tables import Warehouse, checkpoint_folder
from quarantine_assets.engine.spark.parse_errors import RecordParsing, parse_code_counts, parse_codes_from
from quarantine_assets.engine.spark.rules import failure_columns, failures_from, passes
from quarantine_assets.engine.spark.source import with_source_position

KEPT = "_qa_kept"
_OUTCOME_PREFIX = "_qa_passes_"
_COMPLETE = "_SUCCESS"  # Spark's file committer writes it last, when every file of the stage is in place
# What Spark deems deterministic but can still differ between two queries of one batch: the clock (replaced
# by a literal per query), functions whose body Spark cannot see (a UDF is deterministic unless told) and
# subqueries, which read tables that may change between the two queries.
_DIFFERS_BETWEEN_QUERIES = re.compile(
    r'"class":"[\w.$]*\.(Current\w*|Now|LocalTimestamp|\w*UDF\w*|ScalarSubquery|Exists|ListQuery|InSubquery'
    r'|LateralSubquery)"'
)


def outcome_column(index: int) -> str:
    """The column holding whether the row passed the rule at `index`, as judged once."""
    return f"{_OUTCOME_PREFIX}{index}"


def judge(batch: DataFrame, rules: list[Rule], kept_by: list[Rule], *, with_source_file: bool) -> DataFrame:
    """The batch with each rule's outcome, whether the row is kept (it passed every rule of `kept_by`)
    and, if `with_source_file`, the file a rejected row was read from.

    The row's place in its file is numbered here, before any filter, as `with_source_position` needs.
    The outcomes are computed in a projection of their own and `kept` from them, so a rule that is not
    deterministic is evaluated once per row (Spark does not inline a non-deterministic projection twice).
    """
    rows = with_source_position(batch)
    judged = rows.select("*", *[passes(rule).alias(outcome_column(i)) for i, rule in enumerate(rules)])
    kept = [F.col(outcome_column(rules.index(rule))) for rule in kept_by]
    judged = judged.withColumn(KEPT, F.lit(True) if not kept else _all(kept))
    if with_source_file:
        # Only a rejected row needs the name of its file; kept in memory for every row, it costs.
        judged = judged.withColumn(SOURCE_FILE, F.when(~F.col(KEPT), F.nullif(F.input_file_name(), F.lit(""))))
    return judged


def _all(columns: list[Column]) -> Column:
    both = columns[0]
    for column in columns[1:]:
        both = both & column
    return both


def judges_alike_each_time(judging: DataFrame) -> bool:
    """Whether computing `judging` (rows and the outcomes of their rules) again gives the same outcomes:
    Spark's analyzed plan is deterministic and reads neither the clock nor a user function. Over Spark
    Connect the client holds no plan to read, so the answer is no."""
    plan = getattr(judging, "_jdf", None)
    if plan is None:
        return False
    analyzed = plan.queryExecution().analyzed()
    try:
        described = analyzed.toJSON()
    except Py4JJavaError:  # a plan node that cannot describe itself: judge it as if it could differ
        return False
    return bool(analyzed.deterministic()) and not _DIFFERS_BETWEEN_QUERIES.search(described)


@contextmanager
def judged_once(judged: DataFrame, *, judges_alike: bool = False) -> Iterator[DataFrame]:
    """The judged batch as every later query of the block reads it: kept in Spark's block store by the
    first job that computes it (for the split, the stage's write), freed when the block ends; or, when
    `judges_alike` (the rows and their outcomes come out the same each time they are computed), as it is.

    A local checkpoint, not a cache: a cached block that is lost is recomputed, which would judge its
    rows again, while a lost checkpoint block fails the job that reads it, and the batch is retried.
    """
    if judges_alike:
        yield judged
        return
    checkpointed = judged.localCheckpoint(eager=False)
    try:
        yield checkpointed
    finally:
        _free(checkpointed)


def _free(checkpointed: DataFrame) -> None:
    """Spark frees a local checkpoint's blocks only once the JVM collects the plan holding them, which in a
    long-lived process can take long enough for batches' checkpoints to fill the block store. Over Spark
    Connect the server drops the plan when the client's DataFrame is collected."""
    plan = getattr(checkpointed, "_jdf", None)  # absent over Spark Connect
    if plan is not None:
        plan.queryExecution().analyzed().rdd().unpersist(False)


def judged_outcomes(rules: list[Rule]) -> dict[str, Column]:
    """Each rule's outcome as the judge recorded it, by the rule's name."""
    return {rule.name: F.col(outcome_column(index)) for index, rule in enumerate(rules)}


@dataclass(frozen=True)
class VerdictCounts:
    rows: int
    kept: int
    failures_per_rule: dict[str, int]
    parse_errors: dict[str, int]

    @property
    def rejected(self) -> int:
        return self.rows - self.kept

    def with_kept(self, kept: int) -> VerdictCounts:
        """The counts of a stage (rejected rows only) and of the `kept` rows its validated commit holds.
        Those rows are not read again, so a rule whose failures keep a row counts only the staged ones."""
        return VerdictCounts(self.rows + kept, self.kept + kept, self.failures_per_rule, self.parse_errors)


@dataclass(frozen=True)
class VerdictStage:
    """One batch's rejected rows as judged, under `<checkpoint>/verdicts/<stream id>/<batch id>`."""

    warehouse: Warehouse
    action_key: str
    stream: str
    stream_id: str
    batch_id: int

    @property
    def _relative(self) -> str:
        return f"{checkpoint_folder(self.action_key, self.stream)}/verdicts/{self.stream_id}/{self.batch_id}"

    @property
    def location(self) -> str:
        return f"{self.warehouse.root}/{self._relative}"

    def is_complete(self) -> bool:
        return self.warehouse.holds_file(f"{self._relative}/{_COMPLETE}")

    def write(
        self, judged: DataFrame, rules: list[Rule], kept_by: list[Rule], parsing: RecordParsing | None
    ) -> VerdictCounts:
        """Writes the rejected rows of `judged`, over what a crashed attempt left (it is written before the
        batch's first commit), and returns the counts of all its rows, observed on the way: a rule of
        `kept_by` fails no kept row, so its failures are counted over the rejected rows only."""
        outcomes = judged_outcomes(rules)
        failing_kept_rows = [rule for rule in rules if rule not in kept_by]
        every_row, rejected_row = Observation(), Observation()
        observed = judged.observe(
            every_row,
            F.count(F.lit(1)).alias("rows"),
            F.sum(F.col(KEPT).cast("long")).alias("kept"),
            *failure_columns(failing_kept_rows, outcomes),
        )
        rejected = rejected_rows(observed).observe(
            rejected_row, *failure_columns(kept_by, outcomes), *(parse_code_counts(parsing) if parsing else [])
        )
        rejected.write.mode("overwrite").parquet(self.location)
        counted, counted_rejected = every_row.get, rejected_row.get
        failures = failures_from(counted, failing_kept_rows) | failures_from(counted_rejected, kept_by)
        return VerdictCounts(
            rows=int(counted["rows"]),
            kept=int(counted["kept"] or 0),
            failures_per_rule={rule.name: failures[rule.name] for rule in rules},
            parse_errors=parse_codes_from(counted_rejected, parsing) if parsing else {},
        )

    def read(self, spark: SparkSession, judged: DataFrame) -> DataFrame:
        """The staged rows, typed as `judged` (also when the stage holds no file: a batch of no rows)."""
        return spark.read.schema(judged.schema).parquet(self.location)

    def remove(self) -> None:
        self.warehouse.remove_dir(self._relative)


def kept_rows(judged: DataFrame) -> DataFrame:
    return judged.where(F.col(KEPT))


def rejected_rows(judged: DataFrame) -> DataFrame:
    return judged.where(~F.col(KEPT))


def without_verdict(rows: DataFrame, rules: list[Rule]) -> DataFrame:
    return rows.drop(KEPT, *[outcome_column(index) for index in range(len(rules))])


def verdict_counts(judged: DataFrame, rules: list[Rule], parsing: RecordParsing | None) -> VerdictCounts:
    """The counts of judged rows, in one aggregate: it reads the outcome columns and the raw text of
    unparsed records, not the rows."""
    return _counts_from(judged.agg(*_count_columns(rules, parsing)).first().asDict(), rules, parsing)


def _count_columns(rules: list[Rule], parsing: RecordParsing | None) -> list[Column]:
    """Rows, kept rows, failures per rule and unparsed records per parse code (all rejected: a record that
    did not parse fails a drop rule)."""
    return [
        F.count(F.lit(1)).alias("rows"),
        F.sum(F.col(KEPT).cast("long")).alias("kept"),
        *failure_columns(rules, judged_outcomes(rules)),
        *(parse_code_counts(parsing) if parsing else []),
    ]


def _counts_from(counted: dict, rules: list[Rule], parsing: RecordParsing | None) -> VerdictCounts:
    return VerdictCounts(
        rows=int(counted["rows"]),
        kept=int(counted["kept"] or 0),
        failures_per_rule=failures_from(counted, rules),
        parse_errors=parse_codes_from(counted, parsing) if parsing else {},
    )
