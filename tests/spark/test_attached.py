"""Every step attached to a long-lived Spark over Spark Connect, as the default runs: a local server started
on first use (the suite's `spark_server`, stopped with `spark-server --stop`) and reused; the demo, the
operator's fix and the recycle job attached to it, as a user types them, their reports and coded errors
brought back from the server's Python workers.

Each attached step runs in a process of its own: a process attaches or runs a JVM of its own, not both,
and this one runs the suite's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from builders import ORDERS_SCHEMA
from dagster import DagsterInstance
from dagster_dev import free_port
from pyspark.sql import functions as F

from quarantine_assets import codes
from quarantine_assets.config.loader import load_project
from quarantine_assets.defs.definitions import RECYCLE_JOB
from quarantine_assets.defs.keys import INBOX, RECYCLED, VALIDATED, asset_key
from quarantine_assets.engine.lake.tables import Warehouse
from quarantine_assets.engine.spark.local_server import local_server_url
from quarantine_assets.engine.spark.spark_server import log_file, pid_file, token_file
from quarantine_assets.settings import REPO_ROOT, SPARK_REMOTE_VARIABLE

BIN = Path(sys.executable).parent
FIXED_ORDER_ID = 900_000_007
FAILING_IN_THE_WORKER = """
import sys
sys.path.insert(0, "tests")
from builders import orders_action
from quarantine_assets.config.models import Rule
from quarantine_assets.engine.spark.session import spark_session
from quarantine_assets.engine.spark.split import run_split
from quarantine_assets.engine.lake.tables import Warehouse
from quarantine_assets.errors import DataQualityFailure

warehouse = Warehouse(sys.argv[1])
action = orders_action(mode="dqe", rules=(Rule(name="positive", expression="amount > 0", failure_action="fail"),))
try:
    run_split(spark_session(warehouse), action, warehouse, "attached")
except DataQualityFailure as refused:
    print(refused.code, refused)
"""

SETTING_A_FILE_ASIDE = """
import json, sys
sys.path.insert(0, "tests")
from builders import ORDERS_SCHEMA, orders_action
from quarantine_assets.config.models import FileSource
from quarantine_assets.engine.spark.file_redrive import redrive_file
from quarantine_assets.engine.spark.session import spark_session
from quarantine_assets.engine.spark.split import run_split
from quarantine_assets.engine.spark.dlq_tables import create_dlq_tables
from quarantine_assets.engine.lake.tables import Warehouse

warehouse, landing = Warehouse(sys.argv[1]), sys.argv[2]
source = FileSource(path=landing, format="csv", options={"header": "true"}, schema_ddl=ORDERS_SCHEMA)
action = orders_action().model_copy(update={"source": source})
spark = spark_session(warehouse)
create_dlq_tables(spark, warehouse, action.quarantine.inbox_table)
report = run_split(spark, action, warehouse, "attached")
with open(f"{landing}/b.csv", "w") as fixed:
    fixed.write("row_no,order_id,amount,currency\\n3,3,3.5,EUR\\n")
(redriven,) = redrive_file(spark, [action], warehouse, f"{landing}/b.csv", "ops")
print(json.dumps({"set_aside": report.files_set_aside, "redriven": redriven.rows_validated}))
"""

ATTACHED_THEN_STARTING_ANOTHER = """
import sys
from quarantine_assets.engine.lake.tables import Warehouse
from quarantine_assets.engine.spark.local_server import local_server_url
from quarantine_assets.engine.spark.session import spark_session

