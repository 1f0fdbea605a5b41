"""A source file that cannot be read is set aside whole, its batch goes on, and `redrive-file` reads it again
once fixed: its rows reach the tables once, whatever is killed on the way."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from builders import ORDERS_SCHEMA, orders_action
from dagster import AssetCheckSeverity, DagsterInstance
from dlq_template import dlq_tables_from_template
from faults import Killed, kill_once
from reference_ddl import create_reference_tables
from typer.testing import CliRunner

from quarantine_assets.cli import app
from quarantine_assets.config.models import FileSource, Project
from quarantine_assets.defs.definitions import SPLIT_JOB, build_definitions
from quarantine_assets.defs.file_redrive_job import REDRIVE_FILE_JOB
from quarantine_assets.defs.resources import default_resources
from quarantine_assets.engine.spark import file_quarantine, file_redrive, split
from quarantine_assets.engine.spark.file_quarantine import set_aside_files
from quarantine_assets.engine.spark.file_redrive import redrive_file
from quarantine_assets.engine.spark.retention import purge_resolved
from quarantine_assets.engine.spark.split import run_split
from quarantine_assets.errors import QuarantineError
from quarantine_assets.settings import REPO_ROOT

HEADER = "row_no,order_id,amount,currency"


def csv_text(*row_numbers: int, header: str = HEADER) -> str:
    return header + "\n" + "".join(f"{n},{n},{n}.5,EUR\n" for n in row_numbers)


def file_action(landing: Path, mode: str = "quarantine", **quarantine):
    action = orders_action(mode=mode)
    source = FileSource(path=str(landing), format="csv", options={"header": "true"}, schema_ddl=ORDERS_SCHEMA)
    update = {"source": source}
    if quarantine:
        update["quarantine"] = action.quarantine.model_copy(update=quarantine)
    return action.model_copy(update=update)


def rows_of(spark, warehouse, table: str) -> Counter:
    return Counter(row["row_no"] for row in spark.read.format("delta").load(warehouse.path(table)).collect())


def inbox_rows(spark, warehouse, action) -> Counter:
    inbox = spark.read.format("delta").load(warehouse.path(action.quarantine.inbox_table))
    return Counter(row["_row_data"].toPython()["row_no"] for row in inbox.collect())


def fixed_and_redriven(spark, warehouse, action, file: Path, text: str):
    file.write_text(text)
    return redrive_file(spark, [action], warehouse, str(file), "ops")


def records(warehouse, action) -> list[dict]:
    return set_aside_files(warehouse, [action.quarantine.inbox_table])


@pytest.fixture
def landing(tmp_path) -> Path:
    folder = tmp_path / "landing zone"
    folder.mkdir()
    return folder


def test_a_batch_goes_on_without_the_files_it_cannot_read_and_each_is_one_record(spark, warehouse, landing):
    (landing / "a.csv").write_text(csv_text(1, 2))
    (landing / "moved header.csv").write_text(csv_text(3, header="order_id,row_no,amount,currency"))
    (landing / "cut short.csv.gz").write_bytes(gzip.compress(csv_text(4).encode())[:25])
    (landing / "not csv.csv.gz").write_bytes(b"PK\x03\x04 a zip, not gzip")
    (landing / "c.csv").write_text(csv_text(5) + "6,6,not a number,EUR\n")
    action = file_action(landing)
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)

    report = run_split(spark, action, warehouse, "run-1")

    assert rows_of(spark, warehouse, action.target_table) == Counter({1: 1, 2: 1, 5: 1})
    assert inbox_rows(spark, warehouse, action) == Counter({6: 1})
    assert (report.rows_read, report.rows_validated, report.rows_quarantined) == (4, 3, 1)
    found = {Path(record["_dlq_source_file"].replace("%20", " ")).name: record for record in records(warehouse, action)}
    assert sorted(found) == ["cut short.csv.gz", "moved header.csv", "not csv.csv.gz"]
    assert len(report.files_set_aside) == 3
    header = found["moved header.csv"]
    assert header["_dlq_errors"][0]["code"] == "QA-SRC-003" and header["_dlq_errors"][0]["type"] == "file"
    assert "order_id" in header["_dlq_errors"][0]["message"]
    assert header["_dlq_file_head"].splitlines() == ["order_id,row_no,amount,currency", "3,3,3.5,EUR"]
    assert header["_dlq_file_size"] == (landing / "moved header.csv").stat().st_size
    assert header["_dlq_status"] == "quarantined" and header["_dlq_run_id"] == "run-1"
    assert header["_dlq_action"] == action.owner and header["_dlq_file_modified_at"] is not None
    assert {found[name]["_dlq_errors"][0]["code"] for name in ("cut short.csv.gz", "not csv.csv.gz")} == {"QA-SRC-004"}

    (landing / "d.csv").write_text(csv_text(7))
    assert run_split(spark, action, warehouse, "run-2").rows_validated == 1
    assert len(records(warehouse, action)) == 3


def test_a_redriven_file_lands_once_and_cannot_be_redriven_twice(spark, warehouse, landing):
    (landing / "a.csv").write_text(csv_text(1))
    (landing / "b.csv").write_text(csv_text(2, 3, header="order_id,row_no,amount,currency"))
    action = file_action(landing)
    project = [action]
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)
    run_split(spark, action, warehouse, "run-1")

    with pytest.raises(QuarantineError) as still_bad:
        redrive_file(spark, project, warehouse, str(landing / "b.csv"), "ops")
    assert still_bad.value.code == "QA-SRC-003" or still_bad.value.code == "QA-SRC-004"
    assert rows_of(spark, warehouse, action.target_table) == Counter({1: 1})

    (landing / "b.csv").write_text(csv_text(2) + "3,3,x,EUR\n")  # fixed in place; one row still fails a rule
    (redriven,) = redrive_file(spark, project, warehouse, f"file://{landing / 'b.csv'}", "ops")

    assert (redriven.rows_validated, redriven.rows_quarantined) == (1, 1)
    assert rows_of(spark, warehouse, action.target_table) == Counter({1: 1, 2: 1})
    assert inbox_rows(spark, warehouse, action) == Counter({3: 1})
    (record,) = records(warehouse, action)
    assert record["_dlq_status"] == "redriven" and record["_dlq_resolved_by"] == "ops"
    assert dict(record["_dlq_redriven_rows"]) == {"validated": 1, "quarantined": 1}
    with pytest.raises(QuarantineError) as twice:
        redrive_file(spark, project, warehouse, str(landing / "b.csv"), "ops")
    assert twice.value.code == "QA-OPS-024"
    run_split(spark, action, warehouse, "run-2")
    assert rows_of(spark, warehouse, action.target_table) == Counter({1: 1, 2: 1})


@pytest.mark.parametrize(
    ("module", "killed_at"),
    [(split, "_append_validated"), (split, "append_to_dlq_table"), (file_redrive, "merge_into")],
)
def test_a_redrive_killed_between_its_commits_is_finished_by_the_same_command(
    spark, warehouse, landing, monkeypatch, module, killed_at
):
    (landing / "b.csv").write_text(csv_text(1, header="x,y,z,w") + "2,2,x,EUR\n")
    action = file_action(landing)
    project = [action]
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)
    run_split(spark, action, warehouse, "run-1")
    (landing / "b.csv").write_text(csv_text(1) + "2,2,x,EUR\n")
    kill_once(monkeypatch, module, killed_at)

    with pytest.raises(Killed):
        redrive_file(spark, project, warehouse, str(landing / "b.csv"), "ops")
    redrive_file(spark, project, warehouse, str(landing / "b.csv"), "ops")

    assert rows_of(spark, warehouse, action.target_table) == Counter({1: 1})
    assert inbox_rows(spark, warehouse, action) == Counter({2: 1})
    (record,) = records(warehouse, action)
    assert record["_dlq_status"] == "redriven" and dict(record["_dlq_redriven_rows"]) == {
        "validated": 1,
        "quarantined": 1,
    }


def test_a_batch_rerun_after_a_kill_keeps_its_file_set_aside_even_once_fixed(spark, warehouse, landing, monkeypatch):
    """The file's record is the batch's verdict on it: read by the re-run and by redrive-file, it would land twice."""
    (landing / "a.csv").write_text(csv_text(1))
    (landing / "b.csv").write_text(csv_text(2, header="x,y,z,w"))
    action = file_action(landing)
    project = [action]
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)
    kill_once(monkeypatch, split, "_append_validated")

    with pytest.raises(Killed):
        run_split(spark, action, warehouse, "run-1")
    (landing / "b.csv").write_text(csv_text(2))
    run_split(spark, action, warehouse, "run-2")
    redrive_file(spark, project, warehouse, str(landing / "b.csv"), "ops")

    assert rows_of(spark, warehouse, action.target_table) == Counter({1: 1, 2: 1})


def test_a_file_read_fails_but_that_reads_alone_fails_the_batch_and_sets_nothing_aside(
    spark, warehouse, landing, monkeypatch
):
    """A failure of the storage, not of the file: the next run reads the whole batch again."""
    (landing / "a.csv").write_text(csv_text(1))
    (landing / "b.csv").write_text(csv_text(2, header="x,y,z,w"))
    action = file_action(landing)
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)
    monkeypatch.setattr(file_quarantine, "unreadable", lambda *_: None)

    with pytest.raises(QuarantineError) as raised:
        run_split(spark, action, warehouse, "run-1")

    assert raised.value.code == "QA-SRC-003"
    assert records(warehouse, action) == []
    assert not warehouse.is_delta_table(action.target_table)


@pytest.mark.parametrize("mode", ["quarantine", "dqe"])
def test_files_whose_names_look_like_globs_are_each_read_once(spark, warehouse, landing, mode):
    """Spark's own read of such a batch reads its other files once more per such name (SPARK-58518)."""
    names = ["plain.csv", "a[1].csv", "b{x}.csv", "c*.csv", "d?.csv", "e\\f.csv", "g h%ü.csv"]
    for number, name in enumerate(names, start=1):
        (landing / name).write_text(csv_text(number))
    action = file_action(landing, mode=mode)
    if mode == "quarantine":
        dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)

    run_split(spark, action, warehouse, "run-1")

    assert rows_of(spark, warehouse, action.target_table) == Counter(range(1, len(names) + 1))


