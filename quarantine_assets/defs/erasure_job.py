"""Erasure by subject as a Dagster job, for people who live in the UI; `quarantine-assets forget` does the same."""

from dagster import AssetObservation, Config, JobDefinition, MetadataValue, OpExecutionContext, job, op

from quarantine_assets.config.models import DataQualityAction
from quarantine_assets.defs.keys import INBOX, asset_key
from quarantine_assets.defs.resources import SparkResource, WarehouseResource
from quarantine_assets.engine.spark.erasure import forget_subject
from quarantine_assets.engine.spark.operator import action_for_source

FORGET_JOB = "dlq_forget"


class ForgetConfig(Config):
    """Erase the rows of `source_table` whose payload meets `where` (Spark SQL over the payload's fields), whatever
    their status, from the inbox, the outbox and their files; `dry_run` counts them and writes nothing. Files a
    stream has yet to read are pending: once the recycle has run, the same run again removes them."""

    source_table: str
    where: str
    dry_run: bool = False
    by: str = "dagster-ui"


def file_removal_metadata(removed: int, pending: dict[str, int]) -> dict:
    return {"files_removed": removed, "files_pending_by_stream": MetadataValue.json(pending)}


def forget_job(actions: list[DataQualityAction]) -> JobDefinition:
    @op(name="forget_subject")
    def forget(context: OpExecutionContext, config: ForgetConfig, spark: SparkResource, warehouse: WarehouseResource):
        action = action_for_source(actions, config.source_table)
        session = spark.spark_session(warehouse.warehouse)
        erasure = forget_subject(
            session, warehouse.warehouse, action, config.where, dry_run=config.dry_run, by=config.by
        )
        metadata = {
            "inbox_rows_erased_by_status": MetadataValue.json(erasure.inbox_rows_by_status),
            "outbox_rows_erased": erasure.outbox_rows,
            "dry_run": erasure.dry_run,
        } | file_removal_metadata(erasure.files_removed, erasure.files_pending)
        # The condition is not recorded: it names the subject.
        context.log_event(AssetObservation(asset_key=asset_key(action, INBOX), metadata=metadata))
        for stream, count in erasure.files_pending.items():
            context.log.warning(f"{count} file(s) wait for the stream {stream}: run it, then run this job again")

    @job(name=FORGET_JOB, description="Erase a subject's rows from a source's DLQ and from the tables' files.")
    def dlq_forget():
        forget()

    return dlq_forget
