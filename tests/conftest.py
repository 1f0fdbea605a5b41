"""One SparkSession for the whole test session of a process (a JVM start costs 15-30 s; `make test` runs two such
processes, pytest-xdist's workers), and one Spark Connect server that the end-to-end tests' Dagster runs and
commands attach to, as a deployment's do."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dagster_dev import free_port

from quarantine_assets.engine.lake.tables import Warehouse
from quarantine_assets.engine.spark.local_server import local_server_url
from quarantine_assets.engine.spark.session import EMBEDDED, build_spark_session
from quarantine_assets.engine.spark.spark_server import (
    LOOPBACK,
    answers,
    pid_file,
    token_file,
    worker_forkserver_file,
    worker_python_file,
)
from quarantine_assets.settings import SPARK_REMOTE_VARIABLE

# Runs and commands a test starts share the suite's JVM, or start their own, unless the test attaches them.
os.environ.setdefault(SPARK_REMOTE_VARIABLE, EMBEDDED)
# The suite's tables hold tens of rows, and nearly every query it runs is new to the JVM: compiling each plan to
# Java (Janino, then the JIT) costs more than evaluating it as it is: about a third of the suite's time. Every JVM the
# suite starts (its own, the server, the commands and runs it launches) evaluates expressions interpreted; the
# standalone-cluster test gives its server Spark's default, code generation, and compares the tables.
INTERPRETED = "--conf spark.sql.codegen.wholeStage=false --conf spark.sql.codegen.factoryMode=NO_CODEGEN pyspark-shell"
os.environ.setdefault("PYSPARK_SUBMIT_ARGS", INTERPRETED)
# pytest-xdist starts its workers with COLUMNS=80 and LINES=24, which rich reads once, when the commands' console is
# made: the tests give each command the width it is to print at.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for variable in ("COLUMNS", "LINES"):
        os.environ.pop(variable, None)
CLI = Path(sys.executable).parent / "quarantine-assets"
# A test that uses one of these starts a JVM, or attaches to one: `-m "not jvm"` (`make test-fast`) leaves it out.
JVM_FIXTURES = {"spark", "spark_server"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if JVM_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.jvm)


@pytest.fixture(scope="session")
def spark():
    session = build_spark_session("local[2]")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_server(tmp_path_factory) -> str:
    """Started as the default starts one, on first use; stopped as a user stops it, `spark-server --stop`."""
    port = free_port()
    url = local_server_url(Warehouse(tmp_path_factory.mktemp("spark-server") / "warehouse"), port)
    yield url
    stopped = subprocess.run(
        [str(CLI), "spark-server", "--stop", "--port", str(port)], capture_output=True, text=True, timeout=60
    )
    # Or it stopped itself after its idle timeout: the suite outlasts it once the attached tests are done.
    said = (f"stopping the Spark server on port {port}", f"no Spark server of this user runs on port {port}")
    assert any(line in stopped.stdout for line in said), stopped.stdout + stopped.stderr
    deadline = time.monotonic() + 60
    while (answers(LOOPBACK, port) or pid_file(port).exists()) and time.monotonic() < deadline:
        time.sleep(0.5)
    files = (pid_file(port), token_file(port), worker_python_file(port), worker_forkserver_file(port))
    left = [file for file in files if file.exists()]
    assert not answers(LOOPBACK, port) and not left, left


@pytest.fixture
def warehouse(tmp_path: Path) -> Warehouse:
    return Warehouse(tmp_path / "warehouse")
