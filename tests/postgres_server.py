"""A throwaway PostgreSQL server on loopback, from Debian's `postgresql` binaries, for a Dagster instance."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from glob import glob
from pathlib import Path

import psycopg2
from dagster_dev import free_port

USER = "dagster"
DATABASE = "dagster"
# initdb and the server refuse to run as root; Debian's package creates this account.
SERVER_ACCOUNT = "postgres"


def server_binary(name: str) -> str:
    found = shutil.which(name) or next(reversed(sorted(glob(f"/usr/lib/postgresql/*/bin/{name}"))), None)
    if found is None:
        raise RuntimeError(f"PostgreSQL's {name} is not installed; `make test` installs Debian's postgresql")
    return found


@dataclass(frozen=True)
class PostgresServer:
    port: int

    @property
    def instance_env(self) -> dict[str, str]:
        """What instance/dagster-postgres.yaml reads."""
        return {
            "DAGSTER_PG_HOST": "127.0.0.1",
            "DAGSTER_PG_PORT": str(self.port),
            "DAGSTER_PG_DB": DATABASE,
            "DAGSTER_PG_USERNAME": USER,
            "DAGSTER_PG_PASSWORD": "unused-with-trust-auth",
        }

    def connect(self, database: str = DATABASE):
        return psycopg2.connect(host="127.0.0.1", port=self.port, user=USER, dbname=database)


@contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    root = Path(tempfile.mkdtemp(prefix="qa-postgres-"))
    as_account = []
    if os.geteuid() == 0:
        shutil.chown(root, SERVER_ACCOUNT)
        as_account = ["runuser", "-u", SERVER_ACCOUNT, "--"]
    data = root / "data"
    server = PostgresServer(free_port())
    pg_ctl = [*as_account, server_binary("pg_ctl"), "-D", str(data)]
    try:
        subprocess.run(
            [*as_account, server_binary("initdb"), "-D", str(data), "-U", USER, "--auth=trust", "-E", "UTF8"],
            check=True,
            capture_output=True,
        )
        options = f"-h 127.0.0.1 -p {server.port} -k {root}"
        subprocess.run([*pg_ctl, "-o", options, "-l", str(root / "server.log"), "-w", "start"], check=True)
        connection = server.connect("postgres")
        connection.autocommit = True  # CREATE DATABASE cannot run in a transaction
        connection.cursor().execute(f"CREATE DATABASE {DATABASE}")
        connection.close()
        yield server
    finally:
        subprocess.run([*pg_ctl, "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
