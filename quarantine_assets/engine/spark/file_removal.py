"""Files a DLQ table no longer holds rows in but that still hold some rows: deleted once no stream still reads them.

A Delta DELETE only hides rows. The files it leaves behind, the rows' earlier images (before a fix, say) and
their change data stay, for time travel and for the streams that read the table's changes, until a VACUUM
past the table's retention (7 days by default) removes them with every other unreferenced file. Here,
`REORG TABLE ... APPLY (PURGE)` first rewrites the files whose deletion vectors hide rows; then each file that
no longer belongs to the table and holds one of the rows to remove is deleted, once no stream of the warehouse
still has to read it (the outbox stream reads the inbox's change feed, the recycled stream the outbox). A file
a stream has yet to read (first named in a version the stream has not reached) is pending: once that step has
run, the same command again removes it. Only files a commit named are touched, so a file a writer has not
committed yet is never deleted under it. Time travel to a version whose files were removed fails: that is the
point.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from urllib.parse import unquote, urlparse

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from quarantine_assets import codes
from quarantine_assets.engine.lake.delta_log import files_by_version
from quarantine_assets.engine.lake.dlq_schema import CLUSTERING_COLUMN, KEY
from quarantine_assets.engine.lake.tables import CHECKPOINTS, Warehouse, is_url, table_reference
from quarantine_assets.engine.spark.commits import retry_on_conflict
from quarantine_assets.engine.spark.payload_types import PAYLOAD
from quarantine_assets.errors import OperatorError

SOURCE = CLUSTERING_COLUMN
# What every data and change-data file of a DLQ table holds, whatever columns were added since it was written.
FILE_COLUMNS = f"{KEY} STRING, {SOURCE} STRING, {PAYLOAD} VARIANT"
_FILE = "_file"
COLUMN_MAPPING = "delta.columnMapping.mode"

# The rows to remove among the rows of a DLQ table or of its files, given with the other columns to keep.
RowsOf = Callable[..., DataFrame]


@dataclass(frozen=True)
class FileRemoval:
    files_removed: int
    files_pending: dict[str, int] = field(default_factory=dict)  # stream (its checkpoint): files it has yet to read

    @classmethod
    def of_tables(cls, removals: Iterable[FileRemoval]) -> FileRemoval:
        """The removals from several tables, added up."""
        removed, pending = 0, defaultdict(int)
        for removal in removals:
            removed += removal.files_removed
            for stream, count in removal.files_pending.items():
                pending[stream] += count
        return cls(removed, dict(pending))


def remove_files_holding(
    spark: SparkSession, warehouse: Warehouse, table: str, rows_of: RowsOf, *, dry_run: bool
) -> FileRemoval:
    """Delete the files that no longer belong to `table` and hold rows `rows_of` picks, but those a stream of
    the warehouse has yet to read; first purges the rows deletion vectors hide into new files."""
    path, folder = warehouse.path(table), warehouse.folder(table)
    table_id = readable_table_id(spark, warehouse, table)
    if not dry_run:
        retry_on_conflict(lambda: spark.sql(f"REORG TABLE {table_reference(path)} APPLY (PURGE)"))
    named = files_by_version(warehouse.log(table))
    latest = max(named)
    snapshot = spark.read.format("delta").option("versionAsOf", latest).load(path)
    live = {_relative(uri, path) for uri in snapshot.inputFiles()}
    on_disk = set(warehouse.files_under(folder))
    former = sorted(name for name in set().union(*named.values()) - live if f"{folder}/{name}" in on_disk)
    if not former:
        return FileRemoval(0)
    raw = spark.read.schema(FILE_COLUMNS).parquet(*[f"{path}/{name}" for name in former])
    picked = rows_of(raw.withColumn(_FILE, F.input_file_name()), _FILE)
    holding = {_relative(row[_FILE], path) for row in picked.select(_FILE).distinct().collect()}
    # A stream reads a file in the version that first names it; a later one that names it again (with a deletion
    # vector, say) brings no new rows.
    first_named = {name: version for version, names in sorted(named.items(), reverse=True) for name in names}
    still_read = {
        stream: {name for name in holding if first_named[name] >= first}
        for stream, first in streams_reading(warehouse, table_id).items()
    }
    removable = sorted(holding - set().union(*still_read.values()))
    if not dry_run:
        for name in removable:
            file = PurePosixPath(folder, name)
            checksum = file.with_name(f".{file.name}.crc").as_posix()
            for leftover in (file.as_posix(), checksum):
                if leftover in on_disk:
                    warehouse.remove_file(leftover)
    return FileRemoval(len(removable), {stream: len(names) for stream, names in still_read.items() if names})


def streams_reading(warehouse: Warehouse, table_id: str) -> dict[str, int]:
    """Each stream of the warehouse that reads the table (its checkpoint's offsets name the table's id): the first
    version it has yet to read, 0 when that cannot be told."""
    batches: dict[str, dict[str, set[int]]] = defaultdict(lambda: {"offsets": set(), "commits": set()})
    for name in warehouse.files_under(CHECKPOINTS):
        folder, _, batch = name.rpartition("/")
        stream, _, kind = folder.rpartition("/")
        if kind in ("offsets", "commits") and batch.isdigit():
            batches[stream][kind].add(int(batch))
    first_unread = {}
    for stream, kinds in batches.items():
        committed = kinds["commits"] & kinds["offsets"]
        if not kinds["offsets"]:
            continue
        # The offsets of a stream's last committed batch are where its next batch starts.
        lines = warehouse.read_text(f"{stream}/offsets/{max(committed or kinds['offsets'])}").splitlines()
        for offset in map(json.loads, lines[2:]):
            if isinstance(offset, dict) and offset.get("reservoirId") == table_id:
                # A first batch not committed, or one within the snapshot a stream starts from, reads older files.
                unsure = not committed or offset.get("isStartingVersion", False)
                first_unread[stream.removeprefix(f"{CHECKPOINTS}/")] = 0 if unsure else offset["reservoirVersion"]
    return first_unread


def readable_table_id(spark: SparkSession, warehouse: Warehouse, table: str) -> str:
    """The table's id, once its files are known to name columns as the table does: a table that maps its columns
    to physical names is refused, since reading its files by name would find nothing. Asked before deleting rows."""
    detail = spark.sql(f"DESCRIBE DETAIL {table_reference(warehouse.path(table))}").select("id", "properties").first()
    mapping = (detail["properties"] or {}).get(COLUMN_MAPPING, "none")
    if mapping != "none":
        raise OperatorError(
            codes.ERASURE_UNREADABLE_FILES,
            f"{table} maps its columns ({COLUMN_MAPPING} = {mapping}): its files name columns by physical names, "
            "so the files that hold the rows cannot be found. Nothing was deleted",
            field=table,
        )
    return detail["id"]


def _relative(uri: str, table_path: str) -> str:
    """A file Spark names by its URI, as the log names it: relative to the table's folder."""
    folder = urlparse(table_path).path if is_url(table_path) else table_path
    return PurePosixPath(unquote(urlparse(uri).path)).relative_to(folder).as_posix()
