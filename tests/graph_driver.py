"""Drives one action's graph through Dagster over a temporary warehouse, as an operator would."""

from __future__ import annotations

from builders import ORDERS_SCHEMA, orders_action
from dagster import DagsterInstance, SensorResult, build_sensor_context
from dlq_template import dlq_tables_from_template
from pyspark.sql import functions as F

from quarantine_assets.config.models import Project
from quarantine_assets.defs.definitions import SPLIT_JOB, build_definitions
from quarantine_assets.defs.keys import OUTBOX, RECYCLED, asset_key
from quarantine_assets.defs.resources import HealthThresholds, default_resources
from quarantine_assets.engine.spark.operator import fix_rows


class Loop:
    """One action's graph in Dagster over a temporary warehouse, driven as an operator would."""

    def __init__(
        self,
        spark,
        warehouse,
        tmp_path,
        max_attempts: int = 3,
        retention_days: int | None = None,
        max_reject_ratio: float | None = None,
        thresholds: HealthThresholds | None = None,
        create_tables=dlq_tables_from_template,
    ):
        action = orders_action()
        self.action = action.model_copy(
            update={
                "quarantine": action.quarantine.model_copy(
                    update={
                        "max_attempts": max_attempts,
                        "retention_days": retention_days,
                        "max_reject_ratio": max_reject_ratio,
                    }
                )
            }
        )
        self.spark, self.warehouse = spark, warehouse
        project = Project(config_dir=tmp_path, env="test", actions=(self.action,))
        resources = default_resources(warehouse.root) | ({"thresholds": thresholds} if thresholds else {})
        self.defs = build_definitions(project, resources)
        self.instance = DagsterInstance.ephemeral()
        self.cursor = None
        create_tables(spark, warehouse, self.action.quarantine.inbox_table)

    def ingest(self, rows):
        self.spark.createDataFrame(rows, ORDERS_SCHEMA).write.format("delta").mode("append").save(
            str(self.warehouse.path(self.action.source.table))
        )
        result = self.defs.resolve_job_def(SPLIT_JOB).execute_in_process(instance=self.instance)
        assert result.success
        return result

    def key_of(self, row_no: int) -> str:
        return self.inbox().where(F.variant_get("_row_data", "$.row_no", "int") == row_no).first()["_dlq_sk"]

    def inbox(self):
        return self.spark.read.format("delta").load(str(self.warehouse.path(self.action.quarantine.inbox_table)))

    def inbox_row(self, row_no: int):
        return self.inbox().where(F.variant_get("_row_data", "$.row_no", "int") == row_no).first()

    def validated(self) -> list[tuple]:
        rows = self.spark.read.format("delta").load(str(self.warehouse.path(self.action.target_table)))
        return sorted(tuple(row) for row in rows.collect())

    def fix(self, row_no: int, **fields):
        fix_rows(self.spark, self.warehouse, self.action, [self.key_of(row_no)], set_fields=fields, by="test")

    def tick(self):
        sensor = self.defs.resolve_sensor_def(f"{self.action.key}_recycle_sensor")
        context = build_sensor_context(
            instance=self.instance,
            cursor=self.cursor,
            resources={"warehouse": default_resources(self.warehouse.root)["warehouse"]},
        )
        result = sensor(context)
        if isinstance(result, SensorResult):
            self.cursor = result.cursor or self.cursor
        return result

    def run_recycle(self):
        keys = [asset_key(self.action, OUTBOX), asset_key(self.action, RECYCLED)]
        job = self.defs.resolve_implicit_global_asset_job_def()
        result = job.execute_in_process(instance=self.instance, asset_selection=keys)
        assert result.success
        return result
