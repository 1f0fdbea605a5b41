"""A project in the reference's documented shapes, from YAML to reconciled Delta tables.

`tests/conformance/` holds two flowgroups sharing one DLQ: a cloudfiles CSV load read with Auto Loader
options, a Delta load named the legacy way, both expectation shapes, warn and fail rules coerced to drop,
`${token}`, `{token}`, `%{variable}`, a secrets block, write targets as catalog/schema/table and as
database/table, operational metadata, and keys this project does not use.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

from dagster import DagsterInstance
from pyspark.sql import functions as F
from reference_ddl import create_reference_tables

from quarantine_assets.config.loader import load_project
from quarantine_assets.defs.definitions import RECYCLE_JOB, SPLIT_JOB, build_definitions
from quarantine_assets.defs.resources import default_resources
from quarantine_assets.engine.lake.tables import Warehouse
from quarantine_assets.engine.spark.operator import fix_rows
from quarantine_assets.engine.spark.source import PINNED_SCHEMA

CONFORMANCE = Path(__file__).parents[1] / "conformance"
ORDERS = [
    ("1", "10.5", "EUR"),
    ("", "3.0", "USD"),  # NULL order_id
    ("3", "-1.0", "EUR"),  # a fail rule, coerced to drop
    ("4", "2.0", "GBP"),  # a warn rule, coerced to drop
    ("5", "7.25", "USD"),
]
CUSTOMERS = [("c1", "a@example.com", "DE"), ("c2", "no-at-sign", "FR"), ("c3", "c@example.com", None)]


def test_a_reference_project_loads_with_every_unused_key_named(tmp_path):
    project = load_project(CONFORMANCE, "dev", tmp_path)
    warned = {(problem.code, problem.field) for problem in project.warnings}

    assert {action.key for action in project.actions} == {"dq_orders", "dq_customers"}
    assert ("QA-CFG-027", "event_log") in warned
    assert ("QA-CFG-027", "job_name") in warned
    assert ("QA-CFG-027", "prefix_suffix_rules") in warned
    assert ("QA-CFG-027", "actions[2].write_target.table_properties") in warned
    assert ("QA-CFG-026", "actions[0].source.options.cloudFiles.useNotifications") in warned
    assert sum(code == "QA-CFG-019" for code, _ in warned) == 3  # warn and fail rules act as drop
    orders = project.action("dq_orders")
    assert orders.source.format == "csv" and orders.source.options["header"] == "true"
    assert orders.source.schema_hints == "`amount` DOUBLE, `order_id` INT" and orders.source.infer_column_types
    assert orders.target_table == "conf.bronze.orders"
    assert project.action("dq_customers").source.table == "conf.raw.customers"
    assert project.action("dq_customers").target_table == "conf.bronze.customers"
    assert [column.name for column in orders.operational_metadata] == [
        "_processing_timestamp",
        "_pipeline",
        "_source_file_path",
    ]


def test_a_reference_project_runs_end_to_end_and_reconciles(spark, tmp_path):
    root = tmp_path / "warehouse"
    project = load_project(CONFORMANCE, "dev", root)
    tables = Warehouse(root)
    create_reference_tables(spark, tables, "conf.ops.dlq")
    landing = root / "_landing" / "orders"
    landing.mkdir(parents=True)
    (landing / "orders-1.csv").write_text("order_id,amount,currency\n" + "\n".join(",".join(r) for r in ORDERS) + "\n")
    customers = spark.createDataFrame(CUSTOMERS, "customer_id STRING, email STRING, country STRING")
    customers.write.format("delta").save(str(tables.path("conf.raw.customers")))
    defs = build_definitions(project, default_resources(root))
    instance = DagsterInstance.ephemeral()

    assert defs.resolve_job_def(SPLIT_JOB).execute_in_process(instance=instance).success

    orders = spark.read.format("delta").load(str(tables.path("conf.bronze.orders")))
    assert sorted((r["order_id"], r["amount"], r["currency"]) for r in orders.collect()) == [
        (1, 10.5, "EUR"),
        (5, 7.25, "USD"),
    ]
    row = orders.first()
    assert row["_source_file_path"].endswith("orders-1.csv") and row["_pipeline"] == "sales"
    assert row["_processing_timestamp"] is not None
    assert (root / "_landing" / "_schemas" / "orders" / PINNED_SCHEMA).is_file()  # the inferred schema, pinned
    inbox = spark.read.format("delta").load(str(tables.path("conf.ops.dlq")))
    quarantined = Counter(
        (r["_dlq_source_table"], r["id"])
        for r in inbox.select(
            "_dlq_source_table",
            F.coalesce(
                F.variant_get("_row_data", "$.order_id", "string"),
                F.variant_get("_row_data", "$.customer_id", "string"),
            ).alias("id"),
        ).collect()
    )
    assert quarantined == Counter(
        {
            ("conf.bronze.orders", None): 1,
            ("conf.bronze.orders", "3"): 1,
            ("conf.bronze.orders", "4"): 1,
            ("conf.bronze.customers", "c2"): 1,
            ("conf.bronze.customers", "c3"): 1,
        }
    )
    validated_customers = spark.read.format("delta").load(str(tables.path("conf.bronze.customers")))
    assert [r["customer_id"] for r in validated_customers.collect()] == ["c1"]

    key = inbox.where(F.variant_get("_row_data", "$.order_id", "int") == 3).first()["_dlq_sk"]
    fix_rows(spark, tables, project.action("dq_orders"), [key], set_fields={"amount": 1.0}, by="test")
    assert defs.resolve_job_def(RECYCLE_JOB).execute_in_process(instance=instance).success
    landed = spark.read.format("delta").load(str(tables.path("conf.bronze.orders"))).where("order_id = 3").first()
    assert (landed["amount"], landed["_pipeline"]) == (1.0, "sales")
    assert landed["_processing_timestamp"] is not None and landed["_source_file_path"].endswith("orders-1.csv")
    shutil.rmtree(root)