warehouse = Warehouse(sys.argv[1])
print(spark_session(warehouse, remote=sys.argv[2]).range(3).count())
print(spark_session(warehouse, remote=local_server_url(warehouse, int(sys.argv[3]))).range(4).count())
"""


def _run(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    done = subprocess.run(command, env=os.environ | env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    return done


def _metadata(instance: DagsterInstance, key) -> dict:
    event = instance.get_latest_materialization_event(key)
    return {name: value.value for name, value in event.asset_materialization.metadata.items()}


def test_a_second_command_reuses_the_server_the_first_one_started(spark_server, tmp_path, capfd):
    port = int(spark_server.rsplit(":", 1)[1])
    assert token_file(port).stat().st_mode & 0o077 == 0
    pid = pid_file(port).read_text()
    assert local_server_url(Warehouse(tmp_path), port) == spark_server
    assert pid_file(port).read_text() == pid
    assert "started one" not in capfd.readouterr().err


def test_a_process_that_attached_starts_a_local_server_when_none_answers(spark_server, tmp_path):
    """PySpark marks a process that attached once: a server it starts, on another port or after its first one
    stopped, must still serve rather than start as a client."""
    port = free_port()
    try:
        command = [sys.executable, "-c", ATTACHED_THEN_STARTING_ANOTHER, str(tmp_path), spark_server, str(port)]
        started = _run(command, {})
        assert started.stdout.split() == ["3", "4"] and f"started one (log {log_file(port)})" in started.stderr
    finally:
        stopped = _run([str(BIN / "quarantine-assets"), "spark-server", "--stop", "--port", str(port)], {})
    assert f"stopping the Spark server on port {port}" in stopped.stdout


def test_the_demo_a_fix_and_a_recycle_run_attached_and_report_what_they_did(spark, spark_server, tmp_path):
    warehouse = Warehouse(tmp_path / "warehouse")
    home = tmp_path / "dagster_home"
    home.mkdir()
    env = {
        SPARK_REMOTE_VARIABLE: spark_server,
        "QUARANTINE_WAREHOUSE": warehouse.root,
        "DAGSTER_HOME": str(home),
        "COLUMNS": "250",
    }
    _run([str(BIN / "quarantine-assets"), "demo"], env)
    action = load_project(warehouse=warehouse.root).action("dq_orders")
    validated = spark.read.format("delta").load(warehouse.path(action.target_table))
    inbox = spark.read.format("delta").load(warehouse.path(action.quarantine.inbox_table))
    held = inbox.where(F.col("_dlq_source_table") == action.quarantine.source_table)
    instance = DagsterInstance.from_config(str(home))
    # The split ran in the server's Python worker: its report reached the run's metadata all the same.
    split = _metadata(instance, asset_key(action, VALIDATED))
    assert split["rows_validated"] == validated.count() > 0
    assert split["rows_read"] == validated.count() + held.count()
    assert _metadata(instance, asset_key(action, INBOX))["rows_quarantined"] == held.count() > 0

    key = (
        held.where("size(_dlq_failed_rules) = 1 AND _dlq_failed_rules[0].name = 'valid_order_id'")
        .orderBy("_dlq_sk")
        .first()["_dlq_sk"]
    )
    fix = [str(BIN / "quarantine-assets"), "fix", key, "--source", action.quarantine.source_table]
    _run([*fix, "--set", f"order_id={FIXED_ORDER_ID}", "--by", "test"], env)
    _run([str(BIN / "dagster"), "job", "execute", "-f", str(REPO_ROOT / "definitions.py"), "-j", RECYCLE_JOB], env)

    assert validated.where(F.col("order_id") == FIXED_ORDER_ID).count() == 1
    row = inbox.where(F.col("_dlq_sk") == key).first()
    assert row["_dlq_status"] == "recycled" and row["_dlq_resolved_at"] is not None
    assert _metadata(instance, asset_key(action, RECYCLED))["rows_landed"] == 1

    # Many rows at once, attached: the dry run counts what the fix then changes; a bad condition is refused, coded.
    only_order_id = "size(_dlq_failed_rules) = 1 AND _dlq_failed_rules[0].name = 'valid_order_id'"
    where = f"_dlq_status = 'quarantined' AND {only_order_id}"
    bulk = [str(BIN / "quarantine-assets"), "fix", "--source", action.quarantine.source_table, "--where", where]
    bulk += ["--set-expr", f"order_id = {FIXED_ORDER_ID} + 1"]
    dry = json.loads(_run([*bulk, "--dry-run", "--json"], env).stdout)
    assert dry["rows_to_fix"] == dry["rows_landing"] == held.where(where).count() > 0
    assert f"{dry['rows_to_fix']} row(s) of {action.quarantine.source_table} marked fixed" in _run(bulk, env).stdout
    assert held.where(f"_dlq_status = 'fixed' AND {only_order_id}").count() == dry["rows_to_fix"]
    refused = subprocess.run(
        [*bulk[:-2], "--set-expr", "order_id = nope"],
        env=os.environ | env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert refused.returncode != 0 and codes.BAD_EXPRESSION in refused.stderr


def test_a_coded_error_raised_in_the_servers_worker_comes_back_coded(spark, spark_server, warehouse):
    source = warehouse.path("demo.raw.dq_orders")
    spark.createDataFrame([(1, 1, -1.0, "EUR")], ORDERS_SCHEMA).write.format("delta").save(source)
    refused = _run([sys.executable, "-c", FAILING_IN_THE_WORKER, warehouse.root], {SPARK_REMOTE_VARIABLE: spark_server})
    assert refused.stdout.startswith(f"{codes.FAIL_RULE_VIOLATED} ") and "batch 0" in refused.stdout
    assert not warehouse.is_delta_table("demo.bronze.dq_orders_validated")


def test_a_file_is_set_aside_and_redriven_attached(spark, spark_server, warehouse, tmp_path):
    """The split's batches run in the server's Python workers: a file set aside there is reported back."""
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "a[1].csv").write_text("row_no,order_id,amount,currency\n1,1,1.5,EUR\n")
    (landing / "plain.csv").write_text("row_no,order_id,amount,currency\n2,2,2.5,EUR\n")
    (landing / "b.csv").write_text("x,y,z,w\n3,3,3.5,EUR\n")
    command = [sys.executable, "-c", SETTING_A_FILE_ASIDE, warehouse.root, str(landing)]
    done = _run(command, {SPARK_REMOTE_VARIABLE: spark_server})

    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert [Path(file).name for file in report["set_aside"]] == ["b.csv"] and report["redriven"] == 1
    validated = spark.read.format("delta").load(warehouse.path("demo.bronze.dq_orders_validated"))
    assert sorted(row["row_no"] for row in validated.collect()) == [1, 2, 3]


def test_validate_parses_rules_attached(spark_server, tmp_path):
    validated = _run(
        [str(BIN / "quarantine-assets"), "--warehouse", str(tmp_path / "warehouse"), "validate"],
        {SPARK_REMOTE_VARIABLE: spark_server},
    )
    assert "data-quality action(s) valid" in validated.stdout
