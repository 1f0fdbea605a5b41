"""Created DLQ tables read back with the reference's properties, features and schema."""

from __future__ import annotations

from quarantine_assets.engine.spark.dlq_tables import create_dlq_tables


def table_detail(spark, path):
    return spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()


def test_inbox_has_cdf_row_tracking_deletion_vectors_and_clustering(spark, warehouse):
    create_dlq_tables(spark, warehouse, "demo.ops.dlq")
    detail = table_detail(spark, warehouse.path("demo.ops.dlq"))

    assert detail["clusteringColumns"] == ["_dlq_source_table"]
    assert {
        "delta.enableChangeDataFeed": "true",
        "delta.enableRowTracking": "true",
        "delta.enableDeletionVectors": "true",
    }.items() <= detail["properties"].items()
    assert {"variantType", "rowTracking", "deletionVectors", "changeDataFeed", "clustering"} <= set(
        detail["tableFeatures"]
    )


def test_inbox_schema_matches_the_reference_columns(spark, warehouse):
    create_dlq_tables(spark, warehouse, "demo.ops.dlq")
    schema = spark.read.format("delta").load(str(warehouse.path("demo.ops.dlq"))).schema
    types = {field.name: (field.dataType.simpleString(), field.nullable) for field in schema.fields}

    assert types["_dlq_sk"] == ("string", False)
    assert types["_dlq_source_table"] == ("string", False)
    assert types["_dlq_status"] == ("string", False)
    assert types["_dlq_timestamp"] == ("timestamp", False)
    assert types["_dlq_failed_rules"] == ("array<struct<name:string,rule:string>>", True)
    assert types["_dlq_rescued_data"] == ("string", True)
    assert types["_row_data"] == ("variant", False)


def test_outbox_is_derived_from_the_dlq_name_with_its_reference_shape(spark, warehouse):
    create_dlq_tables(spark, warehouse, "demo.ops.dlq")
    outbox = warehouse.path("demo.ops.dlq_outbox")
    detail = table_detail(spark, outbox)
    schema = spark.read.format("delta").load(str(outbox)).schema
    types = {field.name: (field.dataType.simpleString(), field.nullable) for field in schema.fields}

    assert detail["clusteringColumns"] == ["_dlq_source_table"]
    assert {"delta.enableRowTracking": "true", "delta.enableDeletionVectors": "true"}.items() <= detail[
        "properties"
    ].items()
    assert "delta.enableChangeDataFeed" not in detail["properties"]
    assert types["_dlq_sk"] == ("string", False)
    assert types["_row_data"] == ("variant", False)
    assert types["_dlq_recycled_at"] == ("timestamp", False)


def test_creating_tables_twice_is_harmless(spark, warehouse):
    create_dlq_tables(spark, warehouse, "demo.ops.dlq")
    create_dlq_tables(spark, warehouse, "demo.ops.dlq")
    assert table_detail(spark, warehouse.path("demo.ops.dlq"))["numFiles"] == 0
