"""Triggered (availableNow) streaming runs whose batch errors surface as themselves."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TypeVar

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, Observation, SparkSession

from quarantine_assets.config.models import DataQualityAction
from quarantine_assets.engine.tables import Warehouse

Report = TypeVar("Report")


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

    spark = stream.sparkSession
    conf = conf or {}
    previous = {key: spark.conf.get(key) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
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
    finally:
        for key, value in previous.items():
            spark.conf.set(key, value)


def _stream_id(spark: SparkSession, query_name: str) -> str:
    return next(query.id for query in spark.streams.active if query.name == query_name)


def observed_metrics(observation: Observation) -> dict | None:
    """The observed aggregates, or None when the observed action never ran.

    Delta skips an idempotent append it has already committed without running its query, and
    `Observation.get` would then wait forever; its future says whether anything arrived.
    """
    if not observation._jo.future().isCompleted():
        return None
    return observation.get


def writer_id(action: DataQualityAction, stream_name: str, stream_id: str) -> str:
    """The Delta transaction id of one action's stream: appends are idempotent on (writer id, batch id).
    Keyed like the stream's checkpoint (by the action's key, not its owner), so that an action moved to
    another pipeline or code location, or handed over by `transfer-claim`, replays under the same id."""
    return f"quarantine_assets/{action.key}/{stream_name}/{stream_id}"


def run_action_stream(
    stream: DataFrame,
    action: DataQualityAction,
    warehouse: Warehouse,
    stream_name: str,
    process_batch: Callable[[DataFrame, int, str], Report],
    total: Report,
    conf: dict[str, str] | None = None,
) -> Report:
    """Every micro-batch new since the action's `stream_name` checkpoint, through
    `process_batch(batch, batch_id, stream_id)`; the batches' reports are added up into `total`."""

    def on_batch(batch: DataFrame, batch_id: int, stream_id: str) -> None:
        add_counts(total, process_batch(batch, batch_id, stream_id))

    run_available_now(
        stream, on_batch, warehouse.checkpoint(action.key, stream_name), f"{action.key}_{stream_name}", conf
    )
    return total


def add_counts(total, part) -> None:
    """Add one batch's report into the run's total, field by field (ints and Counters)."""
    for field in dataclasses.fields(total):
        setattr(total, field.name, getattr(total, field.name) + getattr(part, field.name))
