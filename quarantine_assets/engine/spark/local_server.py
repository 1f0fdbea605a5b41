"""The embedded default, kept warm: a local Spark Connect server started on first use and reused by every
later command and run, as a build daemon is, until it has run no Spark job for its idle timeout or is
stopped with `spark-server --stop`. It listens on loopback only and answers only its token's holders."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

from quarantine_assets import codes
from quarantine_assets.commands import SPARK_SERVER_COMMAND
from quarantine_assets.engine.lake.tables import Warehouse
from quarantine_assets.engine.spark.spark_server import DEFAULT_CONNECT_PORT, LOOPBACK, answers, log_file, token_file
from quarantine_assets.errors import QuarantineError

IDLE_TIMEOUT_MINUTES = 30
# The first start of all resolves Delta's jars from Maven Central; later ones start a JVM in seconds.
START_TIMEOUT_SECONDS = 600
# What PySpark sets in a process's environment once it attaches somewhere.
_CLIENT_MARKS = {"SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE", "SPARK_REMOTE"}


def local_server_url(warehouse: Warehouse, port: int = DEFAULT_CONNECT_PORT) -> str:
    """The URL of the local server, started now, detached, when nothing answers on its port. Commands racing
    to start it take turns on a lock file: one starts it, the others find it answering."""
    url = f"sc://{LOOPBACK}:{port}"
    if answers(LOOPBACK, port) and token_file(port).is_file():
        return url
    lock = token_file(port).with_suffix(".lock")
    lock.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if not (answers(LOOPBACK, port) and token_file(port).is_file()):
            _start(warehouse, port)
    return url


def _start(warehouse: Warehouse, port: int) -> None:
    log = log_file(port)
    descriptor = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    command = [sys.executable, "-c", "from quarantine_assets.cli import main; main()", "spark-server"]
    command += ["--port", str(port), "--idle-timeout-minutes", str(IDLE_TIMEOUT_MINUTES)]
    # The server takes its object-store settings from the environment, as every command does; not the marks
    # PySpark leaves in it once this process has attached, with which the server would start as a client.
    environment = {name: value for name, value in os.environ.items() if name not in _CLIENT_MARKS}
    environment["QUARANTINE_WAREHOUSE"] = warehouse.root
    # Detached, in a folder of its own: it outlives the command or run that started it, and that one's folder.
    server = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=descriptor,
        stderr=descriptor,
        env=environment,
        cwd=log.parent,
        start_new_session=True,
    )
    os.close(descriptor)
    print(
        f"No Spark server answered on {LOOPBACK}:{port}: started one (log {log}). Later commands and runs attach "
        f"to it; it stops after {IDLE_TIMEOUT_MINUTES} min without a Spark job, or with "
        f"`{SPARK_SERVER_COMMAND} --stop`.",
        file=sys.stderr,
        flush=True,
    )
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while not (answers(LOOPBACK, port) and token_file(port).is_file()):
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            raise QuarantineError(
                codes.SPARK_SERVER_UNREACHABLE,
                f"the local Spark server did not start (exit {server.poll()}); its log is {log}: {_tail(log)}",
                field="QUARANTINE_SPARK_REMOTE",
            )
        time.sleep(0.5)


def _tail(log: Path) -> str:
    lines = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    return " / ".join(lines[-3:])
