"""The local server's `foreachBatch` workers, forked from a process that has imported them once.

Spark starts a Python process for each streaming query's `foreachBatch`, which imports PySpark's Connect
client and this project before its first batch: about 0.6 s of each streaming step, whose batch may take
about a second. The server's workers run on a launcher (`worker_python_file`) that hands such a start
to this fork server: it forks a child that already holds those modules, gives it the launcher's
environment, folder and standard streams, and runs the worker module in it as Python would have. The
launcher waits for the child and exits with its status; a launcher stopped by Spark stops its child. Any
other worker, and every worker when the fork server does not answer, starts as a new process as before.
"""

from __future__ import annotations

import json
import os
import runpy
import selectors
import shlex
import signal
import socket
import struct
import sys
import traceback
from pathlib import Path

FORKED_MODULE = "pyspark.sql.connect.streaming.worker.foreach_batch_worker"
# What the forked workers import: the worker's own imports (PySpark's Connect client among them), and the
# modules whose functions `foreachBatch` runs, which the worker unpickles. Not the worker module itself,
# which runs as `__main__`.
PRELOADED = (
    "pyspark.worker",
    "pyspark.sql.connect.session",
    "quarantine_assets.engine.spark.split",
    "quarantine_assets.engine.spark.outbox",
    "quarantine_assets.engine.spark.recycled",
)
# The server is checked on at this interval: a fork server whose server is gone stops.
_PARENT_CHECK_SECONDS = 5
_START_TIMEOUT_SECONDS = 10
_LENGTH = struct.Struct("!I")
# The fork server's answer to a launcher whose worker it does not fork; otherwise, the worker's exit status.
START_IT_YOURSELF = b"start"

# The Python the server runs its workers on. Spark puts its zipped copy of PySpark first on a worker's path,
# and zipped modules compile again at every import; the interpreter has that same PySpark installed,
# compiled once, so the zip is left out. A `foreachBatch` worker is forked when the fork server answers.
_LAUNCHER = """import json, os, socket, struct, sys

kept = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if not entry.endswith("pyspark.zip")]
os.environ["PYTHONPATH"] = os.pathsep.join(entry for entry in kept if entry)
if sys.argv[1:] == ["-m", {module!r}]:
    forkserver = socket.socket(socket.AF_UNIX)
    try:
        forkserver.connect({socket_path!r})
    except OSError:
        pass
    else:
        start = json.dumps({{"environment": dict(os.environ), "folder": os.getcwd()}}).encode()
        socket.send_fds(forkserver, [struct.pack("!I", len(start)) + start], [0, 1, 2])
        status = forkserver.recv(16)
        if status != {start_it_yourself!r}:
            sys.exit(int(status) if status else 1)
os.execv({python!r}, [{python!r}, *sys.argv[1:]])
"""


def launcher_text(socket_path: Path, python: str = sys.executable) -> str:
    """The launcher: a shell script, as a `#!` line cannot name an interpreter whose path has a space in it.
    Its Python reads no environment (`-I`) and imports no site (`-S`): it starts in milliseconds."""
    code = _LAUNCHER.format(
        python=python, module=FORKED_MODULE, socket_path=str(socket_path), start_it_yourself=START_IT_YOURSELF
    )
    return f'#!/bin/sh\nexec {shlex.quote(python)} -IS -c {shlex.quote(code)} "$@"\n'


def serve(socket_path: Path) -> None:
    """Imports the workers' modules, then forks a worker for each launcher that connects, until the process
    that started it is gone. One thread: a fork copies only the thread that makes it. Once a module it holds
    changed on disk (this project upgraded beside a running server), launchers start their workers
    themselves until the running ones are done; then it starts over, importing them anew."""
    # The exits of the forked workers are watched through process file descriptors (Linux 5.3 and later):
    # without them there is no fork server, and the launcher starts every worker itself.
    os.close(os.pidfd_open(os.getpid()))
    for module in PRELOADED:
        __import__(module)
    forkserver = _ForkServer(socket_path)
    try:
        forkserver.run()
    finally:
        socket_path.unlink(missing_ok=True)
    if forkserver.stale:
        os.execv(sys.executable, [sys.executable, "-m", __spec__.name, str(socket_path)])


