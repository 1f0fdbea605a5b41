"""A Spark standalone cluster on 127.0.0.1: one master and one worker, from the launcher classes pyspark ships."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyspark
import requests
from dagster_dev import free_port

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"
# Master, worker and driver talk over loopback, whatever the machine's host name resolves to.
LOOPBACK = {"SPARK_LOCAL_IP": "127.0.0.1"}


def _start(log: Path, *arguments: str) -> subprocess.Popen:
    with log.open("w") as output:
        return subprocess.Popen(
            [str(SPARK_CLASS), *arguments],
            env=os.environ | LOOPBACK,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _alive_workers(web_port: int) -> int:
    try:
        return int(requests.get(f"http://127.0.0.1:{web_port}/json/", timeout=5).json().get("aliveworkers", 0))
    except requests.exceptions.ConnectionError:
        return 0


@contextmanager
def spark_standalone(work_dir: Path, worker_cores: int = 2, worker_memory: str = "2g") -> Iterator[str]:
    """Yields the master URL once the worker has registered; stops both, also when the test fails."""
    work_dir.mkdir(parents=True, exist_ok=True)
    port, web_port = free_port(), free_port()
    master_url = f"spark://127.0.0.1:{port}"
    processes = [
        _start(
            work_dir / "master.log",
            "org.apache.spark.deploy.master.Master",
            *("--host", "127.0.0.1", "--port", str(port), "--webui-port", str(web_port)),
        )
    ]
    try:
        processes.append(
            _start(
                work_dir / "worker.log",
                "org.apache.spark.deploy.worker.Worker",
                *("--host", "127.0.0.1", "--webui-port", str(free_port()), "--work-dir", str(work_dir / "work")),
                *("--cores", str(worker_cores), "--memory", worker_memory, master_url),
            )
        )
        deadline = time.monotonic() + 180
        while _alive_workers(web_port) < 1:
            assert time.monotonic() < deadline, f"no worker registered with {master_url}; see {work_dir}"
            time.sleep(1)
        yield master_url
    finally:
        for process in reversed(processes):
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=60)
