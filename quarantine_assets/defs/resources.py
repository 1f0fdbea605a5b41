"""Resources, chosen in one place: local Spark and a local warehouse unless configured otherwise."""

import json
import os
from typing import TYPE_CHECKING, Annotated, Any

import requests
from dagster import ConfigurableResource, EnvVar
from dagster_deltalake import AzureConfig, DeltaTableResource, GcsConfig, LocalConfig, S3Config
from dagster_deltalake.config import ClientConfig
from pydantic import Field, PrivateAttr, TypeAdapter, ValidationError

from quarantine_assets import codes
from quarantine_assets.engine.lake.alerts import Alert
from quarantine_assets.engine.lake.tables import Warehouse
from quarantine_assets.errors import QuarantineError
from quarantine_assets.settings import SPARK_REMOTE_VARIABLE, STORAGE_OPTIONS_VARIABLE, default_warehouse

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

StorageOptions = Annotated[LocalConfig | S3Config | AzureConfig | GcsConfig, Field(discriminator="provider")]
# The fields of dagster-deltalake's storage configs that hold a credential: a resource shows its config in the
# Dagster UI, so these come as an `EnvVar`, which the UI shows by its name.
WEBHOOK_VARIABLE = "QUARANTINE_ALERT_WEBHOOK"
SLACK_VARIABLE = "QUARANTINE_ALERT_SLACK"
CREDENTIAL_FIELDS = ("secret_access_key", "token", "client_secret", "account_key", "sas_key", "service_account_key")


class WarehouseResource(ConfigurableResource):
    """Root under which `catalog.schema.table` resolves to `<root>/<catalog>/<schema>/<table>`.

    The root is a folder or an object-store URL; `storage_options` and `client_options` are
    dagster-deltalake's. One configuration serves the sensors (through `DeltaTableResource`),
    the table checks and, through `default_resources`, the Spark session.
    """

    root: str
    storage_options: StorageOptions = Field(default_factory=LocalConfig)
    client_options: ClientConfig | None = None

    @property
    def warehouse(self) -> Warehouse:
        """The warehouse with its storage options; an `EnvVar` not yet resolved (outside a Dagster run, as the
        commands build it) is read from the environment here."""
        options = {
            key: value.get_value() if isinstance(value, EnvVar) else value
            for key, value in dict(self.storage_options).items()
        }
        storage = type(self.storage_options).model_construct(**options).str_dict()
        client = self.client_options.str_dict() if self.client_options else {}
        return Warehouse(self.root, storage | client)

    def table(self, qualified_name: str) -> DeltaTableResource:
        return DeltaTableResource(
            url=self.warehouse.path(qualified_name),
            storage_options=self.storage_options,
            client_options=self.client_options,
        )


def storage_options_from_env() -> LocalConfig | S3Config | AzureConfig | GcsConfig:
    """`QUARANTINE_STORAGE_OPTIONS`: a dagster-deltalake storage config in JSON, such as
    `{"provider": "s3", "region": "eu-west-1"}`; local when unset. A credential is named by its variable,
    `{"secret_access_key": {"env": "AWS_SECRET_ACCESS_KEY"}}`, or left to the provider's own chain."""
    value = os.environ.get(STORAGE_OPTIONS_VARIABLE)
    if not value:
        return LocalConfig()
    try:
        fields = json.loads(value)
    except json.JSONDecodeError as error:
        raise _invalid_storage_options(f"not JSON: {error}") from None
    if not isinstance(fields, dict):
        raise _invalid_storage_options("not a JSON object")
    in_clear = sorted(name for name in CREDENTIAL_FIELDS if isinstance(fields.get(name), str))
    if in_clear:
        raise QuarantineError(
            codes.STORAGE_CREDENTIAL_IN_CLEAR,
            f"{STORAGE_OPTIONS_VARIABLE} gives {in_clear} in clear, and the Dagster UI shows a resource's config "
            f'to everyone who opens it. Name the variable that holds each one ({{"{in_clear[0]}": {{"env": '
            '"VARIABLE"}}), or leave it out for the provider\'s own chain (its environment variables, an instance '
            "profile, a managed identity)",
            field=STORAGE_OPTIONS_VARIABLE,
        )
    named = {key: EnvVar(item["env"]) if _names_a_variable(item) else item for key, item in fields.items()}
    try:
        return TypeAdapter(StorageOptions).validate_python(named)
    except ValidationError as error:
        raise _invalid_storage_options(
            "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in error.errors())
        ) from None


