"""`redrive-file` as a Dagster job, for people who live in the UI: a source file set aside whole, once fixed or
replaced under the same name, read again through the split."""

from dagster import AssetObservation, Config, JobDefinition, OpExecutionContext, job, op

from quarantine_assets.config.models import DataQualityAction
from quarantine_assets.defs.keys import INBOX, asset_key
from quarantine_assets.defs.resources import SparkResource, WarehouseResource
from quarantine_assets.engine.spark.file_redrive import redrive_file
from quarantine_assets.engine.spark.operator import action_for_source

REDRIVE_FILE_JOB = "dlq_redrive_file"


class RedriveFileConfig(Config):
    """`path`: the file as `quarantine-assets files` lists it, or as a local path; `by`: who redrives it."""

    path: str
    by: str = "dagster-ui"


def redrive_file_job(actions: list[DataQualityAction]) -> JobDefinition:
    @op(name="redrive_file")
    def redrive(
        context: OpExecutionContext, config: RedriveFileConfig, spark: SparkResource, warehouse: WarehouseResource
    ):
        session = spark.spark_session(warehouse.warehouse)
        for redriven in redrive_file(session, actions, warehouse.warehouse, config.path, config.by):
            action = action_for_source(actions, redriven.source_table)
            metadata = {
                "file": redriven.file,
                "rows_validated": redriven.rows_validated,
                "rows_quarantined": redriven.rows_quarantined,
            }
            context.log_event(AssetObservation(asset_key=asset_key(action, INBOX), metadata=metadata))

    @job(name=REDRIVE_FILE_JOB, description="Read a source file that was set aside whole again, once fixed.")
    def dlq_redrive_file():
        redrive()

    return dlq_redrive_file
