"""Operator tools as Dagster jobs, for people who live in the UI; the CLI does the same."""

from typing import Optional

from dagster import Config, JobDefinition, OpExecutionContext, job, op

from quarantine_assets.config.models import DataQualityAction
from quarantine_assets.defs.resources import SparkResource, WarehouseResource
from quarantine_assets.engine.operator import action_for_source, discard_rows, fix_rows, parse_json_object

OPERATOR_JOB = "dlq_operator"


class DlqCommand(Config):
    """Fix rows (set_fields or payload, as JSON objects) or discard them (discard_reason)."""

    source_table: str
    keys: list[str]
    set_fields: Optional[str] = None
    payload: Optional[str] = None
    discard_reason: Optional[str] = None
    by: str = "dagster-ui"


def operator_job(actions: list[DataQualityAction]) -> JobDefinition:
    @op(name="apply_dlq_command")
    def apply(context: OpExecutionContext, config: DlqCommand, spark: SparkResource, warehouse: WarehouseResource):
        action = action_for_source(actions, config.source_table)
        tables = warehouse.warehouse
        session = spark.spark_session(tables)
        if config.discard_reason is not None:
            result = discard_rows(session, tables, action, config.keys, reason=config.discard_reason, by=config.by)
        else:
            result = fix_rows(
                session,
                tables,
                action,
                config.keys,
                set_fields=parse_json_object(config.set_fields, "set_fields") if config.set_fields else None,
                payload=parse_json_object(config.payload, "payload") if config.payload else None,
                by=config.by,
            )
        for warning in result.warnings:
            context.log.warning(warning)
        context.log.info(f"{result.rows_changed} row(s) of {config.source_table} updated")

    @job(name=OPERATOR_JOB, description="Fix or discard DLQ rows, scoped to one source table.")
    def dlq_operator():
        apply()

    return dlq_operator
