"""`dagster dev` as a user runs it: webserver and daemon in their own process group, reached over GraphQL."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import requests
from dagster import DagsterRunStatus
from dagster_graphql import DagsterGraphQLClient, DagsterGraphQLClientError

FINISHED = {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass(frozen=True)
class DagsterDev:
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def client(self) -> DagsterGraphQLClient:
        return DagsterGraphQLClient("127.0.0.1", port_number=self.port)

    def query(self, text: str, **variables) -> dict:
        response = requests.post(f"{self.url}/graphql", json={"query": text, "variables": variables}, timeout=60)
        response.raise_for_status()
        body = response.json()
        assert "errors" not in body, body["errors"]
        return body["data"]


@contextmanager
def dagster_dev(workspace: Path, home: Path, env: dict[str, str], cwd: Path) -> Iterator[DagsterDev]:
    """Starts `dagster dev` on 127.0.0.1 and stops the webserver, the daemon and every run it launched,
    also when the test fails: they share one process group."""
    server = DagsterDev(free_port(), home / "dagster-dev.log")
    with server.log.open("w") as log:
        process = subprocess.Popen(
            [str(Path(sys.executable).parent / "dagster"), "dev", "-w", str(workspace)]
            + ["-h", "127.0.0.1", "-p", str(server.port)],
            cwd=cwd,
            env=os.environ | env | {"DAGSTER_HOME": str(home)},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield server
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def submitted(client: DagsterGraphQLClient, location_name: str, job: str) -> str:
    """Submitted once the webserver has loaded the location."""
    deadline = time.monotonic() + 300
    while True:
        try:
            return client.submit_job_execution(
                job, repository_location_name=location_name, repository_name="__repository__"
            )
        except (DagsterGraphQLClientError, requests.exceptions.ConnectionError):
            assert time.monotonic() < deadline, f"dagster dev never offered {location_name}"
            time.sleep(2)


def finished(client: DagsterGraphQLClient, *run_ids: str) -> None:
    deadline = time.monotonic() + 600
    while any(client.get_run_status(run_id) not in FINISHED for run_id in run_ids):
        assert time.monotonic() < deadline, f"runs {run_ids} did not finish"
        time.sleep(2)
