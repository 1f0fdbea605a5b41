"""The long-lived Spark server's door: a token per start, readable by its owner only, that attaching
commands present. Whoever reaches an open Spark Connect server runs code as its user, with the
warehouse's credentials."""

from __future__ import annotations

import ipaddress
import os
import secrets
import signal
import socket
from pathlib import Path
from urllib.parse import urlparse

from quarantine_assets import codes
from quarantine_assets.engine.spark.worker_forkserver import launcher_text
from quarantine_assets.errors import QuarantineError

# PySpark's client presents this variable's value when the URL names no token; so does the server's own.
TOKEN_VARIABLE = "SPARK_CONNECT_AUTHENTICATE_TOKEN"
DEFAULT_CONNECT_PORT = 15002
LOOPBACK = "127.0.0.1"


def token_file(port: int) -> Path:
    """Where the server listening on `port` keeps its token: the user's runtime folder, else their cache."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    folder = Path(runtime) if runtime else Path.home() / ".cache"
    return folder / "quarantine-assets" / f"spark-server-{port}.token"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def server_token(host: str, port: int) -> str:
    """The token the server starts with, kept in `token_file(port)` with owner-only permissions: the one
    `TOKEN_VARIABLE` gives, else a new one. Beyond loopback only a token chosen on purpose will do."""
    chosen = os.environ.get(TOKEN_VARIABLE)
    if not is_loopback(host) and not chosen:
        raise QuarantineError(
            codes.SPARK_SERVER_EXPOSED,
            f"--host {host} is reachable from other machines, and whoever reaches the server runs code as this "
            f"user. Set {TOKEN_VARIABLE} to a secret of your own (clients present it, over TLS from a proxy in "
            "front of the server), or listen on 127.0.0.1. Nothing was started",
            field="--host",
        )
    if answers(host, port):
        # Its token file is the running server's: overwritten, that server's clients could not attach.
        raise QuarantineError(
            codes.SPARK_SERVER_PORT_TAKEN,
            f"something already listens on {host}:{port}: a server started before, or another program. Attach "
            "to it, stop it, or choose another --port. Nothing was started",
            field="--port",
        )
    token = chosen or secrets.token_urlsafe(32)
    path = token_file(port)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as written:
        written.write(token)
    os.chmod(path, 0o600)  # also when the file was there before, with other permissions
    return token


def answers(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError:
        return False
    return True


def attaching_url(remote: str) -> str:
    """`remote` with the token of the server there: `TOKEN_VARIABLE`'s, else the one its start left on this
    machine. PySpark sends a token over TLS except to `localhost`, where it uses the loopback's own channel."""
    url = urlparse(remote)
    port = url.port or DEFAULT_CONNECT_PORT
    token = os.environ.get(TOKEN_VARIABLE)
    if token is None and token_file(port).is_file():
        token = token_file(port).read_text(encoding="utf-8").strip()
    if token is None:
        return remote
    host = "localhost" if is_loopback(url.hostname or "localhost") else url.hostname
    others = [part for part in url.path.split(";")[1:] if part and not part.startswith("token=")]
    return f"sc://{host}:{port}/;" + ";".join([*others, f"token={token}"])


def pid_file(port: int) -> Path:
    """Where the server listening on `port` writes its process id, for `spark-server --stop`."""
    return token_file(port).with_suffix(".pid")


def log_file(port: int) -> Path:
    """Where a server started on first use writes its log: owner-only, like the token, which Spark's
    Python workers print there."""
    return token_file(port).with_suffix(".log")


def worker_python_file(port: int) -> Path:
    """Where the server listening on `port` keeps the Python its workers run on."""
    return token_file(port).with_suffix(".python")


def worker_forkserver_file(port: int) -> Path:
    """Where the fork server of the server listening on `port` listens for its workers' launcher."""
    return token_file(port).with_suffix(".forkserver")


def write_worker_python(port: int) -> Path:
    """The Python that the server on `port` runs its workers on: this interpreter, with the PySpark
    installed in it rather than Spark's zipped copy of it, and `foreachBatch` workers forked when its fork
    server answers."""
    launcher = worker_python_file(port)
    launcher.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    launcher.write_text(launcher_text(worker_forkserver_file(port)), encoding="utf-8")
    launcher.chmod(0o700)
    return launcher


def stop_server(port: int) -> str:
    """Stops the server that `spark-server` started on `port` on this machine, and says what it did."""
    try:
        pid = int(pid_file(port).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return f"no Spark server of this user runs on port {port}"
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pid_file(port).unlink(missing_ok=True)
        return f"the Spark server on port {port} (process {pid}) had already stopped"
    return f"stopping the Spark server on port {port} (process {pid})"
