"""Where DLQ tables live, what they look like, and how they are created."""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import urlparse

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from deltalake.fs import DeltaStorageHandler
from pyarrow.fs import FileInfo, FileSelector, FileSystem, FileType, PyFileSystem, SubTreeFileSystem

from quarantine_assets.config.models import claims_table, files_table, metrics_table, outbox_table
from quarantine_assets.engine.lake.dlq_schema import (
    CLAIMS_COLUMNS,
    CLUSTERING_COLUMN,
    FILES_COLUMNS,
    FREE_TEXT_COLUMNS,
    INBOX_CONTEXT_COLUMNS,
    INBOX_CORE_COLUMNS,
    METRICS_COLUMNS,
    OUTBOX_CONTEXT_COLUMNS,
    OUTBOX_CORE_COLUMNS,
)

# A transaction id is kept this long: a step retried later than that could append its row again.
_TRANSACTION_RETENTION = "interval 30 days"
STATS_COLUMNS_PROPERTY = "delta.dataSkippingStatsColumns"
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


def inbox_ddl(warehouse: Warehouse, inbox_table: str, core: bool = False) -> str:
    columns = INBOX_CORE_COLUMNS | ({} if core else INBOX_CONTEXT_COLUMNS)
    return _ddl(warehouse.path(inbox_table), columns, INBOX_PROPERTIES, core)


def outbox_ddl(warehouse: Warehouse, inbox_table: str, core: bool = False) -> str:
    columns = OUTBOX_CORE_COLUMNS | ({} if core else OUTBOX_CONTEXT_COLUMNS)
    return _ddl(warehouse.path(outbox_table(inbox_table)), columns, OUTBOX_PROPERTIES, core)


def claims_ddl(warehouse: Warehouse, inbox_table: str) -> str:
    """Plain Delta, no deletion vectors: delta-rs reads it without a JVM."""
    columns = ",\n".join(f"  {name} {sql_type}" for name, sql_type in CLAIMS_COLUMNS.items())
    table = table_reference(warehouse.path(claims_table(inbox_table)))
    return f"CREATE TABLE IF NOT EXISTS {table} (\n{columns}\n) USING DELTA"


def metrics_ddl(warehouse: Warehouse, inbox_table: str) -> str:
    columns = ",\n".join(f"  {name} {sql_type}" for name, sql_type in METRICS_COLUMNS.items())
    reference = table_reference(warehouse.path(metrics_table(inbox_table)))
    return (
        f"CREATE TABLE IF NOT EXISTS {reference} (\n{columns}\n) USING DELTA\n"
        f"TBLPROPERTIES ('delta.setTransactionRetentionDuration' = '{_TRANSACTION_RETENTION}')"
    )


def files_ddl(warehouse: Warehouse, inbox_table: str) -> str:
    columns = ",\n".join(f"  {name} {sql_type}" for name, sql_type in FILES_COLUMNS.items())
    reference = table_reference(warehouse.path(files_table(inbox_table)))
    return f"CREATE TABLE IF NOT EXISTS {reference} (\n{columns}\n) USING DELTA"


def missing_context_columns(columns: set[str], context_columns: dict[str, str]) -> dict[str, str]:
    return {name: sql_type for name, sql_type in context_columns.items() if name not in columns}
