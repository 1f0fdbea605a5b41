"""Triggered (availableNow) streaming runs whose batch reports and coded errors come back to the caller.

Attached to a Spark Connect server, `foreachBatch` runs in a Python worker of the server: nothing it
sets on the caller's objects comes back, and its error reaches the caller as Spark's text. So each batch
writes its report (or its coded error) beside the stream's checkpoint, and the caller reads them from the
warehouse once the run ends; embedded, the same path runs in this process.
"""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

from quarantine_assets import errors
from quarantine_assets.config.models import DataQualityAction
from quarantine_assets.engine.lake.dlq_columns import DlqColumns
from quarantine_assets.engine.lake.tables import Warehouse, checkpoint_folder, is_url
from quarantine_assets.errors import ConfigError, Problem, QuarantineError

Report = TypeVar("Report")


@dataclass(frozen=True)
class StageRun:
    """What every batch of one run of a stage shares: where it runs, for which action, as which run, and the
    columns the DLQ's tables have, as the run's checks found them (None in dqe mode, which keeps no DLQ)."""

    spark: SparkSession
    action: DataQualityAction
    warehouse: Warehouse
    run_id: str
    columns: DlqColumns | None = None


@dataclass(frozen=True)
class BatchCommit:
    """A micro-batch as its commits name it: Delta skips an append whose (`writer`, `batch_id`) a table holds."""

    stream_id: str
    batch_id: int
    writer: str

    @classmethod
    def of(cls, action: DataQualityAction, stream_name: str, stream_id: str, batch_id: int) -> BatchCommit:
        return cls(stream_id, batch_id, writer_id(action, stream_name, stream_id))


