"""The project's `dagster.yaml` is the instance of a plain `dagster dev -w workspace.yaml` in the project:
without DAGSTER_HOME, `dagster dev` keeps its storage in a temporary folder and reads its settings from the
folder it runs in."""

from dagster import DagsterInstance
from dagster._core.instance.ref import InstanceRef

from quarantine_assets.settings import REPO_ROOT


def test_a_plain_dagster_dev_in_the_project_runs_one_writer_per_dlq_and_dequeues_every_second(tmp_path):
    # As `dagster dev` builds its temporary instance when DAGSTER_HOME is unset.
    with DagsterInstance.from_ref(InstanceRef.from_dir(str(tmp_path), config_dir=str(REPO_ROOT))) as instance:
        assert instance.get_concurrency_config().pool_config.default_pool_limit == 1
        assert instance.run_coordinator.dequeue_interval_seconds == 1

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with DagsterInstance.from_ref(InstanceRef.from_dir(str(elsewhere))) as defaults:
        assert defaults.get_concurrency_config().pool_config.default_pool_limit is None
