"""One owner per DLQ slice, claimed before the first write and verified by every writer."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from builders import ORDERS_SCHEMA, orders_action
from dlq_template import dlq_tables_from_template
from typer.testing import CliRunner

from quarantine_assets.cli import app
from quarantine_assets.engine.lake.claims import claims
from quarantine_assets.engine.lake.ownership import source_owner
from quarantine_assets.engine.lake.tables import Warehouse
from quarantine_assets.engine.spark.claims import transfer_claim
from quarantine_assets.engine.spark.operator import fix_rows
from quarantine_assets.engine.spark.split import run_split
from quarantine_assets.errors import OwnershipError
from quarantine_assets.settings import REPO_ROOT

runner = CliRunner()
FIRST = orders_action()
# Another pipeline, as a second code location would define it, claiming the same source_table.
SECOND = orders_action(name="dq_orders_again").model_copy(update={"pipeline": "other_pipeline"})
# The same action moved to another pipeline: a new owner name for the same slice and target.
RENAMED = FIRST.model_copy(update={"pipeline": "renamed_pipeline"})


def ingest(spark, warehouse, action, rows):
    spark.createDataFrame(rows, ORDERS_SCHEMA).write.format("delta").mode("append").save(
        str(warehouse.path(action.source.table))
    )


def test_the_first_writer_claims_the_slice_and_a_second_owner_is_refused_before_writing(spark, warehouse):
    dlq_tables_from_template(spark, warehouse, FIRST.quarantine.inbox_table)
    ingest(spark, warehouse, FIRST, [(1, None, 1.0, "EUR")])
    run_split(spark, FIRST, warehouse, "first-run")
    inbox_version = len(list((Path(warehouse.path("demo.ops.dlq")) / "_delta_log").glob("*.json")))

    # Identical rows: with keys derived from content they would coincide and nothing would show it.
    ingest(spark, warehouse, SECOND, [(1, None, 1.0, "EUR")])
    with pytest.raises(OwnershipError) as refused:
        run_split(spark, SECOND, warehouse, "second-run")

    assert refused.value.code == "QA-OWN-001"
    message = str(refused.value)
    assert FIRST.owner in message and SECOND.owner in message
    assert "release-claim demo.bronze.orders" in message and "transfer-claim demo.bronze.orders" in message
    assert not Path(warehouse.path(SECOND.target_table)).exists()
    assert len(list((Path(warehouse.path("demo.ops.dlq")) / "_delta_log").glob("*.json"))) == inbox_version
    claim = claims(warehouse, "demo.ops.dlq")["demo.bronze.orders"]
    assert (claim.owner, claim.claimed_by) == (FIRST.owner, "first-run")
    finding = source_owner(warehouse, SECOND)
    assert not finding.passed and finding.metadata["claimed_by"] == FIRST.owner


def test_an_operator_of_another_owner_is_refused_and_a_transfer_hands_the_slice_over(spark, warehouse):
    dlq_tables_from_template(spark, warehouse, FIRST.quarantine.inbox_table)
    ingest(spark, warehouse, FIRST, [(1, None, 1.0, "EUR")])
    run_split(spark, FIRST, warehouse, "run")
    key = spark.read.format("delta").load(str(warehouse.path("demo.ops.dlq"))).first()["_dlq_sk"]

    with pytest.raises(OwnershipError):
        fix_rows(spark, warehouse, RENAMED, [key], set_fields={"order_id": 1}, by="operator")
    transfer_claim(spark, warehouse, "demo.ops.dlq", "demo.bronze.orders", RENAMED.owner, by="lead")

    assert fix_rows(spark, warehouse, RENAMED, [key], set_fields={"order_id": 1}, by="operator").rows_changed == 1
    with pytest.raises(OwnershipError):
        run_split(spark, FIRST, warehouse, "run")
    assert source_owner(warehouse, RENAMED).metadata["claimed_by"] == RENAMED.owner


def test_claims_are_listed_and_released_from_the_command_line(spark, warehouse, tmp_path):
    root = tmp_path / "cli"
    result = runner.invoke(app, ["--warehouse", str(root), "demo"], env={"COLUMNS": "250"}, catch_exceptions=False)
    assert result.exit_code == 0, result.output

    listed = runner.invoke(app, ["--warehouse", str(root), "claims"], env={"COLUMNS": "250"})
    assert "demo.bronze.orders" in listed.output and "demo/orders/dq_orders" in listed.output
    released = runner.invoke(app, ["--warehouse", str(root), "release-claim", "demo.bronze.orders"])
    assert released.exit_code == 0 and "released demo.bronze.orders" in released.output
    assert set(claims(Warehouse(root), "demo.ops.dlq")) == {"demo.bronze.customers"}


RACER = textwrap.dedent(
    """
    import sys
    import time
    from pathlib import Path
    sys.path.insert(0, "tests")
    from builders import orders_action
    from quarantine_assets.engine.spark.claims import claim_slice
    from quarantine_assets.engine.spark.session import build_spark_session
    from quarantine_assets.engine.lake.tables import Warehouse
    from quarantine_assets.errors import OwnershipError

    action = orders_action(name=sys.argv[2])
    spark = build_spark_session("local[1]")
    Path(sys.argv[3]).touch()
    while len(list(Path(sys.argv[3]).parent.glob("ready-*"))) < 2:
        time.sleep(0.01)
    try:
        claim_slice(spark, Warehouse(Path(sys.argv[1])), action, by=sys.argv[2])
        print("claimed")
    except OwnershipError as error:
        print(error.code)
    """
)


def test_two_processes_racing_to_claim_one_slice_leave_exactly_one_owner(spark, warehouse, tmp_path):
    dlq_tables_from_template(spark, warehouse, FIRST.quarantine.inbox_table)
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(warehouse.root), name, str(tmp_path / f"ready-{name}")],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for name in ("dq_one", "dq_two")
    ]
    outcomes = sorted(racer.communicate(timeout=300)[0].strip().splitlines()[-1] for racer in racers)

    assert outcomes == ["QA-OWN-001", "claimed"]
    owner = claims(warehouse, "demo.ops.dlq")["demo.bronze.orders"].owner
    assert owner in ("demo/orders/dq_one", "demo/orders/dq_two")
