"""The product as a user runs it in production: `dagster dev` (webserver and daemon) on an instance
backed by PostgreSQL, runs launched over GraphQL, a fix from the CLI recycled by the daemon's sensor,
and the UI looked at in Chromium.

One server for the module: the tests follow the user's order (split, checks, fix, recycle, look).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from dagster_dev import DagsterDev, dagster_dev, finished, submitted
from playwright.sync_api import Page, expect, sync_playwright
from postgres_server import postgres_server

from quarantine_assets.config.loader import load_project
from quarantine_assets.defs.definitions import SPLIT_JOB, TABLE_CHECKS_JOB
from quarantine_assets.demo import generate_batch, next_batch_number
from quarantine_assets.demo_run import LANDING
from quarantine_assets.engine.lake.table_health import (
    CHANGE_DATA_FEED,
    DELETION_VECTORS,
    OUTBOX_EXISTS,
    ROW_TRACKING,
    SCHEMA,
)
from quarantine_assets.engine.lake.tables import Warehouse
from quarantine_assets.engine.spark.dlq_tables import create_dlq_tables
from quarantine_assets.settings import REPO_ROOT, SPARK_REMOTE_VARIABLE

pytestmark = pytest.mark.e2e

LOCATION = "quarantine_assets"
BROKEN_LOCATION = "broken_config"
ARTIFACTS = REPO_ROOT / "test-artifacts" / "e2e"
SCREENSHOTS = ARTIFACTS / "screenshots"
UI_TIMEOUT_MS = 60_000
FIXED_ORDER_ID = 900_000_001
ORDERS = ("dq_orders", "inbox")

MATERIALIZATIONS = """
query ($path: [String!]!) {
  assetOrError(assetKey: {path: $path}) {
    ... on Asset {
      assetMaterializations(limit: 10) {
        runId
        metadataEntries {
          label
          ... on IntMetadataEntry { intValue }
          ... on FloatMetadataEntry { floatValue }
          ... on PathMetadataEntry { path }
        }
      }
    }
  }
}
"""
CHECK_EXECUTIONS = """
query ($path: [String!]!, $check: String!) {
  assetCheckExecutions(assetKey: {path: $path}, checkName: $check, limit: 10) {
    runId
    status
    evaluation { success severity metadataEntries { label } }
  }
}
"""
STEP_STATS = """
query ($runId: ID!) {
  runOrError(runId: $runId) { ... on Run { stepStats { stepKey status } } }
}
"""
RUNS = """
query ($tags: [ExecutionTag!]) {
  runsOrError(filter: {tags: $tags}) {
    ... on Runs { results { runId status jobName tags { key value } } }
  }
}
"""
LOCATIONS = """
{
  workspaceOrError {
    ... on Workspace {
      locationEntries {
        name
        locationOrLoadError { __typename ... on PythonError { className message } }
      }
    }
  }
}
"""


class Session:
    """What the tests of this module share: the server, its tables, and what earlier tests launched."""

    def __init__(self, spark, dev: DagsterDev, warehouse: Warehouse, postgres, env: dict[str, str]):
        self.spark, self.dev, self.warehouse, self.postgres, self.env = spark, dev, warehouse, postgres, env
        self.project = load_project(warehouse=warehouse.root)
        self.runs: dict[str, str] = {}
        self.timings: dict[str, float] = {}

    def table(self, name: str) -> list:
        """Read with Spark: the inbox has deletion vectors, which delta-rs does not read."""
        return self.spark.read.format("delta").load(str(self.warehouse.path(name))).collect()

    def metadata(self, path: tuple[str, ...], run_id: str) -> dict:
        asset = self.dev.query(MATERIALIZATIONS, path=list(path))["assetOrError"]
        [event] = [event for event in asset["assetMaterializations"] if event["runId"] == run_id]
        return {entry["label"]: _entry_value(entry) for entry in event["metadataEntries"]}

    def check_executions(self, path: tuple[str, ...], check: str) -> list[dict]:
        return self.dev.query(CHECK_EXECUTIONS, path=list(path), check=check)["assetCheckExecutions"]


def failed_rules(row) -> list[str]:
    return [rule["name"] for rule in row["_dlq_failed_rules"]]


def _entry_value(entry: dict):
    for field in ("intValue", "floatValue", "path"):
        if field in entry:
            return entry[field]
    return None


def broken_config(tmp_path: Path) -> Path:
    """A copy of the demo config in which two actions quarantine the same source_table."""
    config_dir = tmp_path / "broken_configs"
    shutil.copytree(REPO_ROOT / "configs", config_dir)
    customers = config_dir / "pipelines" / "demo" / "customers.yaml"
    customers.write_text(customers.read_text().replace('.customers"', '.orders"'))
    return config_dir


@pytest.fixture(scope="module")
def session(spark, spark_server, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("e2e")
    warehouse = Warehouse(tmp_path / "warehouse")
    for inbox_table in load_project(warehouse=warehouse.root).inbox_tables:
        create_dlq_tables(spark, warehouse, inbox_table)
    generate_batch(Path(warehouse.root) / LANDING, 0)

    broken = tmp_path / f"{BROKEN_LOCATION}.py"
    broken.write_text(
        "from pathlib import Path\n\nfrom quarantine_assets.defs.definitions import load_definitions\n\n"
        f"defs = load_definitions(Path({str(broken_config(tmp_path))!r}))\n"
    )
    workspace = tmp_path / "workspace.yaml"
    workspace.write_text(
        yaml.safe_dump(
            {
                "load_from": [
                    {"python_file": {"relative_path": str(REPO_ROOT / "definitions.py"), "location_name": LOCATION}},
                    {"python_file": {"relative_path": str(broken), "location_name": BROKEN_LOCATION}},
                ]
            }
        )
    )
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO_ROOT / "instance" / "dagster-postgres.yaml", home / "dagster.yaml")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with postgres_server() as postgres:
        env = postgres.instance_env | {
            "QUARANTINE_WAREHOUSE": str(warehouse.root),
            "QUARANTINE_SENSORS": "running",
            # Runs and the CLI attach to the suite's Spark server, as a deployment's attach to its cluster.
            SPARK_REMOTE_VARIABLE: spark_server,
        }
        started = time.perf_counter()
        with dagster_dev(workspace, home, env, cwd=tmp_path) as dev:
            shared = Session(spark, dev, warehouse, postgres, env)
            yield shared
            shared.timings["dagster dev up to teardown"] = time.perf_counter() - started
            (ARTIFACTS / "timings.json").write_text(json.dumps(shared.timings, indent=2) + "\n")
        shutil.copy(home / "dagster-dev.log", ARTIFACTS / "dagster-dev.log")


def test_split_all_launched_over_graphql_materializes_every_asset_with_its_counts(session):
    started = time.perf_counter()
    run_id = submitted(session.dev.client, LOCATION, SPLIT_JOB)
    finished(session.dev.client, run_id)
    session.timings["split_all run, submitted to finished"] = time.perf_counter() - started
    assert session.dev.client.get_run_status(run_id).value == "SUCCESS"
    session.runs[SPLIT_JOB] = run_id

    inbox = session.table("demo.ops.dlq")
    for action in session.project.actions:
        validated = session.metadata((action.key, "validated"), run_id)
        slice_rows = [row for row in inbox if row["_dlq_source_table"] == action.quarantine.source_table]
        assert validated["rows_validated"] == len(session.table(action.target_table)) > 0
        assert validated["rows_quarantined"] == len(slice_rows) > 0
        assert validated["rows_read"] == validated["rows_validated"] + validated["rows_quarantined"]
        assert validated["path"] == str(session.warehouse.path(action.target_table))
        failed = sum(1 for row in slice_rows if action.rules[0].name in failed_rules(row))
        assert validated[f"failures: {action.rules[0].name}"] == failed
        inbox_metadata = session.metadata((action.key, "inbox"), run_id)
        assert inbox_metadata["rows_quarantined"] == len(slice_rows)


def test_the_split_checks_and_the_table_checks_are_evaluated_and_stored(session):
    split_run = session.runs[SPLIT_JOB]
    for check in ("rows_accounted_for", "reject_rate", "oldest_quarantined_age"):
        [execution] = [e for e in session.check_executions(ORDERS, check) if e["runId"] == split_run]
        assert execution["status"] in {"SUCCEEDED", "FAILED"}, execution
        assert execution["evaluation"]["metadataEntries"], execution
    [accounted] = [e for e in session.check_executions(ORDERS, "rows_accounted_for") if e["runId"] == split_run]
    assert accounted["status"] == "SUCCEEDED" and accounted["evaluation"]["success"]

    run_id = submitted(session.dev.client, LOCATION, TABLE_CHECKS_JOB)
    finished(session.dev.client, run_id)
    session.runs[TABLE_CHECKS_JOB] = run_id
    for check in (CHANGE_DATA_FEED, ROW_TRACKING, DELETION_VECTORS, SCHEMA, OUTBOX_EXISTS):
        [execution] = [e for e in session.check_executions(ORDERS, check) if e["runId"] == run_id]
        assert execution["status"] == "SUCCEEDED", execution


def test_a_fix_from_the_cli_lands_through_the_daemons_recycle_sensor(session):
    [row] = [
        row
        for row in session.table("demo.ops.dlq")
        if row["_dlq_source_table"] == "demo.bronze.orders" and failed_rules(row) == ["valid_order_id"]
    ][:1]
    cli = Path(sys.executable).parent / "quarantine-assets"
    started = time.perf_counter()
    fix = subprocess.run(
        [str(cli), "fix", row["_dlq_sk"], "--source", "demo.bronze.orders", "--set", f"order_id={FIXED_ORDER_ID}"],
        env=os.environ | session.env,
        capture_output=True,
        text=True,
    )
    fixed_at = time.perf_counter()
    session.timings["CLI fix of one row"] = fixed_at - started
    assert fix.returncode == 0, fix.stdout + fix.stderr
    assert "1 row(s) of demo.bronze.orders marked fixed" in fix.stdout

    deadline = fixed_at + 600
    while not any(order["order_id"] == FIXED_ORDER_ID for order in session.table("demo.bronze.orders")):
        assert time.perf_counter() < deadline, "the fixed row did not land within 600 s"
        time.sleep(2)
    session.timings["fix committed to row in the validated table"] = time.perf_counter() - fixed_at

    sensor_tag = [{"key": "dagster/sensor_name", "value": "dq_orders_recycle_sensor"}]
    [run] = session.dev.query(RUNS, tags=sensor_tag)["runsOrError"]["results"]
    finished(session.dev.client, run["runId"])
    assert session.dev.client.get_run_status(run["runId"]).value == "SUCCESS"
    assert {"key": "quarantine/rows_fixed", "value": "1"} in run["tags"]
    session.runs["recycle"] = run["runId"]
    recycled = session.metadata(("dq_orders", "recycled"), run["runId"])
    assert recycled["rows_landed"] == 1
    [landed] = [r for r in session.table("demo.ops.dlq") if r["_dlq_sk"] == row["_dlq_sk"]]
    assert landed["_dlq_status"] == "recycled"


def test_a_split_stopped_mid_step_ends_canceled_and_the_next_run_lands_every_row_once(session):
    landing = Path(session.warehouse.root) / LANDING
    # Big enough that the DLQ's step is still splitting when the stop comes.
    generate_batch(landing, next_batch_number(landing), orders=40_000, customers=20_000)
    stopped = submitted(session.dev.client, LOCATION, SPLIT_JOB)
    deadline = time.monotonic() + 300
    while "demo_ops_dlq_split" not in step_statuses(session.dev, stopped):
        assert time.monotonic() < deadline, step_statuses(session.dev, stopped)
        time.sleep(0.5)
    time.sleep(2)  # so that the stop comes while the step splits, not as it starts
    session.dev.client.terminate_run(stopped)
    finished(session.dev.client, stopped)
    # The step's threads ended: the run is canceled, not left canceling.
    assert session.dev.client.get_run_status(stopped).value == "CANCELED", step_statuses(session.dev, stopped)
    session.runs["stopped split"] = stopped

    rerun = submitted(session.dev.client, LOCATION, SPLIT_JOB)
    finished(session.dev.client, rerun)
    assert session.dev.client.get_run_status(rerun).value == "SUCCESS"
    inbox = session.table("demo.ops.dlq")
    for action_key, folder, key in (("dq_orders", "orders", "order_id"), ("dq_customers", "customers", "customer_id")):
        action = session.project.action(action_key)
        generated = sum(_records(file) for file in (landing / folder).iterdir())
        keys = [row[key] for row in session.table(action.target_table) if row[key] != FIXED_ORDER_ID]
        quarantined = [row for row in inbox if row["_dlq_source_table"] == action.quarantine.source_table]
        assert len(keys) == len(set(keys)), f"{action_key}: a row landed twice"
        assert len(keys) + len(quarantined) == generated, action_key


def _records(file: Path) -> int:
    """The records of a demo input file: its lines, less a CSV file's header."""
    lines = [line for line in file.read_text().splitlines() if line]
    return len(lines) - (file.suffix == ".csv")