def run_available_now(
    stream: DataFrame,
    on_batch: Callable[[DataFrame, int, str], None],
    checkpoint: str,
    query_name: str,
    conf: dict[str, str] | None = None,
) -> None:
    """Run `on_batch(batch, batch_id, stream_id)` over everything new since the checkpoint, then stop.

    `stream_id` is the query id stored in the checkpoint: writers key their idempotent appends on
    it, so a new checkpoint never has its batches skipped as ones an old checkpoint already wrote.
    Spark wraps errors raised inside foreachBatch in a StreamingQueryException; we re-raise
    the original so that coded errors keep their code. `conf` holds for the whole run: a source plans
    each batch's scan with the session it was read with, when the batch comes.
    """
    raised: list[BaseException] = []

    def guarded(batch: DataFrame, batch_id: int) -> None:
        try:
            on_batch(batch, batch_id, _stream_id(stream.sparkSession, query_name))
        except BaseException as error:
            raised.append(error)
            raise

    try:
        with session_conf(stream.sparkSession, conf or {}):
            query = (
                stream.writeStream.queryName(query_name)
                .foreachBatch(guarded)
                .option("checkpointLocation", str(checkpoint))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
    except StreamingQueryException:
        if raised:
            raise raised[0] from None
        raise


@contextmanager
def session_conf(spark: SparkSession, conf: dict[str, str]) -> Iterator[None]:
    """The session's settings, with `conf`, for the block; as they were after it."""
    previous = {key: spark.conf.get(key) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in previous.items():
            spark.conf.set(key, value)


def _stream_id(spark: SparkSession, query_name: str) -> str:
    return next(query.id for query in spark.streams.active if query.name == query_name)


def writer_id(action: DataQualityAction, stream_name: str, stream_id: str) -> str:
    """The Delta transaction id of one action's stream: appends are idempotent on (writer id, batch id).
    Keyed like the stream's checkpoint (by the action's key, not its owner), so that an action moved to
    another pipeline or code location, or handed over by `transfer-claim`, replays under the same id."""
    return f"quarantine_assets/{action.key}/{stream_name}/{stream_id}"


def run_action_stream(
    run: StageRun,
    stream: DataFrame,
    stream_name: str,
    process_batch: Callable[[DataFrame, BatchCommit], Report],
    total: Report,
    conf: dict[str, str] | None = None,
) -> Report:
    """Every micro-batch new since the action's `stream_name` checkpoint, through `process_batch(batch, commit)`;
    the batches' reports are added up into `total`."""
    action, warehouse = run.action, run.warehouse

    reports = f"{checkpoint_folder(action.key, stream_name)}/reports/{uuid.uuid4().hex}"

    def on_batch(batch: DataFrame, batch_id: int, stream_id: str) -> None:
        try:
            report = process_batch(batch, BatchCommit.of(action, stream_name, stream_id, batch_id))
        except QuarantineError as error:
            _write_json(batch.sparkSession, warehouse, f"{reports}/{_ERROR}", _error_record(error))
            raise
        _write_json(batch.sparkSession, warehouse, f"{reports}/{batch_id}", _report_record(report))

    try:
        run_available_now(
            stream, on_batch, warehouse.checkpoint(action.key, stream_name), f"{action.key}_{stream_name}", conf
        )
    except StreamingQueryException:
        recorded = warehouse.read_texts(f"{reports}/{_ERROR}")
        if recorded:
            raise _error_from(json.loads(recorded[0])) from None
        raise
    else:
        for batch in warehouse.subfolders(reports):
            for text in warehouse.read_texts(f"{reports}/{batch}"):
                add_counts(total, _report_from(total, json.loads(text)))
    finally:
        warehouse.remove_dir(reports)
    return total


_ERROR = "error"


def _write_json(spark: SparkSession, warehouse: Warehouse, relative_path: str, record: dict) -> None:
    """One JSON line in a folder of its own, rewritten whole when a replayed batch reports again.

    A local warehouse takes it as a file from this process (attached, the server's worker: on the host whose
    Spark writes the tables), without a Spark job per batch; an object store takes it through Spark, since
    delta-rs's Python file system cannot write.
    """
    text = json.dumps(record)
    if is_url(warehouse.root):
        location = f"{warehouse.root}/{relative_path}"
        spark.createDataFrame([(text,)], "value STRING").coalesce(1).write.mode("overwrite").text(location)
        return
    folder = Path(warehouse.root, relative_path)
    folder.mkdir(parents=True, exist_ok=True)
    staged = folder / f".{uuid.uuid4().hex}.tmp"  # renamed into place: a reader never sees half of it
    staged.write_text(text, encoding="utf-8")
    os.replace(staged, folder / "report.json")


def _report_record(report) -> dict:
    """A batch's report as JSON can hold it: a Counter as its pairs, since its keys may be tuples."""
    return {
        field.name: list(value.items()) if isinstance(value := getattr(report, field.name), Counter) else value
        for field in dataclasses.fields(report)
    }


def _report_from(total, record: dict):
    """A batch's report, typed as `total`: its counters as Counters again, keyed as they were."""
    return type(total)(
        **{
            name: Counter({tuple(key) if isinstance(key, list) else key: count for key, count in value})
            if isinstance(getattr(total, name), Counter)
            else value
            for name, value in record.items()
        }
    )


def _error_record(error: QuarantineError) -> dict:
    problems = error.problems if isinstance(error, ConfigError) else [error.problem]
    return {
        "class": type(error).__name__,
        "problems": [
            dataclasses.asdict(problem) | {"file": problem.file and str(problem.file)} for problem in problems
        ],
    }


def _error_from(record: dict) -> QuarantineError:
    """The coded error a batch raised, as itself: its class, code, message and place."""
    problems = [
        Problem(**(problem | {"file": problem["file"] and Path(problem["file"])})) for problem in record["problems"]
    ]
    kind = getattr(errors, record["class"], QuarantineError)
    if issubclass(kind, ConfigError):
        return kind(problems)
    first = problems[0]
    return kind(first.code, first.message, file=first.file, field=first.field)


def add_counts(total, part) -> None:
    """Add one batch's report into the run's total, field by field (ints and Counters)."""
    for field in dataclasses.fields(total):
        setattr(total, field.name, getattr(total, field.name) + getattr(part, field.name))
