"""The local server's `foreachBatch` workers, forked from the fork server, start as Spark starts them: the
launcher's environment, folder and streams, the JVM's handshake, the exit status; and stop when Spark stops
their launcher. Spark's side of a worker start is played here by a socket speaking its handshake."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyspark.serializers import read_int, write_with_length

from quarantine_assets.engine.spark import recycled
from quarantine_assets.engine.spark.worker_forkserver import FORKED_MODULE, launcher_text

SECRET = "handshake-secret"
TIMEOUT_SECONDS = 60


@pytest.fixture
def launcher(tmp_path: Path) -> Path:
    path = tmp_path / "worker-python"
    path.write_text(launcher_text(tmp_path / "forkserver"), encoding="utf-8")
    path.chmod(0o700)
    return path


@pytest.fixture
def forkserver(tmp_path: Path):
    path = tmp_path / "forkserver"
    server = subprocess.Popen([sys.executable, "-m", "quarantine_assets.engine.spark.worker_forkserver", str(path)])
    deadline = time.monotonic() + TIMEOUT_SECONDS
    while not path.exists():
        assert server.poll() is None and time.monotonic() < deadline, "the fork server did not start"
        time.sleep(0.1)
    yield server
    server.terminate()
    server.wait(TIMEOUT_SECONDS)


@pytest.fixture
def spark_side():
    """A socket that takes a worker's connection as Spark's worker factory does."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(TIMEOUT_SECONDS)
    yield listener
    listener.close()


def _start(launcher: Path, folder: Path, spark_side: socket.socket | None) -> subprocess.Popen:
    folder.mkdir(exist_ok=True)
    environment = {name: value for name, value in os.environ.items() if not name.startswith("PYTHON_WORKER")}
    if spark_side is not None:
        environment["PYTHON_WORKER_FACTORY_PORT"] = str(spark_side.getsockname()[1])
        environment["PYTHON_WORKER_FACTORY_SECRET"] = SECRET
    return subprocess.Popen(
        [str(launcher), "-m", FORKED_MODULE], cwd=folder, env=environment, stderr=subprocess.PIPE, text=True
    )


def _handshake(spark_side: socket.socket) -> tuple[socket.socket, int]:
    """The worker's connection, authenticated, and the process id it reports, which Spark keeps as its own."""
    connection, _ = spark_side.accept()
    stream = connection.makefile("rwb")
    assert stream.read(read_int(stream)).decode() == SECRET
    write_with_length(b"ok", stream)
    stream.flush()
    return connection, read_int(stream)


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def test_a_foreach_batch_worker_is_forked_and_stops_with_its_launcher(launcher, forkserver, spark_side, tmp_path):
    started = _start(launcher, tmp_path / "folder", spark_side)
    connection, worker = _handshake(spark_side)
    assert worker != started.pid and _parent(worker) == forkserver.pid
    assert os.readlink(f"/proc/{worker}/cwd") == str(tmp_path / "folder")

    started.terminate()  # as Spark stops a worker it no longer needs
    connection.settimeout(TIMEOUT_SECONDS)
    assert connection.recv(1) == b""  # the worker's end of the connection closed with it
    deadline = time.monotonic() + TIMEOUT_SECONDS
    while Path(f"/proc/{worker}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{worker}").exists()


def test_a_forked_worker_fails_as_a_new_one_does(launcher, forkserver, tmp_path):
    """Without the handshake's address the worker fails at its start: its error on the launcher's stderr, its
    status the launcher's, as when Python runs the module itself."""
    plain = subprocess.run(
        [sys.executable, "-m", FORKED_MODULE],
        env={name: value for name, value in os.environ.items() if not name.startswith("PYTHON_WORKER")},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
    )
    forked = _start(launcher, tmp_path / "folder", None)
    _, errors = forked.communicate(timeout=TIMEOUT_SECONDS)
    assert plain.returncode != 0 and forked.returncode == plain.returncode
    assert "worker_forkserver" in errors and errors.strip().splitlines()[-1] == plain.stderr.strip().splitlines()[-1]


def test_without_a_fork_server_the_launcher_starts_the_worker_itself(launcher, spark_side, tmp_path):
    started = _start(launcher, tmp_path / "folder", spark_side)
    connection, worker = _handshake(spark_side)
    assert worker == started.pid
    connection.close()
    started.wait(TIMEOUT_SECONDS)


def test_a_fork_server_whose_modules_changed_on_disk_lets_workers_start_anew_then_starts_over(
    launcher, forkserver, spark_side, tmp_path
):
    """A project upgraded beside a running server: a worker forked from the old modules would run old code."""
    changed = Path(recycled.__file__)
    before = changed.stat()
    os.utime(changed, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
    try:
        started = _start(launcher, tmp_path / "folder", spark_side)
        connection, worker = _handshake(spark_side)
        assert worker == started.pid
        connection.close()
        started.wait(TIMEOUT_SECONDS)

        deadline = time.monotonic() + TIMEOUT_SECONDS
        while True:  # the fork server imports the project again, under the same process id
            started = _start(launcher, tmp_path / "folder", spark_side)
            connection, worker = _handshake(spark_side)
            connection.close()
            started.wait(TIMEOUT_SECONDS)
            if worker != started.pid or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert worker != started.pid
        assert forkserver.poll() is None
    finally:
        os.utime(changed, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_a_launcher_runs_on_a_python_whose_path_has_a_space_in_it(forkserver, spark_side, tmp_path):
    python = tmp_path / "with space" / "python"
    python.parent.mkdir()
    python.symlink_to(sys.executable)
    launcher = tmp_path / "worker python"
    launcher.write_text(launcher_text(tmp_path / "forkserver", str(python)), encoding="utf-8")
    launcher.chmod(0o700)
    started = _start(launcher, tmp_path / "folder", spark_side)
    connection, worker = _handshake(spark_side)
    assert _parent(worker) == forkserver.pid
    connection.close()
    started.wait(TIMEOUT_SECONDS)