def step_statuses(dev: DagsterDev, run_id: str) -> dict[str, str]:
    """The steps of the run that have started, each with its status (`IN_PROGRESS` until it ends)."""
    stats = dev.query(STEP_STATS, runId=run_id)["runOrError"]["stepStats"]
    return {step["stepKey"]: step["status"] for step in stats}


def test_runs_and_check_history_are_stored_in_postgres(session):
    connection = session.postgres.connect()
    try:
        cursor = connection.cursor()
        cursor.execute("SELECT run_id FROM runs")
        stored_runs = {run_id for (run_id,) in cursor.fetchall()}
        cursor.execute("SELECT DISTINCT run_id, check_name FROM asset_check_executions")
        stored_checks = set(cursor.fetchall())
    finally:
        connection.close()
    assert set(session.runs.values()) <= stored_runs
    assert (session.runs[SPLIT_JOB], "rows_accounted_for") in stored_checks
    assert (session.runs[TABLE_CHECKS_JOB], "change_data_feed") in stored_checks
    assert (session.runs["recycle"], "recycled_lands_once") in stored_checks


def test_a_bad_config_shows_its_code_on_top_of_the_load_error(session):
    entries = session.dev.query(LOCATIONS)["workspaceOrError"]["locationEntries"]
    [broken] = [entry for entry in entries if entry["name"] == BROKEN_LOCATION]
    error = broken["locationOrLoadError"]
    assert error["__typename"] == "PythonError"
    assert error["className"] == "CodeLocationConfigError"
    assert error["message"].startswith("quarantine_assets.defs.definitions.CodeLocationConfigError: QA-CFG-")
    assert "demo.bronze.orders" in error["message"]


