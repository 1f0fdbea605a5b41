"""The asset factory: per data-quality action, the split that yields validated and inbox."""


from collections.abc import Iterator

from dagster import AssetExecutionContext, AssetKey, AssetSpec, MaterializeResult, MetadataValue, multi_asset
from dagster_pyspark import LazyPySparkResource

from quarantine_assets.config.models import DataQualityAction
from quarantine_assets.defs.resources import WarehouseResource
from quarantine_assets.engine.split import SplitReport, run_split

VALIDATED = "validated"
INBOX = "inbox"
OUTBOX = "outbox"
RECYCLED = "recycled"


def asset_key(action: DataQualityAction, role: str) -> AssetKey:
    return AssetKey([action.key, role])


def _split_specs(action: DataQualityAction) -> list[AssetSpec]:
    common = {"group_name": action.pipeline, "kinds": {"spark", "delta"}}
    specs = [
        AssetSpec(
            asset_key(action, VALIDATED),
            description=f"Rows of {action.name} that passed every rule, in {action.target_table}.",
            metadata={"dagster/table_name": action.target_table, "config_file": str(action.config_file)},
            **common,
        )
    ]
    if action.quarantine is not None:
        specs.append(
            AssetSpec(
                asset_key(action, INBOX),
                description=(
                    f"This action's slice of the DLQ inbox {action.quarantine.dlq_table} "
                    f"(_dlq_source_table = {action.quarantine.source_table}): rows that failed a rule."
                ),
                metadata={
                    "dagster/table_name": action.quarantine.dlq_table,
                    "source_table": action.quarantine.source_table,
                },
                **common,
            )
        )
    return specs


def _split_metadata(report: SplitReport) -> dict:
    metadata = {
        "batches": report.batches,
        "rows_read": report.rows_read,
        "rows_validated": report.rows_validated,
        "rows_quarantined": report.rows_quarantined,
        "rows_dropped": report.rows_dropped,
    }
    metadata.update({f"failures: {rule}": count for rule, count in sorted(report.failures_per_rule.items())})
    return metadata


def split_asset(action: DataQualityAction):
    description = action.description or f"Split {action.name}: validated rows and quarantined rows, one scan."

    @multi_asset(name=f"{action.key}_split", specs=_split_specs(action), description=description)
    def split(
        context: AssetExecutionContext, spark: LazyPySparkResource, warehouse: WarehouseResource
    ) -> Iterator[MaterializeResult]:
        tables = warehouse.warehouse
        report = run_split(spark.spark_session, action, tables, context.run_id)
        metadata = _split_metadata(report)
        yield MaterializeResult(
            asset_key=asset_key(action, VALIDATED),
            metadata=metadata | {"path": MetadataValue.path(str(tables.path(action.target_table)))},
        )
        if action.quarantine is not None:
            yield MaterializeResult(
                asset_key=asset_key(action, INBOX),
                metadata=metadata | {"path": MetadataValue.path(str(tables.path(action.quarantine.dlq_table)))},
            )

    return split