def test_a_set_aside_file_keeps_no_head_where_the_action_declares_sensitive_columns(spark, warehouse, landing):
    (landing / "b.csv").write_text(csv_text(1, header="x,y,z,w"))
    action = file_action(landing, sensitive_columns=("currency",))
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)

    run_split(spark, action, warehouse, "run-1")

    (record,) = records(warehouse, action)
    assert record["_dlq_file_head"] is None and record["_dlq_file_size"] > 0


def test_through_dagster_a_set_aside_file_warns_and_its_job_redrives_it_and_the_cli_lists_it(
    spark, warehouse, landing, tmp_path
):
    (landing / "a.csv").write_text(csv_text(1))
    (landing / "b.csv").write_text(csv_text(2, header="x,y,z,w"))
    action = file_action(landing)
    defs = build_definitions(
        Project(config_dir=tmp_path, env="test", actions=(action,)), default_resources(warehouse.root)
    )
    instance = DagsterInstance.ephemeral()
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)

    split_run = defs.resolve_job_def(SPLIT_JOB).execute_in_process(instance=instance)

    assert split_run.success
    (check,) = [e for e in split_run.get_asset_check_evaluations() if e.check_name == "source_files_read"]
    assert not check.passed and check.severity == AssetCheckSeverity.WARN
    assert check.metadata["files_set_aside"].value == 1
    (file,) = check.metadata["files"].value
    options = ["--config-dir", str(REPO_ROOT / "configs"), "--warehouse", warehouse.root]
    listed = CliRunner().invoke(app, [*options, "files", "--json"])
    assert listed.exit_code == 0, listed.output
    (record,) = [json.loads(line) for line in listed.output.splitlines()]
    assert (record["_dlq_source_file"], record["_dlq_status"]) == (file, "quarantined")
    assert record["_dlq_errors"][0]["code"] == "QA-SRC-003"

    (landing / "b.csv").write_text(csv_text(2))
    redrive = defs.resolve_job_def(REDRIVE_FILE_JOB).execute_in_process(
        run_config={"ops": {"redrive_file": {"config": {"path": file}}}}, instance=instance
    )

    assert redrive.success
    (observation,) = [
        e.event_specific_data.asset_observation for e in redrive.all_events if e.event_type_value == "ASSET_OBSERVATION"
    ]
    assert observation.metadata["rows_validated"].value == 1
    assert rows_of(spark, warehouse, action.target_table) == Counter({1: 1, 2: 1})
    listed = CliRunner().invoke(app, [*options, "files"], env={"COLUMNS": "250"})
    assert "redriven" in listed.output and "QA-SRC-003" in listed.output


