"""Alerts through Dagster's sensors, posted to an HTTP server the test runs on 127.0.0.1: each new thing once."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from builders import ORDERS_SCHEMA, orders_action
from dagster import DagsterEventType, build_run_status_sensor_context, build_sensor_context
from graph_driver import Loop

from quarantine_assets.config.models import FileSource
from quarantine_assets.defs.alerts import RUN_FAILURE_SENSOR
from quarantine_assets.defs.definitions import SPLIT_JOB
from quarantine_assets.defs.resources import AlertWebhook, HealthThresholds, default_resources
from quarantine_assets.engine.spark.file_redrive import redrive_file
from quarantine_assets.engine.spark.split import run_split


@pytest.fixture
def webhook():
    """A webhook that keeps every JSON body posted to it."""
    received: list[dict] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self):
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/hook", received
    server.shutdown()


def _tick(loop: Loop, cursor: str | None, url: str, slack: bool = False):
    sensor = loop.defs.resolve_sensor_def("demo_ops_dlq_alerts")
    resources = {
        "warehouse": default_resources(loop.warehouse.root)["warehouse"],
        "alert_webhook": AlertWebhook(url=url, slack=slack),
        "thresholds": HealthThresholds(oldest_quarantined_warn_hours=0),
    }
    result = sensor(build_sensor_context(instance=loop.instance, cursor=cursor, resources=resources))
    return result.cursor


def test_new_reasons_exhausted_rows_and_a_stale_backlog_are_each_posted_once(spark, warehouse, tmp_path, webhook):
    url, received = webhook
    loop = Loop(spark, warehouse, tmp_path, max_attempts=1)
    cursor = _tick(loop, None, url)  # starts with what the inbox holds: nothing is news
    assert received == []

    loop.ingest([(1, None, 1.0, "EUR"), (2, 2, -1.0, "EUR"), (3, None, 2.0, "EUR")])
    cursor = _tick(loop, cursor, url)
    assert sorted((alert["kind"], alert["reason"], alert["rows"]) for alert in received) == [
        ("new_reason", "non_negative_amount", 1),
        ("new_reason", "valid_order_id", 2),
        ("stale_backlog", None, 0),
    ]
    assert all(alert["source_table"] == "demo.bronze.orders" for alert in received)
    received.clear()
    assert _tick(loop, cursor, url) == cursor and received == []  # a restart with the stored cursor: no repeat

    loop.ingest([(4, 4, 1.0, "XXX"), (5, None, 1.0, "EUR")])
    cursor = _tick(loop, cursor, url, slack=True)
    assert received == [
        {"text": "demo.bronze.orders: a new reason, known_currency, quarantined 1 row(s) in demo.ops.dlq"}
    ]
    received.clear()

    loop.fix(2, amount=-2.0)  # still wrong: exhausted at the cap of 1
    loop.run_recycle()
    _tick(loop, cursor, url)
    assert [(alert["kind"], alert["rows"]) for alert in received] == [("exhausted_rows", 1)]


def test_a_failed_run_is_posted_with_its_coded_error(spark, warehouse, tmp_path, webhook):
    url, received = webhook
    loop = Loop(spark, warehouse, tmp_path, max_reject_ratio=0.5)
    loop.spark.createDataFrame(
        [(1, None, 1.0, "EUR")], "row_no INT, order_id INT, amount DOUBLE, currency STRING"
    ).write.format("delta").mode("append").save(str(warehouse.path(loop.action.source.table)))
    failed = loop.defs.resolve_job_def(SPLIT_JOB).execute_in_process(instance=loop.instance, raise_on_error=False)
    assert not failed.success
    failure = next(event for event in failed.all_events if event.event_type == DagsterEventType.RUN_FAILURE)
    context = build_run_status_sensor_context(
        sensor_name=RUN_FAILURE_SENSOR,
        dagster_event=failure,
        dagster_instance=loop.instance,
        dagster_run=failed.dagster_run,
        resources={"alert_webhook": AlertWebhook(url=url)},
    ).for_run_failure()
    loop.defs.resolve_sensor_def(RUN_FAILURE_SENSOR)(context)
    (alert,) = received
    assert alert["kind"] == "run_failure" and SPLIT_JOB in alert["message"] and failed.run_id in alert["message"]
    assert "QA-DQ-004" in alert["message"]  # the batch over its reject limit, as the step failed


def test_a_source_file_set_aside_is_posted_once_and_not_again_once_redriven(spark, warehouse, tmp_path, webhook):
    url, received = webhook
    loop = Loop(spark, warehouse, tmp_path)
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "b.csv").write_text("x,y,z,w\n1,1,1.5,EUR\n")
    source = FileSource(path=str(landing), format="csv", options={"header": "true"}, schema_ddl=ORDERS_SCHEMA)
    files_action = orders_action(name="dq_files", source_table="demo.bronze.files").model_copy(
        update={"source": source}
    )
    cursor = _tick(loop, None, url)

    run_split(spark, files_action, warehouse, "run-1")
    cursor = _tick(loop, cursor, url)

    (alert,) = received
    assert (alert["kind"], alert["source_table"], alert["reason"]) == (
        "file_set_aside",
        "demo.bronze.files",
        "QA-SRC-003",
    )
    assert "b.csv" in alert["message"]
    received.clear()
    assert _tick(loop, cursor, url) == cursor and received == []
    (landing / "b.csv").write_text("row_no,order_id,amount,currency\n1,1,1.5,EUR\n")
    redrive_file(spark, [files_action], warehouse, str(landing / "b.csv"), "ops")
    _tick(loop, cursor, url)
    assert received == []
