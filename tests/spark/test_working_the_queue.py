"""Working the queue at scale: fixes by predicate and SQL expression, dry runs against the rules, redrives after a
rule change, every refusal, and example rows in the Dagster UI."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest
from graph_driver import Loop

from quarantine_assets.config.models import Rule
from quarantine_assets.defs.keys import INBOX, asset_key
from quarantine_assets.engine.spark.bulk_fix import (
    FieldChanges,
    Selection,
    dry_run_fix,
    fix_where,
    redrive_selection,
    required,
)
from quarantine_assets.engine.spark.outbox import run_outbox
from quarantine_assets.engine.spark.recycled import run_recycled
from quarantine_assets.errors import OperatorError

AMOUNT_FAILED = "array_contains(_dlq_failed_rules.name, 'non_negative_amount')"


@pytest.fixture
def loop(spark, warehouse, tmp_path):
    loop = Loop(spark, warehouse, tmp_path)
    # Rows 2-5 fail non_negative_amount; 5 also fails known_currency; 6 fails valid_order_id only.
    loop.ingest(
        [
            (1, 1, 10.0, "EUR"),
            (2, 2, -5.0, "EUR"),
            (3, 3, -6.25, "USD"),
            (4, 4, -7.0, "EUR"),
            (5, 5, -8.0, "XXX"),
            (6, None, 9.0, "EUR"),
        ]
    )
    return loop


def _inbox_version(loop) -> int:
    return loop.warehouse.delta_table(loop.action.quarantine.inbox_table).version()


def _statuses(loop) -> dict[int, str]:
    return {row_no: loop.inbox_row(row_no)["_dlq_status"] for row_no in range(2, 7)}


def test_a_dry_run_counts_what_the_fix_then_lands_and_what_fails_again(loop):
    spark, warehouse, action = loop.spark, loop.warehouse, loop.action
    selection, changes = Selection(AMOUNT_FAILED), FieldChanges({"amount": "abs(amount)"})
    version = _inbox_version(loop)

    dry = dry_run_fix(spark, warehouse, action, selection, changes)
    assert (dry.rows_matched, dry.rows_to_fix, dry.rows_landing, dry.rows_failing_again) == (4, 4, 3, 1)
    assert dry.failures_per_rule == {"known_currency": 1}
    assert dry.examples == [{"key": loop.key_of(5), "failed_rules": ["known_currency"]}]
    assert _inbox_version(loop) == version  # nothing written

    fixed = fix_where(spark, warehouse, action, selection, changes, by="ops")
    assert fixed.rows_changed == 4
    assert _inbox_version(loop) == version + 1  # one commit for the whole set
    assert _statuses(loop) == {2: "fixed", 3: "fixed", 4: "fixed", 5: "fixed", 6: "quarantined"}

    loop.run_recycle()
    rows = [loop.inbox_row(row_no) for row_no in range(2, 6)]  # the fixed ones
    back = [row for row in rows if row["_dlq_status"] == "quarantined"]
    assert len(rows) - len(back) == dry.rows_landing and len(back) == dry.rows_failing_again
    assert Counter(failure["name"] for row in back for failure in row["_dlq_failed_rules"]) == dry.failures_per_rule
    assert loop.validated() == [(1, 1, 10.0, "EUR"), (2, 2, 5.0, "EUR"), (3, 3, 6.25, "USD"), (4, 4, 7.0, "EUR")]
    assert _statuses(loop) == {2: "recycled", 3: "recycled", 4: "recycled", 5: "quarantined", 6: "quarantined"}


def test_a_predicate_on_the_only_failed_rule_and_a_limit_fix_the_oldest_matching_rows(loop):
    only_amount = "size(_dlq_failed_rules) = 1 AND _dlq_failed_rules[0].name = 'non_negative_amount'"
    changes = FieldChanges({"amount": "-amount"}, {"currency": "GBP"})
    dry = dry_run_fix(loop.spark, loop.warehouse, loop.action, Selection(only_amount, limit=2), changes)
    assert (dry.rows_matched, dry.rows_to_fix, dry.rows_failing_again) == (3, 2, 2)  # GBP is no known currency
    assert dry.failures_per_rule == {"known_currency": 2}

    fixed = fix_where(loop.spark, loop.warehouse, loop.action, Selection(only_amount, limit=2), changes, by="ops")
    assert fixed.rows_changed == 2
    changed = [row_no for row_no, status in _statuses(loop).items() if status == "fixed"]
    assert len(changed) == 2 and set(changed) <= {2, 3, 4}
    row = loop.inbox_row(changed[0])
    payload = json.loads(
        loop.inbox().where(f"_dlq_sk = '{row['_dlq_sk']}'").selectExpr("to_json(_row_data)").first()[0]
    )
    assert payload["amount"] > 0 and payload["currency"] == "GBP" and payload["order_id"] == changed[0]


QUARANTINED_AMOUNT_FAILED = f"{AMOUNT_FAILED} AND _dlq_status = 'quarantined'"
REFUSALS = [
    (QUARANTINED_AMOUNT_FAILED, FieldChanges({"nope": "1"}), "QA-OPS-004"),
    ("amount >", FieldChanges({"amount": "1.0"}), "QA-OPS-017"),
    ("nope > 1", FieldChanges({"amount": "1.0"}), "QA-OPS-017"),
    ("amount", FieldChanges({"amount": "1.0"}), "QA-OPS-017"),
    (QUARANTINED_AMOUNT_FAILED, FieldChanges({"amount": "abs(amount"}), "QA-OPS-017"),
    (QUARANTINED_AMOUNT_FAILED, FieldChanges({"amount": "'abc'"}), "QA-OPS-018"),
    (QUARANTINED_AMOUNT_FAILED, FieldChanges({"order_id": "amount"}), "QA-OPS-018"),  # -6.25 into an INT
    (QUARANTINED_AMOUNT_FAILED, FieldChanges({"order_id": "order_id * 3000000000"}), "QA-OPS-018"),  # beyond an INT
    (QUARANTINED_AMOUNT_FAILED, FieldChanges({"amount": "CAST(raise_error('no') AS DOUBLE)"}), "QA-OPS-018"),
    (QUARANTINED_AMOUNT_FAILED, FieldChanges(), "QA-OPS-005"),
    (QUARANTINED_AMOUNT_FAILED, FieldChanges({"amount": "1.0"}, {"amount": 2.0}), "QA-OPS-010"),
    ("true", FieldChanges({"amount": "1.0"}), "QA-OPS-019"),  # row 2 is fixed already
]


def test_a_refused_fix_has_a_code_and_writes_nothing(loop):
    loop.fix(2, amount=5.0)
    version = _inbox_version(loop)
    refused_with = []
    for where, changes, _ in REFUSALS:
        for run in (dry_run_fix, lambda *args: fix_where(*args, by="ops")):
            with pytest.raises(OperatorError) as refused:
                run(loop.spark, loop.warehouse, loop.action, Selection(where), required(changes))
        refused_with.append(refused.value.code)
    assert refused_with == [code for _, _, code in REFUSALS]
    assert _inbox_version(loop) == version
    assert _statuses(loop) == {2: "fixed", 3: "quarantined", 4: "quarantined", 5: "quarantined", 6: "quarantined"}


def test_the_operator_job_dry_runs_then_fixes_by_predicate_from_the_ui(loop):
    job = loop.defs.resolve_job_def("dlq_operator")
    command = {
        "source_table": loop.action.quarantine.source_table,
        "where": f"{AMOUNT_FAILED} AND currency = 'EUR'",
        "set_expressions": ["amount = abs(amount)"],
        "dry_run": True,
        "by": "ui-user",
    }
    dry = job.execute_in_process(run_config={"ops": {"apply_dlq_command": {"config": command}}}, instance=loop.instance)
    assert dry.success
    logged = [entry.user_message for entry in loop.instance.all_logs(dry.run_id) if "dry run" in entry.user_message]
    assert logged and '"rows_landing": 2' in logged[0]
    assert set(_statuses(loop).values()) == {"quarantined"}

    applied = job.execute_in_process(
        run_config={"ops": {"apply_dlq_command": {"config": command | {"dry_run": False}}}}
    )
    assert applied.success
    assert _statuses(loop) == {2: "fixed", 3: "quarantined", 4: "fixed", 5: "quarantined", 6: "quarantined"}
    loop.run_recycle()
    assert loop.validated() == [(1, 1, 10.0, "EUR"), (2, 2, 5.0, "EUR"), (4, 4, 7.0, "EUR")]


def test_a_redrive_after_a_rule_change_lands_what_the_rules_now_pass_and_returns_the_rest(loop):
    spark, warehouse = loop.spark, loop.warehouse
    loop.ingest([(7, 7, 3.0, "GBP"), (8, 8, -1.0, "GBP")])  # known_currency was too strict for GBP
    payload_before = loop.inbox().where(f"_dlq_sk = '{loop.key_of(7)}'").selectExpr("to_json(_row_data)").first()[0]
    rules = tuple(
        Rule(name=rule.name, expression="currency IN ('EUR', 'USD', 'GBP')") if rule.name == "known_currency" else rule
        for rule in loop.action.rules
    )
    relaxed = loop.action.model_copy(update={"rules": rules})
    selection = redrive_selection(rule="known_currency")

    dry = dry_run_fix(spark, warehouse, relaxed, selection, FieldChanges())
    assert (dry.rows_to_fix, dry.rows_landing, dry.rows_failing_again) == (3, 1, 2)  # rows 5, 7 and 8
    later = redrive_selection(rule="known_currency", since=datetime.now(timezone.utc) + timedelta(hours=1))
    other_run = redrive_selection(rule="known_currency", run_id="another-run")
    second_run = loop.inbox_row(7)["_dlq_run_id"]
    this_run = redrive_selection(rule="known_currency", run_id=second_run, since=datetime(2020, 1, 1))
    counted = [
        dry_run_fix(spark, warehouse, relaxed, chosen, FieldChanges()).rows_to_fix
        for chosen in (later, other_run, this_run)
    ]
    assert counted == [0, 0, 2]  # rows 7 and 8 came in the second run
    assert dry.failures_per_rule == {"non_negative_amount": 2, "known_currency": 1}
    assert fix_where(spark, warehouse, relaxed, selection, FieldChanges(), by="ops").rows_changed == 3
    run_outbox(spark, relaxed, warehouse, "redrive")
    run_recycled(spark, relaxed, warehouse, "redrive")

    assert (7, 7, 3.0, "GBP") in loop.validated() and (8, 8, -1.0, "GBP") not in loop.validated()
    landed = loop.inbox().where(f"_dlq_sk = '{loop.key_of(7)}'")
    assert landed.selectExpr("to_json(_row_data)").first()[0] == payload_before  # sent back as it was
    back = {row_no: loop.inbox_row(row_no) for row_no in (5, 8)}
    assert {row_no: (row["_dlq_status"], row["_dlq_attempt"]) for row_no, row in back.items()} == {
        5: ("quarantined", 2),
        8: ("quarantined", 2),
    }
    assert [failure["name"] for failure in back[8]["_dlq_failed_rules"]] == ["non_negative_amount"]


def test_the_inbox_materialization_shows_example_rows_for_each_top_failed_rule(loop):
    materialization = loop.instance.get_latest_materialization_event(
        asset_key(loop.action, INBOX)
    ).asset_materialization
    table = materialization.metadata["examples"].value
    lines = table.splitlines()
    assert lines[0] == "| failed rule | key | failed rules | payload |"
    by_rule = Counter(line.split(" | ")[0].lstrip("| ") for line in lines[2:])
    assert by_rule == {"non_negative_amount": 3, "known_currency": 1, "valid_order_id": 1}
    row_5 = next(line for line in lines[2:] if line.startswith("| known_currency"))
    assert loop.key_of(5) in row_5 and "non_negative_amount, known_currency" in row_5 and '"currency":"XXX"' in row_5


def test_the_operator_job_redrives_from_the_ui_and_refuses_a_redrive_that_sets_fields(loop):
    job = loop.defs.resolve_job_def("dlq_operator")
    redrive = {"source_table": loop.action.quarantine.source_table, "redrive": True, "where": AMOUNT_FAILED}

    def run(command: dict):
        config = {"ops": {"apply_dlq_command": {"config": command}}}
        return job.execute_in_process(run_config=config, instance=loop.instance, raise_on_error=False)

    dry = run(redrive | {"dry_run": True})
    logged = [entry.user_message for entry in loop.instance.all_logs(dry.run_id) if "dry run" in entry.user_message]
    assert dry.success and '"rows_to_fix": 4' in logged[0] and '"rows_landing": 0' in logged[0]
    refused = run(redrive | {"set_expressions": ["amount = abs(amount)"]})
    assert not refused.success
    assert "QA-OPS-021" in refused.failure_data_for_node("apply_dlq_command").error.to_string()
    assert run(redrive).success
    assert _statuses(loop) == {2: "fixed", 3: "fixed", 4: "fixed", 5: "fixed", 6: "quarantined"}
