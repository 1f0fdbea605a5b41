"""Where DLQ tables live, what they look like, and how they are created."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from deltalake.fs import DeltaStorageHandler
from pyarrow.fs import FileInfo, FileSelector, FileSystem, FileType, PyFileSystem, SubTreeFileSystem

from quarantine_assets.config.models import claims_table, files_table, metrics_table, outbox_table

if TYPE_CHECKING:  # no pyspark at import: the delta-rs checks and sensors share this module
    from pyspark.sql import SparkSession

# The reference's columns, verbatim (Lakehouse Plumber's DDL), then ours: the context a quarantine record must carry.
INBOX_CORE_COLUMNS = {
    "_dlq_sk": "STRING NOT NULL",
    "_dlq_source_table": "STRING NOT NULL",
    "_dlq_status": "STRING NOT NULL",
    "_dlq_timestamp": "TIMESTAMP NOT NULL",
    "_dlq_failed_rules": "ARRAY<STRUCT<name: STRING, rule: STRING>>",
    "_dlq_rescued_data": "STRING",
    "_row_data": "VARIANT NOT NULL",
}
INBOX_CONTEXT_COLUMNS = {
    "_dlq_action": "STRING",  # owning action: pipeline/flowgroup/action
    "_dlq_run_id": "STRING",  # the Dagster run that wrote the row
    "_dlq_config_version": "STRING",  # hash of the flowgroup and expectations that judged it
    "_dlq_batch_id": "BIGINT",  # the source stream's micro-batch
    "_dlq_source_file": "STRING",  # the file the row came from (file sources)
    # where in that file: the byte its split starts at (0 unless Spark split the file), the record's index there
    "_dlq_source_position": "STRUCT<split_start: BIGINT, record: BIGINT>",
    "_dlq_source_version": "BIGINT",  # a Delta source's version whose snapshot holds the row's data file
    "_dlq_attempt": "INT",  # 1 on first quarantine, +1 each failed recycle
    "_dlq_reason": "STRING",  # why a row was discarded or gave up
    "_dlq_resolved_at": "TIMESTAMP",  # when the row landed in the validated table, was discarded or exhausted
    "_dlq_updated_at": "TIMESTAMP",
    "_dlq_updated_by": "STRING",
    "_dlq_resolved_by": "STRING",  # who resolved it: the operator who fixed or discarded it, or `recycled`
    "_dlq_arrived_at": "TIMESTAMP",  # when the row reached the source: its file's modification time
    # per failed rule: expectation or parse, a stable code, and what was wrong in words
    "_dlq_errors": "ARRAY<STRUCT<type: STRING, code: STRING, message: STRING>>",
}
OUTBOX_CORE_COLUMNS = {
    "_dlq_sk": "STRING NOT NULL",
    "_dlq_source_table": "STRING NOT NULL",
    "_row_data": "VARIANT NOT NULL",
    "_dlq_recycled_at": "TIMESTAMP NOT NULL",
}
OUTBOX_CONTEXT_COLUMNS = {
    "_dlq_attempt": "INT",  # with the key, lets a re-fixed row recycle again
    "_dlq_action": "STRING",
    "_dlq_fixed_at": "TIMESTAMP",  # the inbox image sent: its _dlq_updated_at, set by the operator's last fix
}
# What a DLQ lacking a context column loses (a table created from Lakehouse Plumber's DDL lacks them all).
# Nothing fails without them; the schema check and every run say what is lost, and
# `quarantine-assets upgrade-tables` adds them in place.
INBOX_CONTEXT_LOSSES = {
    "_dlq_action": "rows do not say which action wrote them, so single_source_owner cannot verify ownership",
    "_dlq_run_id": "rows do not name the run that wrote or last moved them",
    "_dlq_config_version": "rows do not say which version of the config judged them",
    "_dlq_batch_id": "rows do not name the source micro-batch they came from",
    "_dlq_source_file": "rows of file sources do not name their file",
    "_dlq_source_position": "rows do not say where in their file they were, so finding the original takes a search",
    "_dlq_source_version": "rows of Delta sources name no version that holds them: once the source is compacted, "
    "finding the original takes a search of its history",
    "_dlq_attempt": "recycle attempts are not counted, so quarantine.max_attempts cannot be enforced",
    "_dlq_reason": "the reason for a discard or for giving up on a row is not kept",
    "_dlq_resolved_at": "landings are not recorded: a reset recycled checkpoint could land a row twice",
    "_dlq_updated_at": "the time of a row's last change is not kept",
    "_dlq_updated_by": "who changed a row last is not kept, and landings are not recorded",
    "_dlq_resolved_by": "rows do not say who resolved them (fixed, discarded)",
    "_dlq_arrived_at": "rows of file sources do not say when their file arrived",
    "_dlq_errors": "failures carry no message and records that did not parse no reason code",
}
OUTBOX_CONTEXT_LOSSES = {
    "_dlq_attempt": "a row fixed again after a failed recycle looks like a duplicate to outbox_keys_unique",
    "_dlq_action": "outbox rows do not say which action sent them",
    "_dlq_fixed_at": "outbox rows do not say which fix of their row they carry",
}
# Who owns each slice of a DLQ (see engine/claims.py).
CLAIMS_COLUMNS = {
    "_dlq_source_table": "STRING NOT NULL",
    "_dlq_action": "STRING NOT NULL",  # the owning action: pipeline/flowgroup/action
    "_dlq_claimed_at": "TIMESTAMP NOT NULL",
    "_dlq_claimed_by": "STRING",  # who claimed or handed it over: a run, or an operator
}
METRICS_COLUMNS = {
    "run_id": "STRING NOT NULL",
    "step": "STRING NOT NULL",  # split, outbox, recycled or purge
    "action": "STRING NOT NULL",  # pipeline/flowgroup/action
    "source_table": "STRING NOT NULL",
    "recorded_at": "TIMESTAMP NOT NULL",
    "rows": "MAP<STRING, BIGINT>",  # by outcome: read, validated, quarantined, sent, landed, purged, ...
    "failures_by_rule": "MAP<STRING, BIGINT>",
    "failures_by_code": "MAP<STRING, BIGINT>",  # the codes of `_dlq_errors`: rule names and parse codes
    "backlog": "MAP<STRING, BIGINT>",  # the source's inbox rows by status, after the step
    "oldest_quarantined_seconds": "DOUBLE",
}
# A source file that cannot be read with its source's format and schema, set aside whole (engine/file_quarantine.py).
FILES_COLUMNS = {
    "_dlq_sk": "STRING NOT NULL",  # the file in its batch: source, stream, batch and the file's URI
    "_dlq_source_table": "STRING NOT NULL",
    "_dlq_status": "STRING NOT NULL",  # quarantined, then redriven
    "_dlq_timestamp": "TIMESTAMP NOT NULL",  # when it was set aside
    "_dlq_source_file": "STRING NOT NULL",  # the file's URI, as the split's stream names it
    "_dlq_errors": "ARRAY<STRUCT<type: STRING, code: STRING, message: STRING>>",  # type `file`
    "_dlq_file_head": "STRING",  # its first lines; NULL where the action declares sensitive columns
    "_dlq_file_size": "BIGINT",
    "_dlq_file_modified_at": "TIMESTAMP",
    "_dlq_action": "STRING",
    "_dlq_run_id": "STRING",
    "_dlq_stream_id": "STRING",
    "_dlq_batch_id": "BIGINT",
    "_dlq_resolved_at": "TIMESTAMP",  # when its rows were read again by redrive-file
    "_dlq_resolved_by": "STRING",  # the run or operator that redrove it
    "_dlq_redriven_rows": "MAP<STRING, BIGINT>",  # what the redrive wrote: validated, quarantined
}
# A transaction id is kept this long: a step retried later than that could append its row again.
_TRANSACTION_RETENTION = "interval 30 days"
UPGRADE_TABLES_COMMAND = "quarantine-assets upgrade-tables"
STATS_COLUMNS_PROPERTY = "delta.dataSkippingStatsColumns"
# Text from the source (a malformed record's, its file's name) or from people (reasons, user names).
FREE_TEXT_COLUMNS = ("_dlq_rescued_data", "_dlq_source_file", "_dlq_reason", "_dlq_updated_by", "_dlq_resolved_by")
CLUSTERING_COLUMN = "_dlq_source_table"
CHECKPOINTS = "_checkpoints"  # every stream's checkpoint, under the warehouse root
INBOX_PROPERTIES = {
    "delta.enableChangeDataFeed": "true",
    "delta.enableRowTracking": "true",
    "delta.enableDeletionVectors": "true",
}
OUTBOX_PROPERTIES = {
    "delta.enableRowTracking": "true",
    "delta.enableDeletionVectors": "true",
}


class Warehouse:
    """Maps `catalog.schema.table` to `<root>/<catalog>/<schema>/<table>`: no metastore needed.

    The root is a local folder or an object-store URL (`s3://`, `abfss://`, `gs://`, `file://`);
    `storage_options` are delta-rs's (dagster-deltalake's storage configs give them), for the
    reads without a JVM. Spark takes the same ones as Hadoop settings (see `session.py`).
    """

    def __init__(self, root: str | os.PathLike, storage_options: Mapping[str, str] | None = None):
        root = os.fspath(root)
        self.root = root.rstrip("/") if is_url(root) else os.path.abspath(root)
        self.storage_options = dict(storage_options or {})

    def __repr__(self) -> str:  # no storage options: they hold secrets
        return f"Warehouse({self.root!r})"

    def path(self, qualified_name: str) -> str:
        return f"{self.root}/{self.folder(qualified_name)}"

    def folder(self, qualified_name: str) -> str:
        """The table's folder, relative to the root."""
        catalog, schema, table = qualified_name.split(".")
        return f"{catalog}/{schema}/{table}"

    def checkpoint(self, action_key: str, stream: str) -> str:
        return f"{self.root}/{checkpoint_folder(action_key, stream)}"

    def delta_table(self, qualified_name: str) -> DeltaTable:
        """The table read with delta-rs; raises `TableNotFoundError` when there is none."""
        return DeltaTable(self.path(qualified_name), storage_options=self.storage_options)

    def is_delta_table(self, qualified_name: str) -> bool:
        try:
            return DeltaTable.is_deltatable(self.path(qualified_name), storage_options=self.storage_options)
        except OSError:  # a path the file system cannot name (too long, say) holds no table
            return False

    def log(self, qualified_name: str) -> FileSystem:
        """The files of the table's `_delta_log`, through delta-rs's object store."""
        table = PyFileSystem(DeltaStorageHandler(self.path(qualified_name), self.storage_options))
        return SubTreeFileSystem("_delta_log", table)

    def checkpoint_started(self, action_key: str, stream: str) -> bool:
        """A stream's checkpoint holds `metadata` (its id) from its first batch on."""
        return self.holds_file(f"{checkpoint_folder(action_key, stream)}/metadata")

    def remove_checkpoint(self, action_key: str, stream: str) -> None:
        self.remove_dir(checkpoint_folder(action_key, stream))

    def holds_file(self, relative_path: str) -> bool:
        files = self._files()
        return files is not None and files.get_file_info(relative_path).type == FileType.File

    def remove_dir(self, relative_path: str) -> None:
        """Everything under `relative_path`; nothing when it is not there."""
        files = self._files()
        if files is not None and files.get_file_info(relative_path).type == FileType.Directory:
            files.delete_dir(relative_path)

    def files_under(self, relative_path: str) -> list[str]:
        """The paths, relative to the root, of every file under `relative_path`, however deep; none when it is
        not there."""
        files = self._files()
        if files is None or files.get_file_info(relative_path).type != FileType.Directory:
            return []
        listing = files.get_file_info(FileSelector(relative_path, recursive=True))
        return [info.path for info in listing if info.type == FileType.File]

    def read_text(self, relative_path: str) -> str:
        return self._files().open_input_stream(relative_path).read().decode("utf-8")

    def remove_file(self, relative_path: str) -> None:
        self._files().delete_file(relative_path)

    def subfolders(self, relative_path: str) -> list[str]:
        """The names of the folders right under `relative_path`; none when it is not there."""
        return [info.base_name for info in self._listing(relative_path) if info.type == FileType.Directory]

    def read_texts(self, relative_path: str) -> list[str]:
        """The text of each data file of the folder Spark wrote at `relative_path` (not its markers or
        checksums); none when it is not there."""
        files = self._files()
        return [
            files.open_input_stream(info.path).read().decode("utf-8")
            for info in self._listing(relative_path)
            if info.type == FileType.File and not info.base_name.startswith(("_", "."))
        ]

    def _listing(self, relative_path: str) -> list[FileInfo]:
        files = self._files()
        if files is None or files.get_file_info(relative_path).type != FileType.Directory:
            return []
        return files.get_file_info(FileSelector(relative_path))

    def _files(self) -> FileSystem | None:
        """Everything under the root; None for a local root that does not exist yet."""
        try:
            return PyFileSystem(DeltaStorageHandler(self.root, self.storage_options))
        except TableNotFoundError:
            return None


