"""The validated table: the columns a DLQ payload must fit, on the way back and under an operator's fix."""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.types import ArrayType, DataType, MapType, StructType

from quarantine_assets import codes
from quarantine_assets.config.models import DataQualityAction
from quarantine_assets.engine.lake.tables import Warehouse, table_reference
from quarantine_assets.engine.spark.commits import retry_on_conflict
from quarantine_assets.engine.spark.operational_metadata import table_column_names
from quarantine_assets.errors import MissingTableError

REFUSED_WITHOUT_COLUMN_MAPPING = set(" ,;{}()\n\t=")
COLUMN_MAPPING = {
    "delta.columnMapping.mode": "name",
    "delta.minReaderVersion": "2",
    "delta.minWriterVersion": "5",
}


def validated_schema(spark: SparkSession, warehouse: Warehouse, action: DataQualityAction) -> StructType:
    path = warehouse.path(action.target_table)
    if not warehouse.is_delta_table(action.target_table):
        raise MissingTableError(
            codes.VALIDATED_TABLE_MISSING,
            f"validated table {action.target_table} does not exist yet (expected at {path}); "
            "materialize the split first",
            file=action.config_file,
        )
    return spark.read.format("delta").load(path).schema


def payload_schema(spark: SparkSession, warehouse: Warehouse, action: DataQualityAction) -> StructType:
    """The validated table's columns that a DLQ payload holds: all but those of the target's own operational
    metadata, which are evaluated when a row lands."""
    table_metadata = table_column_names(action.operational_metadata)
    schema = validated_schema(spark, warehouse, action)
    return StructType([column for column in schema if column.name not in table_metadata])


def added_columns(
    spark: SparkSession, warehouse: Warehouse, action: DataQualityAction, schema: StructType
) -> list[str]:
    """Columns of `schema` the validated table does not have yet: a source that gained columns."""
    if not warehouse.is_delta_table(action.target_table):
        return []
    existing = {name.lower() for name in spark.read.format("delta").load(warehouse.path(action.target_table)).columns}
    return [name for name in schema.fieldNames() if name.lower() not in existing]


def needs_column_mapping(data_type: DataType) -> bool:
    """Whether a column or nested field name holds a character plain Delta refuses."""
    if isinstance(data_type, StructType):
        return any(
            set(field.name) & REFUSED_WITHOUT_COLUMN_MAPPING or needs_column_mapping(field.dataType)
            for field in data_type
        )
    if isinstance(data_type, ArrayType):
        return needs_column_mapping(data_type.elementType)
    if isinstance(data_type, MapType):
        return needs_column_mapping(data_type.keyType) or needs_column_mapping(data_type.valueType)
    return False


def create_validated_table(
    spark: SparkSession, warehouse: Warehouse, action: DataQualityAction, schema: StructType
) -> None:
    """Created before the first append, with column mapping, when a column name needs it (spaces, commas,
    braces...). Other tables are created by their first append: one commit less."""
    if not needs_column_mapping(schema) or warehouse.is_delta_table(action.target_table):
        return
    properties = ", ".join(f"'{key}' = '{value}'" for key, value in COLUMN_MAPPING.items())
    statement = (
        f"CREATE TABLE IF NOT EXISTS {table_reference(warehouse.path(action.target_table))} USING DELTA "
        f"TBLPROPERTIES ({properties}) AS SELECT * FROM {{no_rows}}"
    )
    no_rows = spark.createDataFrame([], schema)
    retry_on_conflict(lambda: spark.sql(statement, no_rows=no_rows).collect())
