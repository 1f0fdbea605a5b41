"""The Spark configuration every entry point shares: local by default, Delta always on."""

from __future__ import annotations

import os

from pyspark.sql import SparkSession

# Delta publishes one artifact per Spark minor version; this one matches pyspark 4.2.
DELTA_PACKAGE = "io.delta:delta-spark_4.2_2.13:4.4.0"
DEFAULT_MASTER = "local[*]"


def spark_master() -> str:
    return os.environ.get("QUARANTINE_SPARK_MASTER", DEFAULT_MASTER)


def spark_config(master: str | None = None) -> dict[str, str]:
    """Delta's jars resolve from Maven Central on first use; Ivy serves them from its cache afterwards."""
    return {
        "spark.master": master or spark_master(),
        "spark.app.name": "quarantine_assets",
        "spark.jars.packages": DELTA_PACKAGE,
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        # Small local batches: the default 200 shuffle partitions would dominate run time.
        "spark.sql.shuffle.partitions": os.environ.get("QUARANTINE_SHUFFLE_PARTITIONS", "4"),
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": os.environ.get("QUARANTINE_DRIVER_MEMORY", "2g"),
    }


def build_spark_session(master: str | None = None) -> SparkSession:
    builder = SparkSession.builder
    for key, value in spark_config(master).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