def table_reference(path: str) -> str:
    """A Delta table by its path, quoted for SQL: a folder name may hold a backtick."""
    return "delta.`" + path.replace("`", "``") + "`"


def checkpoint_folder(action_key: str, stream: str) -> str:
    """A stream's checkpoint, relative to the warehouse root."""
    return f"{CHECKPOINTS}/{action_key}/{stream}"


def is_url(location: str) -> bool:
    """`s3://bucket/...` or `file:///...`; a Windows drive letter is not a scheme."""
    scheme = urlparse(location).scheme
    return len(scheme) > 1


def _ddl(path: str, columns: dict[str, str], properties: dict[str, str], core: bool) -> str:
    """`core`: Lakehouse Plumber's statement as it stands, without `USING DELTA` (our sessions make Delta the
    default)."""
    column_lines = ",\n".join(f"  {name} {sql_type}" for name, sql_type in columns.items())
    properties = properties if core else properties | {STATS_COLUMNS_PROPERTY: ",".join(stats_columns(columns))}
    property_lines = ",\n".join(f"  '{key}' = '{value}'" for key, value in properties.items())
    using = "" if core else "USING DELTA\n"
    return (
        f"CREATE TABLE IF NOT EXISTS {table_reference(path)} (\n{column_lines}\n)\n"
        f"{using}CLUSTER BY ({CLUSTERING_COLUMN})\nTBLPROPERTIES (\n{property_lines}\n)"
    )


