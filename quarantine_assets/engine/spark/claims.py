"""One owner per DLQ slice, claimed in the DLQ itself before anything of the slice is written.

The claims live in `<dlq_table>_claims`, one row per `source_table`. A claim is an insert-only MERGE:
Delta runs it at Serializable isolation, so of two writers racing to claim one slice, the second
commit conflicts, retries, finds the first one's row and is refused. Every writer (split, outbox,
recycled, operator) verifies its claim first, across code locations and deployments alike.
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from quarantine_assets import codes
from quarantine_assets.commands import RELEASE_COMMAND, TRANSFER_COMMAND
from quarantine_assets.config.models import DataQualityAction, claims_table
from quarantine_assets.engine.lake.claims import Claim, claims
from quarantine_assets.engine.lake.dlq_columns import DlqColumns
from quarantine_assets.engine.lake.dlq_schema import CLAIMED_AT, CLAIMED_BY, OWNER, SOURCE_TABLE
from quarantine_assets.engine.lake.table_health import require_healthy_dlq
from quarantine_assets.engine.lake.tables import Warehouse, claims_ddl
from quarantine_assets.engine.spark.commits import retry_on_conflict
from quarantine_assets.engine.spark.merge import merge_into
from quarantine_assets.errors import OwnershipError


def before_writing(spark: SparkSession, warehouse: Warehouse, action: DataQualityAction, by: str) -> DlqColumns:
    """What every writer of a slice does first: DLQ tables that keep every row, and its claim on the slice.

    Returns the columns the tables have, for writers to adapt to.
    """
    columns = require_healthy_dlq(warehouse, action)
    claim_slice(spark, warehouse, action, by)
    return columns


def claim_slice(spark: SparkSession, warehouse: Warehouse, action: DataQualityAction, by: str) -> Claim:
    """The action's claim on its slice: verified, or made when nobody has one. Refused when another owns it."""
    inbox_table, source_table = action.quarantine.inbox_table, action.quarantine.source_table
    claim = claims(warehouse, inbox_table).get(source_table)
    if claim is None:
        _write_claim(spark, warehouse, inbox_table, Claim(source_table, action.owner, by), replace=False)
        claim = claims(warehouse, inbox_table)[source_table]
    if claim.owner != action.owner:
        raise OwnershipError(
            codes.SLICE_OWNED_ELSEWHERE,
            f"{source_table} in {inbox_table} belongs to {claim.owner}, not to {action.owner}: nothing was written. "
            f"If {action.owner} should own it, release it with `{RELEASE_COMMAND} {source_table}` or hand it "
            f"over with `{TRANSFER_COMMAND} {source_table} --to {action.owner}`",
            file=action.config_file,
            field="quarantine.source_table",
        )
    return claim


def release_claim(spark: SparkSession, warehouse: Warehouse, inbox_table: str, source_table: str) -> bool:
    """Nobody owns the slice afterwards; the next writer of it claims it. False when it was not claimed."""
    if source_table not in claims(warehouse, inbox_table):
        return False
    target = warehouse.path(claims_table(inbox_table))
    # Delta's DELETE takes no SQL parameters; a MERGE with the name as data keeps it out of the SQL text.
    released = spark.createDataFrame([(source_table,)], f"{SOURCE_TABLE} STRING")
    merge_into(target, released, f"dlq.{SOURCE_TABLE} = new.{SOURCE_TABLE}", ["WHEN MATCHED THEN DELETE"])
    return True


def transfer_claim(
    spark: SparkSession, warehouse: Warehouse, inbox_table: str, source_table: str, owner: str, by: str
) -> None:
    """Hand the slice to `owner` (pipeline/flowgroup/action), claimed or not."""
    _write_claim(spark, warehouse, inbox_table, Claim(source_table, owner, by), replace=True)


def _write_claim(spark: SparkSession, warehouse: Warehouse, inbox_table: str, claim: Claim, replace: bool) -> None:
    """One MERGE on the slice's row: inserted when nobody claims it, and replaced only for a transfer."""
    retry_on_conflict(lambda: spark.sql(claims_ddl(warehouse, inbox_table)))
    row = spark.createDataFrame(
        [(claim.source_table, claim.owner, claim.claimed_by)],
        f"{SOURCE_TABLE} STRING, {OWNER} STRING, {CLAIMED_BY} STRING",
    ).withColumn(CLAIMED_AT, F.current_timestamp())
    target = warehouse.path(claims_table(inbox_table))
    when_matched = ["WHEN MATCHED THEN UPDATE SET *"] if replace else []
    merge_into(
        target, row, f"dlq.{SOURCE_TABLE} = new.{SOURCE_TABLE}", [*when_matched, "WHEN NOT MATCHED THEN INSERT *"]
    )
