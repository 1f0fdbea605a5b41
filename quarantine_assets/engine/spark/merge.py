"""Every MERGE into a DLQ table and every UPDATE and DELETE of one, as Delta SQL: one path, which runs the same
on a Spark Connect server (Delta's Python API needs a plugin there). A MERGE's or an UPDATE's target is `dlq`,
the DataFrame merged in is `new`."""

from __future__ import annotations

from pyspark.sql import DataFrame, Row, SparkSession

from quarantine_assets.engine.lake.tables import table_reference
from quarantine_assets.engine.spark.commits import retry_on_conflict


def when_matched_update(condition: str, assignments: dict[str, str]) -> str:
    """A clause of `merge_into`: where a matched row meets `condition`, set each column to its SQL value."""
    return f"WHEN MATCHED AND ({condition}) THEN UPDATE SET {_set(assignments)}"


def _set(assignments: dict[str, str]) -> str:
    return ", ".join(f"{column} = {value}" for column, value in assignments.items())


def merge_into(path: str, new: DataFrame, on: str, clauses: list[str]) -> Row:
    """MERGE `new` into the table at `path`, retried on commit conflicts; returns Delta's metrics row
    (`num_affected_rows`, `num_updated_rows`, ...). Run in `new`'s own session: a micro-batch's rows
    live in the session of their batch, where `new` is registered as a view."""
    statement = f"MERGE INTO {table_reference(path)} AS dlq USING {{new}} AS new ON {on} " + " ".join(clauses)
    return retry_on_conflict(lambda: new.sparkSession.sql(statement, new=new).first())


def update_where(spark: SparkSession, path: str, assignments: dict[str, str], condition: str) -> Row:
    """UPDATE the rows of the table at `path` that meet `condition` (SQL text), each column to its SQL value,
    retried on commit conflicts; returns Delta's metrics row. Where the rows are known by their values, it
    spares Delta a MERGE's source to materialize and join."""
    statement = f"UPDATE {table_reference(path)} AS dlq SET {_set(assignments)} WHERE {condition}"
    return retry_on_conflict(lambda: spark.sql(statement).first())


def delete_where(spark: SparkSession, path: str, condition: str) -> Row:
    """DELETE the rows of the table at `path` that meet `condition` (SQL text), retried on commit conflicts;
    returns Delta's metrics row (`num_affected_rows`)."""
    return retry_on_conflict(lambda: spark.sql(f"DELETE FROM {table_reference(path)} WHERE {condition}").first())
