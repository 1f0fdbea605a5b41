"""The validated table: the columns a DLQ payload must fit, on the way back and under an operator's fix."""

from __future__ import annotations

from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from quarantine_assets import codes
from quarantine_assets.config.models import DataQualityAction
from quarantine_assets.engine.tables import Warehouse
from quarantine_assets.errors import MissingTableError


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
