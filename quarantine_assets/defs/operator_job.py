"""Operator tools as Dagster jobs, for people who live in the UI; the CLI does the same."""

import dataclasses
import json
from typing import Optional

from dagster import Config, JobDefinition, OpExecutionContext, job, op

from quarantine_assets import codes
from quarantine_assets.config.models import DataQualityAction
from quarantine_assets.defs.resources import SparkResource, WarehouseResource
from quarantine_assets.engine.spark.bulk_fix import DryRun, FieldChanges, FixCommand, apply_fix, field_expressions
from quarantine_assets.engine.spark.operator import action_for_source, discard_rows, parse_json_object
from quarantine_assets.errors import OperatorError

OPERATOR_JOB = "dlq_operator"


class DlqCommand(Config):
    """Fix rows (set_fields or payload, as JSON objects; set_expressions, `field = <Spark SQL>`), discard them
    (discard_reason), or redrive them (send quarantined rows back as they are, to be judged by the rules configured
    now). Rows are named by keys, or, for a fix or a redrive, selected by `where` (Spark SQL over the payload's
    fields and the _dlq_ columns), the `limit` oldest of them; `dry_run` counts what would land and writes nothing."""

    source_table: str
    keys: list[str] = []
    where: Optional[str] = None
    set_fields: Optional[str] = None
    set_expressions: list[str] = []
    payload: Optional[str] = None
    limit: Optional[int] = None
    dry_run: bool = False
    redrive: bool = False
    discard_reason: Optional[str] = None
    by: str = "dagster-ui"


def operator_job(actions: list[DataQualityAction]) -> JobDefinition:
    @op(name="apply_dlq_command")
    def apply(context: OpExecutionContext, config: DlqCommand, spark: SparkResource, warehouse: WarehouseResource):
        action = action_for_source(actions, config.source_table)
        tables = warehouse.warehouse
        session = spark.spark_session(tables)
        set_fields = parse_json_object(config.set_fields, "set_fields") if config.set_fields else {}
        if config.discard_reason is not None:
            if config.where is not None or config.redrive or set_fields or config.set_expressions or config.payload:
                raise OperatorError(codes.FIX_NEEDS_ONE_SELECTION, "a discard names rows by key and changes no field")
            result = discard_rows(session, tables, action, config.keys, reason=config.discard_reason, by=config.by)
        else:
            command = FixCommand(
                keys=tuple(config.keys),
                where=config.where,
                changes=FieldChanges(field_expressions(config.set_expressions), set_fields),
                payload=parse_json_object(config.payload, "payload") if config.payload else None,
                limit=config.limit,
                dry_run=config.dry_run,
                redrive=config.redrive,
            )
            result = apply_fix(session, tables, action, command, by=config.by)
            if isinstance(result, DryRun):
                context.log.info(f"dry run, nothing written: {json.dumps(dataclasses.asdict(result))}")
                return
        for warning in result.warnings:
            context.log.warning(warning)
        context.log.info(f"{result.rows_changed} row(s) of {config.source_table} updated")

    @job(name=OPERATOR_JOB, description="Fix, discard or redrive DLQ rows, scoped to one source table.")
    def dlq_operator():
        apply()

    return dlq_operator