def stats_columns(columns: dict[str, str]) -> list[str]:
    """The columns whose smallest and largest values the Delta log keeps per file: the keys, statuses and times
    that MERGE, purge and clustering skip files by. Not the text a row carries from its source or from a person,
    which the log would keep (its first 32 characters) after the row is erased from every data file."""
    return [
        name
        for name, sql_type in columns.items()
        if name not in FREE_TEXT_COLUMNS and not sql_type.startswith(("ARRAY", "MAP", "VARIANT"))
    ]


def inbox_ddl(warehouse: Warehouse, dlq_table: str, core: bool = False) -> str:
    columns = INBOX_CORE_COLUMNS | ({} if core else INBOX_CONTEXT_COLUMNS)
    return _ddl(warehouse.path(dlq_table), columns, INBOX_PROPERTIES, core)


def outbox_ddl(warehouse: Warehouse, dlq_table: str, core: bool = False) -> str:
    columns = OUTBOX_CORE_COLUMNS | ({} if core else OUTBOX_CONTEXT_COLUMNS)
    return _ddl(warehouse.path(outbox_table(dlq_table)), columns, OUTBOX_PROPERTIES, core)


def claims_ddl(warehouse: Warehouse, dlq_table: str) -> str:
    """Plain Delta, no deletion vectors: delta-rs reads it without a JVM."""
    columns = ",\n".join(f"  {name} {sql_type}" for name, sql_type in CLAIMS_COLUMNS.items())
    table = table_reference(warehouse.path(claims_table(dlq_table)))
    return f"CREATE TABLE IF NOT EXISTS {table} (\n{columns}\n) USING DELTA"


