"""Expectations files in both of the reference's shapes become the same typed rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from quarantine_assets.config.expectations import load_expectations
from quarantine_assets.config.models import Rule

FLOWGROUP = Path("pipelines/orders.yaml")


def rules_from(tmp_path: Path, text: str, mode: str = "dqe"):
    path = tmp_path / "rules.yaml"
    path.write_text(text)
    return load_expectations(path, mode, cited_in=FLOWGROUP, cited_field="actions[1].expectations_file")


MAPPING_SHAPE = """
"order_id IS NOT NULL": {action: drop, name: valid_order_id}
"currency IN ('EUR','USD')": {action: warn, name: known_currency}
"amount >= 0": {action: fail, name: non_negative_amount}
"""

WRAPPED_LIST_SHAPE = """
version: "1.0"
table: orders
expectations:
  - {name: valid_order_id, expression: "order_id IS NOT NULL", failureAction: drop}
  - {name: known_currency, constraint: "currency IN ('EUR','USD')", type: expect}
  - {name: non_negative_amount, expression: "amount >= 0", type: expect_or_fail}
"""

EXPECTED = (
    Rule(name="valid_order_id", expression="order_id IS NOT NULL", failure_action="drop"),
    Rule(name="known_currency", expression="currency IN ('EUR','USD')", failure_action="warn"),
    Rule(name="non_negative_amount", expression="amount >= 0", failure_action="fail"),
)


@pytest.mark.parametrize("text", [MAPPING_SHAPE, WRAPPED_LIST_SHAPE], ids=["mapping shape", "wrapped list shape"])
def test_both_shapes_give_the_same_rules_in_dqe_mode(tmp_path, text):
    assert rules_from(tmp_path, text) == (EXPECTED, [])


def test_bare_list_shape_with_action_key_and_message(tmp_path):
    rules, problems = rules_from(
        tmp_path, '- {name: valid_order_id, expression: "order_id IS NOT NULL", action: DROP, message: needs an id}\n'
    )
    assert (rules, problems) == (
        (Rule(name="valid_order_id", expression="order_id IS NOT NULL", message="needs an id"),),
        [],
    )


def test_quarantine_mode_turns_every_rule_into_drop_and_warns_only_for_written_warn_or_fail(tmp_path):
    rules, problems = rules_from(
        tmp_path, MAPPING_SHAPE + '"_rescued_data IS NULL": {name: no_rescued_data}\n', mode="quarantine"
    )
    assert {rule.failure_action for rule in rules} == {"drop"}
    assert [(p.code, p.severity, p.field) for p in problems] == [
        ("QA-CFG-019", "warning", "[\"currency IN ('EUR','USD')\"].action"),
        ("QA-CFG-019", "warning", "['amount >= 0'].action"),
    ]


def test_rule_without_action_defaults_to_warn_as_in_the_reference(tmp_path):
    (rule,), _ = rules_from(tmp_path, '"amount >= 0": {name: non_negative_amount}\n')
    assert rule.failure_action == "warn"


def test_empty_file_has_no_rules(tmp_path):
    rules, problems = rules_from(tmp_path, "")
    assert rules == () and [p.code for p in problems] == ["QA-CFG-017"]


def test_rule_name_used_twice_is_malformed(tmp_path):
    _, problems = rules_from(tmp_path, '"a > 0": {name: same}\n"b > 0": {name: same}\n')
    assert [(p.code, p.field) for p in problems] == [("QA-CFG-018", "['b > 0'].name")]


def test_missing_file_is_blamed_on_the_flowgroup_that_cites_it(tmp_path):
    rules, problems = load_expectations(
        tmp_path / "nope.yaml", "dqe", cited_in=FLOWGROUP, cited_field="actions[1].expectations_file"
    )
    assert rules == ()
    assert [(p.code, p.file, p.field) for p in problems] == [("QA-CFG-016", FLOWGROUP, "actions[1].expectations_file")]
