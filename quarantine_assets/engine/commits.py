"""Delta commits that are safe to repeat: idempotent appends and conflict retries."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from delta.exceptions import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentTransactionException,
    ConcurrentWriteException,
    DeltaConcurrentModificationException,
    MetadataChangedException,
)
from pyspark.sql import DataFrame, SparkSession

from quarantine_assets.engine.delta_log import committed_rows

# Open-source Delta has no row-level concurrency: two writers on one DLQ conflict even with
# disjoint predicates. Every write we retry is idempotent, so retrying is always safe.
COMMIT_CONFLICTS = (
    DeltaConcurrentModificationException,
    ConcurrentAppendException,
    ConcurrentDeleteReadException,
    ConcurrentDeleteDeleteException,
    ConcurrentTransactionException,
    ConcurrentWriteException,
    MetadataChangedException,
)
MAX_ATTEMPTS = 8
FIRST_BACKOFF_SECONDS = 0.2

T = TypeVar("T")


def retry_on_conflict(commit: Callable[[], T]) -> T:
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            return commit()
        except COMMIT_CONFLICTS:
            if attempt == MAX_ATTEMPTS:
                raise
            time.sleep(FIRST_BACKOFF_SECONDS * 2 ** (attempt - 1))
    raise AssertionError("unreachable")


def append_to_dlq_table(spark: SparkSession, rows: DataFrame, path: Path, writer_id: str, batch_id: int) -> int:
    """`append_once` into an inbox or outbox, writing context columns only where the user's table has them.

    Returns the rows the commit that holds this batch wrote, by Delta's own count, so a caller
    can prove that no row was lost, also when Delta skipped a replayed batch.
    """
    columns = set(spark.read.format("delta").load(str(path)).columns)
    append_once(rows.select(*[c for c in rows.columns if c in columns]), path, writer_id, batch_id)
    return committed_rows(path, writer_id, batch_id) or 0


def append_once(rows: DataFrame, path: Path, writer_id: str, batch_id: int) -> None:
    """Delta records (writer_id, batch_id) in the commit and skips a batch it has already seen."""
    retry_on_conflict(
        lambda: (
            rows.write.format("delta")
            .mode("append")
            .option("txnAppId", writer_id)
            .option("txnVersion", batch_id)
            .save(str(path))
        )
    )
