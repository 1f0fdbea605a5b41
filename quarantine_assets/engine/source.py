"""Incremental reads of an action's source as a Structured Streaming DataFrame."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from quarantine_assets.config.models import DeltaSource, FileSource
from quarantine_assets.engine.rules import RESCUED_DATA
from quarantine_assets.engine.tables import Warehouse

SOURCE_FILE = "_dlq_source_file"


def read_source_stream(spark: SparkSession, source: FileSource | DeltaSource, warehouse: Warehouse) -> DataFrame:
    if isinstance(source, DeltaSource):
        return spark.readStream.format("delta").options(**source.options).load(str(warehouse.path(source.table)))
    return _read_file_stream(spark, source)


def _read_file_stream(spark: SparkSession, source: FileSource) -> DataFrame:
    """Rows that do not parse keep their raw text in `_rescued_data`, so they reach the DLQ, not the void."""
    reader = spark.readStream.format(source.format).options(**source.options)
    if source.schema_ddl:
        schema = spark.createDataFrame([], source.schema_ddl).schema
        if RESCUED_DATA not in schema.fieldNames() and source.format in ("csv", "json"):
            schema = schema.add(RESCUED_DATA, "string")
            reader = reader.option("columnNameOfCorruptRecord", RESCUED_DATA).option("mode", "PERMISSIVE")
        reader = reader.schema(schema)
    else:
        # Without a declared schema, infer it from the files present when the stream starts.
        reader = reader.option("inferSchema", "true")
        spark.conf.set("spark.sql.streaming.schemaInference", "true")
    rows = reader.load(source.path)
    return rows.select("*", F.col("_metadata.file_path").alias(SOURCE_FILE))
