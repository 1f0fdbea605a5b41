"""A test's DLQ tables, copied from the ones `create_dlq_tables` made once in the session for that inbox name: five
CREATE TABLEs cost seconds in a warm JVM, a copy of their logs milliseconds. The tests of table creation call
`create_dlq_tables` itself."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from functools import cache
from pathlib import Path

from pyspark.sql import SparkSession

from quarantine_assets.engine.lake.tables import Warehouse, is_url
from quarantine_assets.engine.spark.dlq_tables import create_dlq_tables, dlq_tables


@cache
def _templates() -> Path:
    root = Path(tempfile.mkdtemp(prefix="dlq-templates-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


@cache
def _template(spark: SparkSession, inbox_table: str) -> Warehouse:
    template = Warehouse(_templates() / inbox_table / "warehouse")
    create_dlq_tables(spark, template, inbox_table)
    return template


def dlq_tables_from_template(spark: SparkSession, warehouse: Warehouse, inbox_table: str) -> None:
    """As `create_dlq_tables`: a table that exists is left as it is. A warehouse named by a URL gets them created."""
    if is_url(warehouse.root):
        create_dlq_tables(spark, warehouse, inbox_table)
        return
    template = _template(spark, inbox_table)
    for table, _ in dlq_tables(inbox_table):
        if not warehouse.is_delta_table(table):
            shutil.copytree(template.path(table), warehouse.path(table))