def _names_a_variable(item: object) -> bool:
    return isinstance(item, dict) and list(item) == ["env"] and isinstance(item["env"], str)


def _invalid_storage_options(problems: str) -> QuarantineError:
    return QuarantineError(
        codes.STORAGE_OPTIONS_INVALID,
        f"{STORAGE_OPTIONS_VARIABLE} is not a storage config (provider local, s3, azure or gcs): {problems}",
        field=STORAGE_OPTIONS_VARIABLE,
    )


def warehouse_resource(
    root: str | os.PathLike | None = None, storage_options: StorageOptions | None = None
) -> WarehouseResource:
    """Unless given: `QUARANTINE_WAREHOUSE` (or the project's warehouse/) and `QUARANTINE_STORAGE_OPTIONS`
    (or local)."""
    return WarehouseResource(
        root=os.fspath(root or default_warehouse()), storage_options=storage_options or storage_options_from_env()
    )


def default_resources(
    warehouse_root: str | os.PathLike | None = None, storage_options: StorageOptions | None = None
) -> dict:
    return {
        "spark": SparkResource(),
        "warehouse": warehouse_resource(warehouse_root, storage_options),
        "thresholds": HealthThresholds(),
        "alert_webhook": alert_webhook_from_env(),
    }


class AlertWebhook(ConfigurableResource):
    """Where alerts go: a URL that takes a JSON POST. Unset, the alert sensors skip and say so. The URL usually
    holds a secret, so it comes as an `EnvVar`, which the Dagster UI shows by its name."""

    url: str | None = Field(default=None, description=f"An http(s) URL; unset: {WEBHOOK_VARIABLE}.")
    slack: bool = Field(default=False, description='Post Slack\'s incoming-webhook body, `{"text": ...}`.')

    def post(self, alerts: list[Alert]) -> None:
        url = checked_webhook_url(self.url)
        for alert in alerts:
            body = {"text": alert.message} if self.slack else alert.as_json()
            requests.post(url, json=body, timeout=10).raise_for_status()


def checked_webhook_url(url: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise QuarantineError(
            codes.BAD_ALERT_WEBHOOK,
            f"the alert webhook must be an http(s) URL; {WEBHOOK_VARIABLE} gives one starting {url[:8]!r}",
            field=WEBHOOK_VARIABLE,
        )
    return url


def alert_webhook_from_env() -> AlertWebhook:
    """`QUARANTINE_ALERT_WEBHOOK` (read when an alert is posted, so the UI shows the variable's name) and
    `QUARANTINE_ALERT_SLACK=true` for Slack's body."""
    if not os.environ.get(WEBHOOK_VARIABLE):
        return AlertWebhook()
    checked_webhook_url(os.environ[WEBHOOK_VARIABLE])
    slack = os.environ.get(SLACK_VARIABLE, "").lower() == "true"
    return AlertWebhook(url=EnvVar(WEBHOOK_VARIABLE), slack=slack)


class SparkResource(ConfigurableResource):
    """The Spark a step runs on, attached on first use: jobs that only read Delta metadata (checks,
    sensors) attach to none. Its settings come from the warehouse, so no credential is shown as config."""

    remote: str | None = Field(
        default=None,
        description=f"A Spark Connect URL (sc://host:port), `local` (a local server started on first use and kept "
        f"warm) or `embedded` (a JVM in the run's process); unset: {SPARK_REMOTE_VARIABLE}, else `local`.",
    )
    _session: Any = PrivateAttr(default=None)  # a pyspark SparkSession: pyspark is imported on first use

    def spark_session(self, warehouse: Warehouse) -> "SparkSession":
        if self._session is None:
            # Here, not at import: the sensors and table checks that share this module run without pyspark.
            from quarantine_assets.engine.spark.session import spark_session

            self._session = spark_session(warehouse, self.remote)
        return self._session

    def spark_sessions(self, warehouse: Warehouse, count: int) -> list["SparkSession"]:
        """`count` sessions of the same Spark, each with settings of its own, for streams run side by side."""
        from quarantine_assets.engine.spark.session import another_session

        return [self.spark_session(warehouse), *(another_session(warehouse, self.remote) for _ in range(count - 1))]


class HealthThresholds(ConfigurableResource):
    """When the data checks warn or fail; a stream processor's DLQ guidance alerts past a 5% reject rate."""

    reject_rate_warn: float = 0.05
    reject_rate_error: float = 0.25
    oldest_quarantined_warn_hours: float = 24.0