def test_dlq_tables_made_from_the_references_ddl_get_their_files_table_on_the_first_file_set_aside(
    spark, warehouse, landing
):
    (landing / "a.csv").write_text(csv_text(1))
    (landing / "b.csv").write_text(csv_text(2, header="x,y,z,w"))
    action = file_action(landing)
    create_reference_tables(spark, warehouse, action.quarantine.inbox_table)

    run_split(spark, action, warehouse, "run-1")
    fixed_and_redriven(spark, warehouse, action, landing / "b.csv", csv_text(2))

    assert rows_of(spark, warehouse, action.target_table) == Counter({1: 1, 2: 1})
    (record,) = records(warehouse, action)
    assert record["_dlq_status"] == "redriven"


def test_a_file_gone_between_its_listing_and_its_read_is_set_aside_not_skipped(spark, warehouse, landing, monkeypatch):
    """Spark would skip it (ignoreMissingFiles), and its rows would be in neither table, without a word."""
    (landing / "a.csv").write_text(csv_text(1))
    (landing / "b.csv").write_text(csv_text(2))
    action = file_action(landing)
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)
    listed = split.FileBatch.of

    def listed_then_gone(*args):
        batch = listed(*args)
        (landing / "b.csv").unlink()
        return batch

    monkeypatch.setattr(split.FileBatch, "of", listed_then_gone)

    run_split(spark, action, warehouse, "run-1")

    assert rows_of(spark, warehouse, action.target_table) == Counter({1: 1})
    (record,) = records(warehouse, action)
    assert record["_dlq_source_file"].endswith("/b.csv") and record["_dlq_errors"][0]["code"] == "QA-SRC-004"
    assert record["_dlq_file_size"] is None


