"""Resources, chosen in one place: local Spark and a local warehouse unless configured otherwise."""

from pathlib import Path

from dagster import ConfigurableResource
from dagster_pyspark import LazyPySparkResource

from quarantine_assets.engine.session import spark_config
from quarantine_assets.engine.tables import Warehouse
from quarantine_assets.settings import default_warehouse


class WarehouseResource(ConfigurableResource):
    """Root folder under which `catalog.schema.table` resolves to `<root>/<catalog>/<schema>/<table>`."""

    root: str

    @property
    def warehouse(self) -> Warehouse:
        return Warehouse(Path(self.root))


def default_resources(warehouse_root: Path | None = None) -> dict:
    # Lazy: jobs that only read Delta metadata (checks, sensors) never start a JVM.
    return {
        "spark": LazyPySparkResource(spark_config=spark_config()),
        "warehouse": WarehouseResource(root=str(warehouse_root or default_warehouse())),
        "thresholds": HealthThresholds(),
    }


class HealthThresholds(ConfigurableResource):
    """When the data checks warn or fail; seed 002 suggests alerting past a 5% reject rate."""

    reject_rate_warn: float = 0.05
    reject_rate_error: float = 0.25
    oldest_quarantined_warn_hours: float = 24.0