def metrics_ddl(warehouse: Warehouse, dlq_table: str) -> str:
    columns = ",\n".join(f"  {name} {sql_type}" for name, sql_type in METRICS_COLUMNS.items())
    reference = table_reference(warehouse.path(metrics_table(dlq_table)))
    return (
        f"CREATE TABLE IF NOT EXISTS {reference} (\n{columns}\n) USING DELTA\n"
        f"TBLPROPERTIES ('delta.setTransactionRetentionDuration' = '{_TRANSACTION_RETENTION}')"
    )


def files_ddl(warehouse: Warehouse, dlq_table: str) -> str:
    columns = ",\n".join(f"  {name} {sql_type}" for name, sql_type in FILES_COLUMNS.items())
    reference = table_reference(warehouse.path(files_table(dlq_table)))
    return f"CREATE TABLE IF NOT EXISTS {reference} (\n{columns}\n) USING DELTA"


def missing_context_columns(columns: set[str], context_columns: dict[str, str]) -> dict[str, str]:
    return {name: sql_type for name, sql_type in context_columns.items() if name not in columns}


def upgrade_dlq_tables(spark: SparkSession, warehouse: Warehouse, dlq_table: str) -> dict[str, list[str]]:
    """Add the context columns an inbox or outbox lacks, in place: `ALTER TABLE ... ADD COLUMNS` rewrites no data."""
    added = {}
    for table, context_columns in (
        (dlq_table, INBOX_CONTEXT_COLUMNS),
        (outbox_table(dlq_table), OUTBOX_CONTEXT_COLUMNS),
    ):
        missing = missing_context_columns(set(warehouse.delta_table(table).schema().to_arrow().names), context_columns)
        if missing:
            columns = ", ".join(f"{name} {sql_type}" for name, sql_type in missing.items())
            spark.sql(f"ALTER TABLE {table_reference(warehouse.path(table))} ADD COLUMNS ({columns})")
        added[table] = list(missing)
    return added


def create_dlq_tables(spark: "SparkSession", warehouse: Warehouse, dlq_table: str) -> None:
    """Idempotent; a table that exists is left as it is, without asking Spark (delta-rs reads its log)."""
    tables = (
        (dlq_table, inbox_ddl),
        (outbox_table(dlq_table), outbox_ddl),
        (claims_table(dlq_table), claims_ddl),
        (metrics_table(dlq_table), metrics_ddl),
        (files_table(dlq_table), files_ddl),
    )
    for table, ddl in tables:
        if not warehouse.is_delta_table(table):
            spark.sql(ddl(warehouse, dlq_table))
