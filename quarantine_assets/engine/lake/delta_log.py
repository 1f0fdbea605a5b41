"""The Delta log read directly, for what delta-rs does not expose: clustering, change-feed ranges, commit metrics.

The files under `_delta_log/`, through delta-rs's object store (`Warehouse.log`), so on local
disk and object stores alike: no JVM, and cheap enough for a sensor tick or a check.
"""

from __future__ import annotations

import json
import re
from urllib.parse import unquote

import pyarrow.parquet as pq
from pyarrow.fs import FileSelector, FileSystem

CLUSTERING_DOMAIN = "delta.clustering"
CHANGE_DATA_FEED_PROPERTY = "delta.enableChangeDataFeed"
FILE_ACTIONS = ("add", "remove", "cdc")


def is_true(value: str | None) -> bool:
    """Delta table properties are strings; only a case-insensitive "true" turns a feature on."""
    return (value or "").lower() == "true"


def clustering_columns(log: FileSystem, version: int) -> list[str]:
    """Liquid clustering lives in the log's `delta.clustering` domain, not in the table properties.

    The newest commit that sets the domain wins; the newest checkpoint summarises every commit
    before it, so the walk back stops there.
    """
    files = _names(log)
    checkpoint = max((v for v in map(_checkpoint_version, files) if v is not None and v <= version), default=-1)
    for commit in range(version, checkpoint, -1):
        domain = _clustering_domain(_json_actions(log, f"{commit:020d}.json", "domainMetadata"))
        if domain is not None:
            return _domain_columns(domain)
    if checkpoint < 0:
        return []
    parts = [name for name in files if _checkpoint_version(name) == checkpoint]
    domain = _clustering_domain(action for part in parts for action in _checkpoint_actions(log, part))
    return [] if domain is None else _domain_columns(domain)


def change_feed_start(log: FileSystem, version: int) -> int:
    """The first version from which the change feed runs unbroken to `version`.

    delta-rs refuses a range that includes a version without the feed, and the fix we advise for
    a feed that is off (ALTER TABLE ... SET TBLPROPERTIES) leaves such versions behind. A version
    lives under the newest metadata at or before it, so the feed starts at the metadata commit
    that follows the newest one with the feed off (past `version` when the feed is off now).
    """
    commits = sorted(v for v in map(_commit_version, _names(log)) if v is not None and v <= version)
    newer_metadata = version + 1
    for commit in reversed(commits):
        for action in _json_actions(log, f"{commit:020d}.json", "metaData"):
            if not is_true(action["metaData"].get("configuration", {}).get(CHANGE_DATA_FEED_PROPERTY)):
                return newer_metadata
            newer_metadata = commit
    return commits[0]


def committed_rows(log: FileSystem, app_id: str, version: int) -> int | None:
    """Rows written by the commit that recorded the transaction (`app_id`, `version`), from its metrics.

    An idempotent append that Delta skipped as a replay finds the earlier commit that wrote the
    batch. None when the log no longer holds that commit (cleaned up after its retention).
    """
    commits = sorted((v for v in map(_commit_version, _names(log)) if v is not None), reverse=True)
    for commit in commits:
        actions = list(_json_actions(log, f"{commit:020d}.json", "txn", "commitInfo"))
        if any(a.get("txn", {}).get("appId") == app_id and a["txn"]["version"] == version for a in actions):
            info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
            return int(info["operationMetrics"]["numOutputRows"])
    return None


def transaction_writers(log: FileSystem, prefix: str) -> set[str]:
    """The idempotent writers (`txnAppId`) starting with `prefix` that the table's snapshot remembers:
    those in its newest checkpoint and in the commits after it."""
    files = _names(log)
    checkpoint = max((v for v in map(_checkpoint_version, files) if v is not None), default=-1)
    writers = set()
    for name in files:
        commit = _commit_version(name)
        if (commit is not None and commit > checkpoint) or (
            name.endswith(".json") and _checkpoint_version(name) == checkpoint
        ):
            writers |= {action["txn"]["appId"] for action in _json_actions(log, name, "txn")}
        elif _checkpoint_version(name) == checkpoint:
            parquet = _parquet(log, name)
            if "txn" in parquet.schema_arrow.names:
                writers |= {txn["appId"] for txn in parquet.read(columns=["txn"]).column("txn").to_pylist() if txn}
    return {writer for writer in writers if writer.startswith(prefix)}


_COMMIT_FILE = re.compile(r"^(\d{20})\.json$")
# Classic `<v>.checkpoint.parquet`, multi-part `<v>.checkpoint.<i>.<n>.parquet`, v2 `<v>.checkpoint.<uuid>.json`.
_CHECKPOINT_FILE = re.compile(r"^(\d{20})\.checkpoint(?:\.[^.]+)*\.(?:parquet|json)$")


def files_by_version(log: FileSystem) -> dict[int, set[str]]:
    """For each commit the log still holds, the data and change-data files its actions name (added, removed or
    written as change data), relative to the table's folder. A reader of that version's changes reads them."""
    named = {}
    for commit in sorted(v for v in map(_commit_version, _names(log)) if v is not None):
        actions = _json_actions(log, f"{commit:020d}.json", *FILE_ACTIONS)
        named[commit] = {unquote(action[kind]["path"]) for action in actions for kind in FILE_ACTIONS if kind in action}
    return named


def _checkpoint_version(name: str) -> int | None:
    match = _CHECKPOINT_FILE.match(name)
    return int(match[1]) if match else None


def _commit_version(name: str) -> int | None:
    match = _COMMIT_FILE.match(name)
    return int(match[1]) if match else None


def _names(log: FileSystem) -> list[str]:
    return [info.base_name for info in log.get_file_info(FileSelector(""))]


def _json_actions(log: FileSystem, name: str, *kinds: str):
    with log.open_input_stream(name) as stream:
        lines = stream.read().decode("utf-8").splitlines()
    # Commits can hold thousands of file actions; parse only the lines of the wanted kinds.
    wanted = [f'"{kind}"' for kind in kinds]
    actions = (json.loads(line) for line in lines if any(marker in line for marker in wanted))
    yield from (action for action in actions if any(kind in action for kind in kinds))


def _parquet(log: FileSystem, name: str) -> pq.ParquetFile:
    return pq.ParquetFile(log.open_input_file(name))


def _checkpoint_actions(log: FileSystem, name: str):
    if name.endswith(".json"):
        yield from _json_actions(log, name, "domainMetadata")
        return
    parquet = _parquet(log, name)
    if "domainMetadata" not in parquet.schema_arrow.names:
        return
    for domain in parquet.read(columns=["domainMetadata"]).column("domainMetadata").to_pylist():
        if domain is not None:
            yield {"domainMetadata": domain}


def _clustering_domain(actions) -> dict | None:
    found = None
    for action in actions:
        domain = action.get("domainMetadata")
        if domain and domain.get("domain") == CLUSTERING_DOMAIN:
            found = domain
    return found


def _domain_columns(domain: dict) -> list[str]:
    if domain.get("removed"):
        return []
    column_paths = json.loads(domain["configuration"]).get("clusteringColumns", [])
    return [".".join(parts) for parts in column_paths]