def test_a_batch_read_by_name_keeps_the_partition_columns_of_its_folders(spark, warehouse, landing):
    (landing / "region=eu").mkdir()
    (landing / "region=us").mkdir()
    (landing / "region=eu" / "a[1].csv").write_text(csv_text(1))
    (landing / "region=us" / "b.csv").write_text(csv_text(2))
    (landing / "region=us" / "c.csv").write_text(csv_text(3, header="x,y,z,w"))
    action = file_action(landing)
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)

    run_split(spark, action, warehouse, "run-1")

    validated = spark.read.format("delta").load(warehouse.path(action.target_table))
    assert sorted((row["row_no"], row["region"]) for row in validated.collect()) == [(1, "eu"), (2, "us")]
    (record,) = records(warehouse, action)
    assert record["_dlq_source_file"].endswith("region=us/c.csv")


def test_the_purge_deletes_records_of_redriven_files_and_keeps_those_still_waiting(spark, warehouse, landing):
    (landing / "b.csv").write_text(csv_text(1, header="x,y,z,w"))
    (landing / "c.csv").write_text(csv_text(2, header="x,y,z,w"))
    action = file_action(landing)
    dlq_tables_from_template(spark, warehouse, action.quarantine.inbox_table)
    run_split(spark, action, warehouse, "run-1")
    fixed_and_redriven(spark, warehouse, action, landing / "b.csv", csv_text(1))

    dry = purge_resolved(spark, warehouse, action, timedelta(0), dry_run=True, by="ops")
    purged = purge_resolved(spark, warehouse, action, timedelta(0), dry_run=False, by="ops")

    assert (dry.file_records, purged.file_records) == (1, 1)
    (waiting,) = records(warehouse, action)
    assert waiting["_dlq_source_file"].endswith("/c.csv") and waiting["_dlq_status"] == "quarantined"
