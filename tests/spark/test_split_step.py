"""The split step of a DLQ: the demo's two actions write one DLQ, so one step splits both, side by side."""

from __future__ import annotations

import pytest
from dagster import AssetKey, DagsterInstance
from dlq_template import dlq_tables_from_template

from quarantine_assets.config.loader import load_project
from quarantine_assets.defs import assets
from quarantine_assets.defs.data_checks import ROWS_ACCOUNTED_FOR
from quarantine_assets.defs.definitions import SPLIT_JOB, build_definitions
from quarantine_assets.defs.keys import INBOX, VALIDATED, asset_key
from quarantine_assets.defs.resources import default_resources
from quarantine_assets.demo import generate_batch, next_batch_number
from quarantine_assets.engine.lake.tables import Warehouse
from quarantine_assets.errors import DataQualityFailure


@pytest.fixture
def demo(spark, tmp_path):
    project, warehouse = load_project(warehouse=tmp_path), Warehouse(tmp_path)
    for inbox_table in project.inbox_tables:
        dlq_tables_from_template(spark, warehouse, inbox_table)
    generate_batch(tmp_path / "_landing", next_batch_number(tmp_path / "_landing"))
    orders, customers = (next(a for a in project.actions if a.key == key) for key in ("dq_orders", "dq_customers"))
    defs = build_definitions(project, default_resources(str(tmp_path)))
    return warehouse, orders, customers, defs.resolve_job_def(SPLIT_JOB), DagsterInstance.ephemeral()


def _rows(spark, warehouse: Warehouse, table: str) -> int:
    return spark.read.format("delta").load(str(warehouse.path(table))).count()


def _materialized(instance: DagsterInstance, key: AssetKey) -> int:
    return len(instance.fetch_materializations(key, limit=100).records)


def test_one_step_splits_every_action_of_a_dlq_and_reports_each(spark, demo):
    warehouse, orders, customers, job, instance = demo
    result = job.execute_in_process(instance=instance)

    assert [node.name for node in job.nodes if node.name.endswith("_split")] == ["demo_ops_dlq_split"]
    for action in (orders, customers):
        for part in (VALIDATED, INBOX):
            (event,) = [e for e in result.get_asset_materialization_events() if e.asset_key == asset_key(action, part)]
            assert event.step_key == "demo_ops_dlq_split" and event.materialization.metadata["rows_read"].value > 0
        checks = [
            check for check in result.get_asset_check_evaluations() if check.asset_key == asset_key(action, INBOX)
        ]
        assert any(check.check_name == ROWS_ACCOUNTED_FOR and check.passed for check in checks)
        assert _rows(spark, warehouse, action.target_table) > 0


def test_a_selection_of_one_actions_asset_splits_that_action_alone_and_records_both_of_its_tables(spark, demo):
    warehouse, orders, customers, job, instance = demo
    result = job.execute_in_process(instance=instance, asset_selection=[asset_key(orders, VALIDATED)])

    assert result.success
    assert _rows(spark, warehouse, orders.target_table) > 0
    assert not warehouse.is_delta_table(customers.target_table)  # not split: its validated table is not there
    assert _materialized(instance, asset_key(orders, VALIDATED)) == 1
    # The split wrote the inbox too: Dagster records it, though outside the selection.
    assert _materialized(instance, asset_key(orders, INBOX)) == 1
    assert _materialized(instance, asset_key(customers, VALIDATED)) == 0


def test_an_action_that_fails_fails_the_step_with_its_error_and_the_other_lands(spark, demo, monkeypatch):
    warehouse, orders, customers, job, instance = demo
    split = assets.run_split

    def failing_customers(session, action, warehouse, run_id):
        if action.key == customers.key:
            raise DataQualityFailure("QA-DQ-004", "a fault for the test", field="quarantine.max_reject_ratio")
        return split(session, action, warehouse, run_id)

    monkeypatch.setattr(assets, "run_split", failing_customers)
    result = job.execute_in_process(instance=instance, raise_on_error=False)

    (failure,) = [event for event in result.all_events if event.is_step_failure]
    error, shown = failure.step_failure_data.error, ""
    while error is not None:  # the error as the UI shows it, with the errors that caused it
        shown, error = shown + error.message, error.cause
    assert failure.step_key == "demo_ops_dlq_split" and "QA-DQ-004 error: a fault for the test" in shown
    assert _materialized(instance, asset_key(orders, VALIDATED)) == 1
    assert _materialized(instance, asset_key(orders, INBOX)) == 1
    assert _rows(spark, warehouse, orders.target_table) > 0
    assert _materialized(instance, asset_key(customers, VALIDATED)) == 0
    assert not warehouse.is_delta_table(customers.target_table)
