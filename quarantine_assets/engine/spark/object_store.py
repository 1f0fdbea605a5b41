"""Spark's side of a warehouse on an object store: the Hadoop connector and its settings, derived
from the same storage options delta-rs reads with, so both see the same tables with the same credentials."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlparse

import pyspark

from quarantine_assets import codes
from quarantine_assets.errors import QuarantineError

_S3 = ("s3", "s3a")
_AZURE = ("abfs", "abfss")
_GCS = ("gs",)


def hadoop_version() -> str:
    """The Hadoop that pyspark ships; its connectors must be the same version."""
    jars = Path(pyspark.__file__).parent / "jars"
    (client,) = jars.glob("hadoop-client-api-*.jar")
    return client.stem.removeprefix("hadoop-client-api-")


def object_store_config(root: str, storage_options: Mapping[str, str]) -> dict[str, str]:
    """Spark settings to read and write under `root`; none for a local folder or a `file://` URL.

    `storage_options` are delta-rs's keys, as dagster-deltalake's `S3Config`, `AzureConfig` and
    `GcsConfig` write them. Credentials left out are found as each connector finds them by itself
    (environment, instance profile, managed identity).
    """
    url = urlparse(root)
    scheme, options = url.scheme, {key: value for key, value in storage_options.items() if value}
    if scheme in _S3:
        return _s3(options)
    if scheme in _AZURE:
        return _azure(url.hostname or "", options)
    if scheme in _GCS:
        return _gcs(options)
    if scheme in ("", "file"):
        return {}
    raise QuarantineError(
        codes.WAREHOUSE_SCHEME_UNSUPPORTED,
        f"warehouse root {root!r}: Spark has no connector here for {scheme}://; use a local folder, "
        "file://, s3://, s3a://, abfs://, abfss:// or gs://",
        field="warehouse",
    )


def _s3(options: dict[str, str]) -> dict[str, str]:
    settings = {
        "spark.jars.packages": f"org.apache.hadoop:hadoop-aws:{hadoop_version()}",
        # delta-rs names the scheme s3://, Hadoop s3a://: the same connector serves both.
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
    }
    renamed = {
        "access_key_id": "fs.s3a.access.key",
        "secret_access_key": "fs.s3a.secret.key",
        "token": "fs.s3a.session.token",
        "region": "fs.s3a.endpoint.region",
        "endpoint": "fs.s3a.endpoint",
    }
    settings |= {f"spark.hadoop.{renamed[key]}": value for key, value in options.items() if key in renamed}
    if "token" in options:
        settings["spark.hadoop.fs.s3a.aws.credentials.provider"] = (
            "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
        )
    if options.get("virtual_hosted_style_request", "").lower() == "false":
        settings["spark.hadoop.fs.s3a.path.style.access"] = "true"
    return settings


def _azure(host: str, options: dict[str, str]) -> dict[str, str]:
    # abfss://<container>@<account>.dfs.core.windows.net/...: settings are per account host.
    account_host = host.split("@")[-1] or f"{options.get('account_name', '')}.dfs.core.windows.net"
    settings = {"spark.jars.packages": f"org.apache.hadoop:hadoop-azure:{hadoop_version()}"}
    if "account_key" in options:
        settings[f"spark.hadoop.fs.azure.account.key.{account_host}"] = options["account_key"]
    elif "sas_key" in options:
        settings[f"spark.hadoop.fs.azure.account.auth.type.{account_host}"] = "SAS"
        settings[f"spark.hadoop.fs.azure.sas.fixed.token.{account_host}"] = options["sas_key"]
    elif {"client_id", "client_secret", "tenant_id"} <= options.keys():
        oauth = {
            "fs.azure.account.auth.type": "OAuth",
            "fs.azure.account.oauth.provider.type": "org.apache.hadoop.fs.azurebfs.oauth2.ClientCredsTokenProvider",
            "fs.azure.account.oauth2.client.id": options["client_id"],
            "fs.azure.account.oauth2.client.secret": options["client_secret"],
            "fs.azure.account.oauth2.client.endpoint": (
                f"https://login.microsoftonline.com/{options['tenant_id']}/oauth2/token"
            ),
        }
        settings |= {f"spark.hadoop.{key}.{account_host}": value for key, value in oauth.items()}
    return settings


def _gcs(options: dict[str, str]) -> dict[str, str]:
    settings = {
        "spark.jars.packages": f"org.apache.hadoop:hadoop-gcp:{hadoop_version()}",
        "spark.hadoop.fs.gs.impl": "org.apache.hadoop.fs.gs.GoogleHadoopFileSystem",
    }
    keyfile = options.get("service_account") or options.get("application_credentials")
    if keyfile:
        settings["spark.hadoop.fs.gs.auth.type"] = "SERVICE_ACCOUNT_JSON_KEYFILE"
        settings["spark.hadoop.fs.gs.auth.service.account.json.keyfile"] = keyfile
    return settings
