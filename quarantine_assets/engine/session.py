"""The Spark configuration every entry point shares: local by default, Delta always on."""

from __future__ import annotations

import os

from pyspark.sql import SparkSession

# Delta publishes one artifact per Spark minor version; this one matches pyspark 4.2.
DELTA_PACKAGE = "io.delta:delta-spark_4.2_2.13:4.4.0"
DEFAULT_MASTER = "local[*]"


def spark_master() -> str:
    return os.environ.get("QUARANTINE_SPARK_MASTER", DEFAULT_MASTER)


# On one machine, Spark's and Delta's cluster-sized defaults (200 shuffle partitions, 50 partitions
# to rebuild a table snapshot) turn every small MERGE into hundreds of tasks.
LOCAL_TUNING = {
    "spark.sql.shuffle.partitions": "4",
    "spark.databricks.delta.snapshotPartitions": "2",
}


def spark_config(master: str | None = None) -> dict[str, str]:
    """Delta's jars resolve from Maven Central on first use; Ivy serves them from its cache afterwards."""
    master = master or spark_master()
    tuning = LOCAL_TUNING if master.startswith("local") else {}
    return tuning | {
        "spark.master": master,
        "spark.app.name": "quarantine_assets",
        "spark.jars.packages": DELTA_PACKAGE,
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
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
