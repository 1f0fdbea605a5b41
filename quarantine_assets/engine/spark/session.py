"""The Spark configuration every entry point shares: local by default, Delta always on."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from urllib.parse import urlparse

from pyspark.sql import SparkSession

from quarantine_assets import codes
from quarantine_assets.commands import SPARK_SERVER_COMMAND
from quarantine_assets.engine.lake.tables import Warehouse
from quarantine_assets.engine.spark.object_store import object_store_config
from quarantine_assets.engine.spark.spark_server import DEFAULT_CONNECT_PORT, LOOPBACK, attaching_url
from quarantine_assets.errors import QuarantineError
from quarantine_assets.settings import SPARK_REMOTE_VARIABLE

# Delta publishes one artifact per Spark minor version; this one matches pyspark 4.2.
DELTA_PACKAGE = "io.delta:delta-spark_4.2_2.13:4.4.0"
DEFAULT_MASTER = "local[*]"
LOCAL_SERVER = "local"
EMBEDDED = "embedded"


def spark_remote() -> str:
    return os.environ.get(SPARK_REMOTE_VARIABLE) or LOCAL_SERVER


def spark_master() -> str:
    return os.environ.get("QUARANTINE_SPARK_MASTER", DEFAULT_MASTER)


def is_local_master(master: str) -> bool:
    """Whether Spark runs its executors in this host's JVM (`local`, `local[4]`), not on a cluster's hosts."""
    return master.startswith("local")


# On one machine, Spark's and Delta's cluster-sized defaults (200 shuffle partitions, 50 partitions
# to rebuild a table snapshot, 10,000 to list a table's files for VACUUM) turn every small MERGE into
# hundreds of tasks, and a VACUUM of a small table into half a minute.
LOCAL_TUNING = {
    "spark.sql.shuffle.partitions": "4",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "4",
}


def local_python_workers() -> dict[str, str]:
    """Python workers (which run the JSON parser's messages) on this interpreter: PySpark's default is
    whatever `python3` is on the PATH, which may lack the version or the packages of this one."""
    return {} if os.environ.get("PYSPARK_PYTHON") else {"spark.pyspark.python": sys.executable}


def resolved_jars_file() -> Path:
    """Where the jar list that Ivy resolved for DELTA_PACKAGE is kept between starts."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "quarantine_assets" / f"{DELTA_PACKAGE.replace(':', '_')}.jars"


def delta_jars_config() -> dict[str, str]:
    """Delta's jars by path once Ivy has resolved them, else the package for Ivy to resolve.

    Ivy resolves a package against Maven Central on every start, seconds even when every jar is
    in its cache; handing Spark the resolved jars skips that.
    """
    try:
        jars = resolved_jars_file().read_text(encoding="utf-8").split()
    except FileNotFoundError:
        jars = []
    if jars and all(Path(jar).is_file() for jar in jars):
        return {"spark.jars": ",".join(jars)}
    return {"spark.jars.packages": DELTA_PACKAGE}


def spark_config(master: str | None = None, warehouse: Warehouse | None = None) -> dict[str, str]:
    """Delta's jars resolve from Maven Central on first use; later starts take them from the cache.

    A warehouse on an object store adds its Hadoop connector and the settings of its storage options.
    """
    master = master or spark_master()
    tuning = LOCAL_TUNING | local_python_workers() if is_local_master(master) else {}
    object_store = object_store_config(warehouse.root, warehouse.storage_options) if warehouse else {}
    delta_jars = delta_jars_config()
    packages = [p for p in (delta_jars.get("spark.jars.packages"), object_store.get("spark.jars.packages")) if p]
    return (
        tuning
        | delta_jars
        | object_store
        | ({"spark.jars.packages": ",".join(packages)} if packages else {})
        | {
            "spark.master": master,
            "spark.app.name": "quarantine_assets",
            "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
            "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
            # Lakehouse Plumber's DDL has no USING clause: on Databricks every table is Delta, so here too.
            "spark.sql.sources.default": "delta",
            # A rule must never fail a batch: a value that does not convert (`'n/a' >= 0` on a text column)
            # makes the rule NULL, which sends the row to the DLQ, instead of raising for the whole batch.
            "spark.sql.ansi.enabled": "false",
            "spark.sql.session.timeZone": "UTC",
            "spark.ui.showConsoleProgress": "false",
            # PySpark's default records the Python call site of every `functions` call for error messages, at
            # four JVM round trips each: most of the time it takes to build a wide table's expressions.
            "spark.python.sql.dataFrameDebugging.enabled": "false",
            "spark.driver.memory": os.environ.get("QUARANTINE_DRIVER_MEMORY", "2g"),
        }
    )


def build_spark_session(
    master: str | None = None, warehouse: Warehouse | None = None, extra: dict[str, str] | None = None
) -> SparkSession:
    config = spark_config(master, warehouse) | (extra or {})
    if is_local_master(config["spark.master"]):
        # Spark's driver, block manager and UI listen on every interface by default: the UI shows each query's
        # SQL with its values (an operator's fix among them). Its executors here are in this JVM, so loopback
        # serves them all; a user who means to open the UI to others sets SPARK_LOCAL_IP themselves.
        os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
    builder = SparkSession.builder
    for key, value in config.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if config.get("spark.jars.packages") == DELTA_PACKAGE:  # not when a connector was resolved with it
        remember_resolved_jars(spark)
    return spark


def connect_server_config(host: str, port: int, token: str) -> dict[str, str]:
    """Spark's own Connect service, run inside this driver: clients share its warmed JVM and Delta's caches;
    it answers only a client that presents `token`."""
    return {
        "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
        "spark.connect.grpc.binding.address": host,
        "spark.connect.grpc.binding.port": str(port),
        "spark.connect.authenticate.token": token,
    }


def spark_session(warehouse: Warehouse, remote: str | None = None) -> SparkSession:
    """The Spark every step and command runs on, as `remote` (else `QUARANTINE_SPARK_REMOTE`) says: attached
    to a Spark Connect server, the local one started if none answers, or a JVM of this process's own.

    A server was started with this project's configuration (`quarantine-assets spark-server`), so the
    client sets nothing; it reads and writes the warehouse through the server's executors.
    """
    remote = remote or spark_remote()
    if remote == EMBEDDED:
        return build_spark_session(warehouse=warehouse)
    if remote == LOCAL_SERVER:
        from quarantine_assets.engine.spark.local_server import local_server_url

        remote = local_server_url(warehouse)
    else:
        _refuse_unreachable(remote)
    # Delta's commit conflicts then arrive as Delta's exception classes, which `retry_on_conflict` catches.
    import delta.connect.exceptions  # noqa: F401

    # `create`, not `getOrCreate`, which would hand back a session attached elsewhere. It marks the process
    # as a Spark Connect client, so `pyspark.sql.functions` build Connect columns: a process attaches, or
    # runs a JVM of its own, not both.
    return SparkSession.builder.remote(attaching_url(remote)).create()


def another_session(warehouse: Warehouse, remote: str | None = None) -> SparkSession:
    """A session of the Spark that `spark_session(warehouse, remote)` gives, with settings of its own: for a
    stream run beside another, since a stream's settings hold for its whole run (`run_available_now`)."""
    session = spark_session(warehouse, remote)
    if (remote or spark_remote()) != EMBEDDED:
        return session  # attached, each `spark_session` is a session of its own already
    # Embedded, it is the process's one, whose settings (an object store's among them) the new session starts with.
    side = session.newSession()
    for key, value in session.conf.getAll.items():
        if session.conf.isModifiable(key):
            side.conf.set(key, value)
    return side


def _refuse_unreachable(remote: str) -> None:
    """PySpark's client retries a server that is down for minutes; a closed port is better said at once."""
    url = urlparse(remote)
    try:
        socket.create_connection((url.hostname or "localhost", url.port or DEFAULT_CONNECT_PORT), timeout=10).close()
    except OSError as error:
        raise QuarantineError(
            codes.SPARK_SERVER_UNREACHABLE,
            f"{SPARK_REMOTE_VARIABLE}={remote}, but nothing answers there ({error}). Start the server with "
            f"`{SPARK_SERVER_COMMAND}`, or set {SPARK_REMOTE_VARIABLE}={LOCAL_SERVER} for a local one",
            field=SPARK_REMOTE_VARIABLE,
        ) from None


def remember_resolved_jars(spark: SparkSession) -> None:
    """Spark lists the jars Ivy resolved in `spark.jars`; keep them for the next start."""
    resolved = spark.sparkContext.getConf().get("spark.jars", "")
    jars = [urlparse(jar).path for jar in resolved.split(",") if jar]
    if jars:
        target = resolved_jars_file()
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("\n".join(jars) + "\n", encoding="utf-8")
