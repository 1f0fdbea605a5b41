"""Delta commits that are safe to repeat: idempotent appends and conflict retries."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from delta.exceptions import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentTransactionException,
    ConcurrentWriteException,
    DeltaConcurrentModificationException,
    MetadataChangedException,
    ProtocolChangedException,
)
from pyspark.sql import DataFrame, SparkSession

from quarantine_assets.engine.lake.delta_log import committed_rows

if TYPE_CHECKING:
    from quarantine_assets.engine.lake.tables import Warehouse

# Open-source Delta has no row-level concurrency: two writers on one DLQ conflict even with
# disjoint predicates, and two creating one table (the claims table beside a DLQ made from the reference's
# DDL) both change its protocol. Every write we retry is idempotent, so retrying is always safe.
COMMIT_CONFLICTS = (
    DeltaConcurrentModificationException,
    ConcurrentAppendException,
    ConcurrentDeleteReadException,
    ConcurrentDeleteDeleteException,
    ConcurrentTransactionException,
    ConcurrentWriteException,
    MetadataChangedException,
    ProtocolChangedException,
)
MAX_ATTEMPTS = 10
FIRST_BACKOFF_SECONDS = 0.2
MAX_BACKOFF_SECONDS = 10.0
log = logging.getLogger(__name__)

T = TypeVar("T")


def retry_on_conflict(commit: Callable[[], T]) -> T:
    """Bounded retries with jittered exponential backoff, so writers that collided do not collide again."""
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            return commit()
        except COMMIT_CONFLICTS as conflict:
            if attempt == MAX_ATTEMPTS:
                raise
            backoff = random.uniform(0, min(MAX_BACKOFF_SECONDS, FIRST_BACKOFF_SECONDS * 2**attempt))
            log.warning("commit conflict %s; retry %d in %.2fs", type(conflict).__name__, attempt, backoff)
            time.sleep(backoff)
    raise AssertionError("unreachable")


def append_to_dlq_table(
    spark: SparkSession, rows: DataFrame, warehouse: Warehouse, table: str, writer_id: str, batch_id: int
) -> int:
    """`append_once` into an inbox or outbox, writing context columns only where the user's table has them.

    Returns the rows the commit that holds this batch wrote, by Delta's own count, so a caller
    can prove that no row was lost, also when Delta skipped a replayed batch.
    """
    path = warehouse.path(table)
    columns = set(spark.read.format("delta").load(path).columns)
    append_once(rows.select(*[c for c in rows.columns if c in columns]), path, writer_id, batch_id)
    return committed_rows(warehouse.log(table), writer_id, batch_id) or 0


def append_once(rows: DataFrame, path: str, writer_id: str, batch_id: int, *, add_columns: bool = False) -> None:
    """Delta records (writer_id, batch_id) in the commit and skips a batch it has already seen.
    `add_columns`: columns of `rows` the table lacks are added to it; retyped ones are still refused."""
    retry_on_conflict(
        lambda: (
            rows.write.format("delta")
            .mode("append")
            .option("txnAppId", writer_id)
            .option("txnVersion", batch_id)
            .option("mergeSchema", str(add_columns).lower())
            .save(path)
        )
    )