class _ForkServer:
    def __init__(self, socket_path: Path) -> None:
        self.server = os.getppid()
        self.imported = _project_files()
        self.stale = False
        self.running = 0
        socket_path.unlink(missing_ok=True)
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(str(socket_path))
        os.chmod(socket_path, 0o600)
        self.listener.listen()
        self.events = selectors.DefaultSelector()
        self.events.register(self.listener, selectors.EVENT_READ)

    def run(self) -> None:
        while os.getppid() == self.server and not (self.stale and not self.running):
            for key, _ in self.events.select(_PARENT_CHECK_SECONDS):
                if key.fileobj is self.listener:
                    self._start_worker()
                else:
                    key.data(key.fileobj)

    def _start_worker(self) -> None:
        launcher, _ = self.listener.accept()
        # A launcher sends its start as soon as it connects: one that does not is not let hold up the others.
        launcher.settimeout(_START_TIMEOUT_SECONDS)
        try:
            start, streams = _received_start(launcher)
        except (OSError, ValueError):
            launcher.close()
            return
        launcher.settimeout(None)
        self.stale = self.stale or _project_files() != self.imported
        if self.stale:
            for stream in streams:
                os.close(stream)
            _answer(launcher, START_IT_YOURSELF)
            return
        sys.stdout.flush()
        sys.stderr.flush()
        child = os.fork()
        if child == 0:
            for key in list(self.events.get_map().values()):
                os.close(key.fd)
            self.events.close()
            _run_worker(start, streams)
        for stream in streams:
            os.close(stream)
        self._watch(child, launcher)

    def _watch(self, child: int, launcher: socket.socket) -> None:
        """Tells the launcher how its worker exited; stops the worker when Spark stops the launcher."""
        exited = os.pidfd_open(child)
        self.running += 1

        def on_exit(_) -> None:
            _, status = os.waitpid(child, 0)
            self.running -= 1
            self.events.unregister(exited)
            os.close(exited)
            if launcher in self.events.get_map():
                self.events.unregister(launcher)
            _answer(launcher, str(os.waitstatus_to_exitcode(status)).encode())

        def on_launcher_gone(_) -> None:
            # The launcher only waits: anything readable on it is its end.
            self.events.unregister(launcher)
            os.kill(child, signal.SIGTERM)

        self.events.register(exited, selectors.EVENT_READ, on_exit)
        self.events.register(launcher, selectors.EVENT_READ, on_launcher_gone)


def _answer(launcher: socket.socket, answer: bytes) -> None:
    try:
        launcher.sendall(answer)
    except OSError:
        pass
    launcher.close()


def _project_files() -> dict[str, int]:
    """This project's imported modules, by file, with the time each was last changed."""
    package = f"{Path(__file__).resolve().parents[2]}{os.sep}"
    files = {}
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if file and file.startswith(package):
            try:
                files[file] = os.stat(file).st_mtime_ns
            except OSError:
                files[file] = -1
    return files


def _received_start(launcher: socket.socket) -> tuple[dict, list[int]]:
    """The launcher's environment and folder, and its standard streams, which are closed again when the
    start does not arrive whole."""
    data, streams, _, _ = socket.recv_fds(launcher, 1 << 16, 3)
    try:
        if len(data) < _LENGTH.size or len(streams) != 3:
            raise ValueError("incomplete worker start")
        (length,) = _LENGTH.unpack_from(data)
        data = data[_LENGTH.size :]
        while len(data) < length:
            more = launcher.recv(length - len(data))
            if not more:
                raise ValueError("incomplete worker start")
            data += more
        return json.loads(data), streams
    except (OSError, ValueError):
        for stream in streams:
            os.close(stream)
        raise


def _run_worker(start: dict, streams: list[int]) -> None:
    """In the child: the launcher's process as Python would have started it, running the worker module."""
    code = 1
    try:
        for target, stream in enumerate(streams):
            os.dup2(stream, target)
            os.close(stream)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(start["environment"])
        os.chdir(start["folder"])
        for entry in reversed(start["environment"].get("PYTHONPATH", "").split(os.pathsep)):
            if entry and entry not in sys.path:
                sys.path.insert(0, entry)
        sys.argv = [FORKED_MODULE]
        runpy.run_module(FORKED_MODULE, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exit:
        code = 0 if exit.code is None else exit.code if isinstance(exit.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
