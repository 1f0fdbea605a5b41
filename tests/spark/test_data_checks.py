"""Data checks evaluated by the runs that write the data, asserted through Dagster's check evaluations."""

from __future__ import annotations

from dagster import AssetCheckSeverity
from graph_driver import Loop

from quarantine_assets.defs.resources import HealthThresholds


def evaluations(result) -> dict:
    return {evaluation.check_name: evaluation for evaluation in result.get_asset_check_evaluations()}


def test_split_accounts_for_every_row_and_fails_a_high_reject_rate(spark, warehouse, tmp_path):
    loop = Loop(spark, warehouse, tmp_path)
    rows = [(1, 1, 1.0, "EUR"), (2, None, 1.0, "EUR"), (3, 3, -1.0, "EUR"), (4, None, -2.0, "EUR")]
    rows.append((5, None, 1.0, "EUR"))
    result = loop.ingest(rows)
    checks = evaluations(result)

    accounted = checks["rows_accounted_for"]
    assert accounted.passed
    assert accounted.metadata["rows_read"].value == 5 and accounted.metadata["rows_held_in_inbox"].value == 4
    rate = checks["reject_rate"]
    assert not rate.passed and rate.severity == AssetCheckSeverity.ERROR
    assert rate.metadata["reject_rate"].value == 0.8
    # Row 4 fails both rules and counts for each; the rule that rejected more rows comes first.
    assert rate.metadata["top_reasons"].value == "valid_order_id: 3, non_negative_amount: 2"
    materialized = {event.asset_key.path[-1]: event for event in result.get_asset_materialization_events()}
    assert materialized["inbox"].materialization.metadata["reject_rate"].value == 0.8
    by_type = {
        key: materialized["inbox"].materialization.metadata[f"errors: {key}"].value for key in ("expectation", "parse")
    }
    assert by_type == {"expectation": 5, "parse": 0}
    assert checks["oldest_quarantined_age"].passed


def test_reject_rate_between_thresholds_warns(spark, warehouse, tmp_path):
    loop = Loop(spark, warehouse, tmp_path, thresholds=HealthThresholds(reject_rate_warn=0.1, reject_rate_error=0.5))
    good = [(n, n, 1.0, "EUR") for n in range(4)]
    rate = evaluations(loop.ingest(good + [(9, None, 1.0, "EUR")]))["reject_rate"]
    assert not rate.passed and rate.severity == AssetCheckSeverity.WARN


def test_quarantined_row_older_than_the_threshold_warns(spark, warehouse, tmp_path):
    loop = Loop(spark, warehouse, tmp_path, thresholds=HealthThresholds(oldest_quarantined_warn_hours=0.0))
    age = evaluations(loop.ingest([(1, None, 1.0, "EUR")]))["oldest_quarantined_age"]
    assert not age.passed and age.severity == AssetCheckSeverity.WARN
    # Quarantined by this test, seconds ago: an age off by a time zone would be hours.
    assert 0 <= age.metadata["oldest_quarantined_hours"].value < 0.1


def test_outbox_key_sent_twice_fails_the_uniqueness_check(spark, warehouse, tmp_path):
    loop = Loop(spark, warehouse, tmp_path)
    loop.ingest([(1, None, 1.0, "EUR")])
    loop.fix(1, order_id=1)
    assert evaluations(loop.run_recycle())["outbox_keys_unique"].passed

    outbox = warehouse.path(loop.action.quarantine.outbox_table)
    spark.sql(f"INSERT INTO delta.`{outbox}` SELECT * FROM delta.`{outbox}`")
    unique = evaluations(loop.run_recycle())["outbox_keys_unique"]
    assert not unique.passed and unique.metadata["duplicate_keys"].value == 1
