"""The validated table: the columns a DLQ payload must fit, on the way back and under an operator's fix."""

from __future__ import annotations

from delta.tables import DeltaTable
from deltalake import DeltaTable as DeltaLakeTable
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from quarantine_assets import codes
from quarantine_assets.config.models import DataQualityAction
from quarantine_assets.engine.commits import retry_on_conflict
from quarantine_assets.engine.tables import Warehouse
from quarantine_assets.errors import MissingTableError

COLUMN_MAPPING = {
    "delta.columnMapping.mode": "name",
    "delta.minReaderVersion": "2",
    "delta.minWriterVersion": "5",
}


def validated_schema(spark: SparkSession, warehouse: Warehouse, action: DataQualityAction) -> StructType:
    path = warehouse.path(action.target_table)
    if not DeltaTable.isDeltaTable(spark, str(path)):
        raise MissingTableError(
            codes.VALIDATED_TABLE_MISSING,
            f"validated table {action.target_table} does not exist yet (expected at {path}); "
            "materialize the split first",
            file=action.config_file,
        )
    return spark.read.format("delta").load(str(path)).schema


def create_validated_table(
    spark: SparkSession, warehouse: Warehouse, action: DataQualityAction, schema: StructType
) -> None:
    """Created before the first append, with column mapping, so that any column name Spark reads
    (spaces, dots, non-ASCII) can be stored: plain Delta refuses some characters in column names."""
    path = warehouse.path(action.target_table)
    if DeltaLakeTable.is_deltatable(str(path)):
        return
    builder = DeltaTable.createIfNotExists(spark).location(str(path)).addColumns(schema)
    for key, value in COLUMN_MAPPING.items():
        builder = builder.property(key, value)
    retry_on_conflict(builder.execute)
