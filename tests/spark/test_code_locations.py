"""Two code locations in one `dagster dev` workspace claim one slice: the second is refused before writing;
the owner's runs queue on the DLQ's concurrency pool.

The whole product as a user runs it: the webserver and the daemon of `dagster dev`, runs launched over
GraphQL into their own processes, each location loading its own copy of a project.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml
from dagster import DagsterInstance, DagsterRunStatus
from dagster_dev import dagster_dev, finished, submitted
from typer.testing import CliRunner

from quarantine_assets.cli import app
from quarantine_assets.defs.definitions import RECYCLE_JOB, SPLIT_JOB
from quarantine_assets.engine.lake.claims import claims
from quarantine_assets.engine.lake.tables import Warehouse
from quarantine_assets.settings import REPO_ROOT, SPARK_REMOTE_VARIABLE

LOCATION = """
from pathlib import Path

from quarantine_assets.defs.definitions import load_definitions

defs = load_definitions(Path({config_dir!r}), "dev", Path({warehouse!r}))
"""


def location(tmp_path: Path, name: str, warehouse: Path, pipeline: str) -> dict:
    """A copy of the demo project whose pipeline is named `pipeline`, as another team's repository would hold."""
    config_dir = tmp_path / name
    shutil.copytree(REPO_ROOT / "configs", config_dir)
    for flowgroup in (config_dir / "pipelines" / "demo").glob("*.yaml"):
        flowgroup.write_text(flowgroup.read_text().replace("pipeline: demo\n", f"pipeline: {pipeline}\n"))
    (tmp_path / f"{name}.py").write_text(LOCATION.format(warehouse=str(warehouse), config_dir=str(config_dir)))
    return {"python_file": {"relative_path": f"{name}.py", "location_name": name}}


def step_spans(instance: DagsterInstance, run_ids: list[str]) -> list[tuple[float, float, str]]:
    """When each step of the runs started and ended."""
    started, spans = {}, []
    for run_id in run_ids:
        for record in instance.all_logs(run_id):
            event = record.dagster_event
            if event is None or event.step_key is None:
                continue
            if event.is_step_start:
                started[(run_id, event.step_key)] = record.timestamp
            elif event.is_step_success or event.is_step_failure:
                spans.append((started[(run_id, event.step_key)], record.timestamp, event.step_key))
    return sorted(spans)


def step_failures(instance: DagsterInstance, run_id: str) -> list[str]:
    """Each failed step's error with the errors that caused it, as the UI shows them."""
    failures = []
    for record in instance.all_logs(run_id):
        if record.dagster_event is None or not record.dagster_event.is_step_failure:
            continue
        error, messages = record.dagster_event.step_failure_data.error, []
        while error is not None:
            messages.append(error.message)
            error = error.cause
        failures.append("".join(messages))
    return failures


def test_a_second_location_claiming_a_slice_is_refused_and_runs_on_one_dlq_queue_in_one_workspace(
    spark, spark_server, tmp_path
):
    warehouse = tmp_path / "warehouse"
    demo = CliRunner().invoke(app, ["--warehouse", str(warehouse), "demo"], env={"COLUMNS": "250"})
    assert demo.exit_code == 0, demo.output
    # The demo's input has been split: a run of the owner adds nothing, a refused run must not either.
    logs = [warehouse / "demo" / "ops" / "dlq" / "_delta_log", warehouse / "demo" / "bronze" / "orders" / "_delta_log"]
    commits_before = [sorted(log.glob("*.json")) for log in logs]
    assert all(commits_before)

    workspace = tmp_path / "workspace.yaml"
    workspace.write_text(
        yaml.safe_dump(
            {
                "load_from": [
                    location(tmp_path, "first", warehouse, "demo"),
                    location(tmp_path, "second", warehouse, "other_team"),
                ]
            }
        )
    )
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO_ROOT / "dagster.yaml", home / "dagster.yaml")
    env = {"QUARANTINE_SENSORS": "stopped", SPARK_REMOTE_VARIABLE: spark_server}
    with dagster_dev(workspace, home, env, cwd=tmp_path) as dev:
        client = dev.client
        refused = submitted(client, "second", SPLIT_JOB)
        finished(client, refused)
        owned = submitted(client, "first", SPLIT_JOB)
        finished(client, owned)
        commits_after = [sorted(log.glob("*.json")) for log in logs]
        # Two runs of one instance at once: every step writes the DLQ, so the pool lets one run at a time.
        together = [submitted(client, "first", RECYCLE_JOB), submitted(client, "first", SPLIT_JOB)]
        finished(client, *together)

    instance = DagsterInstance.from_config(str(home))
    assert instance.get_run_by_id(refused).status == DagsterRunStatus.FAILURE
    failures = step_failures(instance, refused)
    assert failures and all("QA-OWN-001" in failure for failure in failures)
    assert any("other_team/orders/dq_orders" in f and "demo/orders/dq_orders" in f for f in failures)
    assert instance.get_run_by_id(owned).status == DagsterRunStatus.SUCCESS
    assert commits_after == commits_before
    assert all(instance.get_run_by_id(run_id).status == DagsterRunStatus.SUCCESS for run_id in together)
    # The writers' steps; the checks' steps only read and are in no pool.
    spans = [span for span in step_spans(instance, together) if span[2].endswith(("__outbox", "__recycled", "_split"))]
    assert len(spans) == 5  # outbox and recycled of both actions, and the split of their DLQ
    assert all(ended <= next_start for (_, ended, _), (next_start, _, _) in zip(spans, spans[1:])), spans
    owners = {claim.owner for claim in claims(Warehouse(warehouse), "demo.ops.dlq").values()}
    assert owners == {"demo/orders/dq_orders", "demo/customers/dq_customers"}