def chromium() -> str:
    """Debian's Chromium, which `make test` installs; Playwright's own browser download is not used."""
    found = shutil.which("chromium")
    if found is None:
        raise RuntimeError("chromium is not installed; `make test` installs Debian's chromium")
    return found


def visit(page: Page, session: Session, path: str, screenshot: str, *texts: str) -> None:
    """Opens a page of the UI, waits until each text is visible on it, and keeps a screenshot."""
    page.goto(session.dev.url + path)
    for text in texts:
        expect(page.get_by_text(text).first).to_be_visible(timeout=UI_TIMEOUT_MS)
    # Dagster's first-visit dialogs would cover what the user came to see.
    expect(page.get_by_role("dialog")).to_have_count(0)
    page.screenshot(path=SCREENSHOTS / f"{screenshot}.png", full_page=True)


def test_the_ui_in_chromium_shows_each_actions_graph_checks_sensor_run_and_the_load_error(session):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    expanded = ",".join(f"global@global:{action.key}" for action in session.project.actions)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium(), headless=True)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        try:
            visit(page, session, f"/asset-groups?expanded={expanded}", "asset-graph", "dq_orders", "dq_customers")
            for role in ("inbox", "outbox", "recycled", "validated"):
                # One node per action, each framed by its action's group.
                expect(page.get_by_text(role, exact=True)).to_have_count(2, timeout=UI_TIMEOUT_MS)

            visit(page, session, "/assets/dq_orders/inbox?view=checks", "inbox-checks", "rows_accounted_for")
            for check in ("rows_accounted_for", CHANGE_DATA_FEED, SCHEMA, OUTBOX_EXISTS):
                # The list of checks: each entry is the check's name (twice: label and tooltip) over its status.
                status = page.get_by_text(re.compile(rf"^({check}\s*)+Succeeded$"))
                expect(status.first).to_be_visible(timeout=UI_TIMEOUT_MS)

            visit(page, session, "/assets/dq_orders/recycled", "recycled", "lands_in", "dq_orders/validated")

            sensor = "/locations/quarantine_assets/sensors/dq_orders_recycle_sensor"
            visit(page, session, sensor, "recycle-sensor", "dq_orders_recycle_sensor")
            expect(page.get_by_role("row", name="Running").get_by_role("checkbox")).to_be_checked()

            visit(page, session, f"/runs/{session.runs['recycle']}", "recycle-run", "Success", "dq_orders__recycled")

            visit(page, session, "/deployment/locations", "code-locations", BROKEN_LOCATION)
            error = page.get_by_role("dialog")
            # A click that lands while the page is still wiring its handlers opens nothing: click again.
            for _ in range(3):
                page.get_by_role("button", name="View error").click()
                with contextlib.suppress(AssertionError):
                    expect(error).to_be_visible(timeout=UI_TIMEOUT_MS // 3)
                    break
            expect(error).to_contain_text("CodeLocationConfigError: QA-CFG-", timeout=UI_TIMEOUT_MS)
            page.wait_for_timeout(1000)  # the dialog fades in
            page.screenshot(path=SCREENSHOTS / "load-error.png", full_page=True)
        finally:
            browser.close()
