"""The operator commands attached to a long-lived Spark, as an operator runs them from a shell:
`quarantine-assets spark-server`, then each command with QUARANTINE_SPARK_REMOTE set."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import pytest
from pyspark.sql import functions as F
from typer.testing import CliRunner

from quarantine_assets.cli import app
from quarantine_assets.engine.lake.claims import claims
from quarantine_assets.engine.lake.tables import Warehouse
from quarantine_assets.engine.spark.spark_server import DEFAULT_CONNECT_PORT, TOKEN_VARIABLE, pid_file, token_file
from quarantine_assets.errors import QuarantineError

CLI = Path(sys.executable).parent / "quarantine-assets"
STRANGER = (
    "from pyspark.sql import SparkSession; print(SparkSession.builder.remote('{url}').getOrCreate().range(3).count())"
)
WIDE = {"COLUMNS": "250"}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _payload(spark, warehouse: Warehouse, key: str) -> dict | None:
    rows = (
        spark.read.format("delta")
        .load(warehouse.path("demo.ops.dlq"))
        .where(F.col("_dlq_sk") == key)
        .select(F.to_json("_row_data").alias("payload"), "_dlq_status", "_dlq_updated_by")
        .collect()
    )
    return rows[0].asDict() | {"payload": json.loads(rows[0]["payload"])} if rows else None


def test_operator_commands_attach_to_a_running_spark_server_and_say_when_it_is_gone(spark, tmp_path):
    root = str(tmp_path / "warehouse")
    warehouse = Warehouse(root)
    assert CliRunner().invoke(app, ["--warehouse", root, "demo"], env=WIDE).exit_code == 0
    port = _free_port()
    attached = os.environ | WIDE | {"QUARANTINE_SPARK_REMOTE": f"sc://127.0.0.1:{port}"}

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(CLI), "--warehouse", root, *args], env=attached, capture_output=True, text=True, timeout=600
        )

    server = subprocess.Popen(
        [str(CLI), "--warehouse", root, "spark-server", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "server.log").open("w"),
        text=True,
    )
    try:
        announced = server.stdout.readline()
        assert f"Spark Connect server on sc://127.0.0.1:{port}" in announced, (tmp_path / "server.log").read_text()

        created = cli("create-tables")
        assert created.returncode == 0 and "created demo.ops.dlq" in created.stdout, created.stderr
        listed = cli("list", "--source", "demo.bronze.orders", "--status", "quarantined")
        assert listed.returncode == 0, listed.stderr
        fixed_key, discarded_key = re.findall(r"│ ([0-9a-f]{24}-\d+) │", listed.stdout)[:2]
        before = _payload(spark, warehouse, fixed_key)

        fixed = cli("fix", fixed_key, "--source", "demo.bronze.orders", "--set", "order_id=77", "--by", "ops")
        assert fixed.returncode == 0 and "1 row(s) of demo.bronze.orders marked fixed" in fixed.stdout, fixed.stderr
        shown = cli("show", fixed_key)
        assert shown.returncode == 0 and "_dlq_status: fixed" in shown.stdout, shown.stderr
        counted = cli("stats", "--source", "demo.bronze.orders")
        assert counted.returncode == 0 and "oldest quarantined row" in counted.stdout, counted.stderr
        discarded = cli("discard", discarded_key, "--source", "demo.bronze.orders", "--reason", "test order")
        assert discarded.returncode == 0, discarded.stderr
        purged = cli("purge", "--source", "demo.bronze.orders", "--older-than-days", "0")
        assert purged.returncode == 0 and "deleted 1 resolved row(s)" in purged.stdout, purged.stderr
        released = cli("release-claim", "demo.bronze.customers")
        assert released.returncode == 0 and "released demo.bronze.customers" in released.stdout, released.stderr

        token = token_file(port)
        assert stat.S_IMODE(token.stat().st_mode) == 0o600 and str(token) in announced
        started_with = token.read_text()
        second = CliRunner().invoke(app, ["--warehouse", root, "spark-server", "--port", str(port)])
        assert isinstance(second.exception, QuarantineError) and second.exception.code == "QA-RUN-004"
        assert token.read_text() == started_with
        # A client of its own, without the token the server started with, is turned away.
        stranger = subprocess.run(
            [sys.executable, "-c", STRANGER.format(url=f"sc://127.0.0.1:{port}")],
            env={key: value for key, value in os.environ.items() if key != TOKEN_VARIABLE},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert stranger.returncode != 0 and "UNAUTHENTICATED" in stranger.stderr, stranger.stdout
        guessing = subprocess.run(
            [sys.executable, "-c", STRANGER.format(url=f"sc://localhost:{port}/;token=guessed")],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert guessing.returncode != 0 and "UNAUTHENTICATED" in guessing.stderr, guessing.stdout
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=120)
    assert server.returncode == 0
    assert not token_file(port).exists()

    after = _payload(spark, warehouse, fixed_key)
    assert after["_dlq_status"] == "fixed" and after["_dlq_updated_by"] == "ops"
    assert after["payload"] == before["payload"] | {"order_id": 77}
    assert _payload(spark, warehouse, discarded_key) is None
    assert set(claims(warehouse, "demo.ops.dlq")) == {"demo.bronze.orders"}

    gone = cli("list")
    assert gone.returncode == 1 and "QA-RUN-002" in gone.stderr


def _listening_addresses(pid: int) -> set[str]:
    """The addresses that TCP sockets of process `pid` and its descendants listen on, as /proc has them."""
    parents = {}
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat_file.parent.name)] = int(stat_file.read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError):
            continue  # a process that ended meanwhile
    tree, grown = {pid}, True
    while grown:
        grown = {child for child, parent in parents.items() if parent in tree} - tree
        tree |= grown
    sockets = set()
    for process in tree:
        for descriptor in Path(f"/proc/{process}/fd").glob("*"):
            with contextlib.suppress(OSError):
                sockets.add(os.readlink(descriptor))
    addresses = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and f"socket:[{fields[9]}]" in sockets:  # 0A: LISTEN
                packed = bytes.fromhex(fields[1].partition(":")[0])
                # Each 32-bit word of the address in the host's order, as the kernel prints it.
                address = ipaddress.ip_address(b"".join(packed[i : i + 4][::-1] for i in range(0, len(packed), 4)))
                addresses.add(str(getattr(address, "ipv4_mapped", None) or address))
    return addresses


def test_local_spark_listens_on_loopback_only(spark, spark_server):
    """Not only Spark Connect's port: Spark's driver, block manager and UI (which shows each query's SQL with
    its values, an operator's fix among them) too, in the local server and in an embedded session."""
    server = int(pid_file(urlparse(spark_server).port).read_text(encoding="utf-8"))
    for pid in (server, os.getpid()):
        addresses = _listening_addresses(pid)
        assert addresses, pid
        assert all(ipaddress.ip_address(address).is_loopback for address in addresses), addresses


def test_a_spark_server_beyond_loopback_needs_a_token_chosen_on_purpose(tmp_path, monkeypatch):
    monkeypatch.delenv(TOKEN_VARIABLE, raising=False)
    # A folder of its own: a server killed earlier on this machine may have left its token in the user's.
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "runtime"))
    refused = CliRunner().invoke(app, ["--warehouse", str(tmp_path / "warehouse"), "spark-server", "--host", "0.0.0.0"])
    assert isinstance(refused.exception, QuarantineError) and refused.exception.code == "QA-RUN-003"
    assert not token_file(DEFAULT_CONNECT_PORT).exists()


@pytest.mark.jvm  # starts a server of its own
def test_a_spark_server_stops_by_itself_once_idle_and_leaves_no_file(tmp_path):
    from quarantine_assets.engine.spark.spark_server import answers, pid_file

    port = _free_port()
    server = subprocess.Popen(
        [str(CLI), "--warehouse", str(tmp_path), "spark-server", "--port", str(port), "--idle-timeout-minutes", "0.1"],
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "server.log").open("w"),
        text=True,
    )
    try:
        announced = server.stdout.readline()
        assert "It stops after 0.1 min without a Spark job" in announced, (tmp_path / "server.log").read_text()
        assert answers("127.0.0.1", port)
        assert server.wait(timeout=120) == 0
    finally:
        server.kill()
    assert not answers("127.0.0.1", port)
    assert not token_file(port).exists() and not pid_file(port).exists()
