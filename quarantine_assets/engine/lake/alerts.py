"""What a DLQ's alerts notice, read with delta-rs (no JVM): a reason never seen before for a source, rows reaching
`exhausted`, and a backlog older than its threshold. Each is noticed once: what was seen and sent is kept in a
cursor, which the sensor stores, so a restart does not repeat an alert.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from pydantic import BaseModel

from quarantine_assets.engine.lake.dlq_schema import ERRORS, FAILED_RULES, KEY, SOURCE_FILE, SOURCE_TABLE, STATUS
from quarantine_assets.engine.lake.statuses import EXHAUSTED, POST_IMAGES, QUARANTINED

NEW_REASON = "new_reason"
EXHAUSTED_ROWS = "exhausted_rows"
STALE_BACKLOG = "stale_backlog"
CHANGES_REMOVED = "changes_removed"
FILE_SET_ASIDE = "file_set_aside"


@dataclass(frozen=True)
class Alert:
    kind: str  # NEW_REASON, EXHAUSTED_ROWS, STALE_BACKLOG, CHANGES_REMOVED or FILE_SET_ASIDE
    dlq_table: str
    source_table: str | None
    message: str
    rows: int
    reason: str | None = None

    def as_json(self) -> dict:
        return {
            "kind": self.kind,
            "dlq_table": self.dlq_table,
            "source_table": self.source_table,
            "reason": self.reason,
            "rows": self.rows,
            "message": self.message,
        }


class AlertCursor(BaseModel):
    """The inbox version read up to, the reasons seen per source, the sources whose backlog is stale now, and the
    keys of the files set aside and not yet redriven (None until the sensor first looks: those are not news)."""

    version: int
    seen: dict[str, list[str]]
    stale: list[str] = []
    files: list[str] | None = None


def first_cursor(inbox: DeltaTable, metrics: DeltaTable | None) -> AlertCursor:
    """Where a new sensor starts: at the inbox's newest version, with every reason the metrics table recorded as
    seen, so nothing old is news. (The inbox's own rows are not read: delta-rs does not read its deletion vectors.)"""
    seen: dict[str, set[str]] = {}
    if metrics is not None:
        rows = metrics.to_pyarrow_table(columns=["source_table", "failures_by_code"]).to_pylist()
        for row in rows:
            codes = {code for code, count in row["failures_by_code"] or [] if count}
            seen.setdefault(row["source_table"], set()).update(codes)
    return AlertCursor(version=inbox.version(), seen={source: sorted(codes) for source, codes in seen.items()})


def inbox_alerts(inbox: DeltaTable, dlq_table: str, cursor: AlertCursor) -> tuple[list[Alert], AlertCursor]:
    """New reasons and rows gone `exhausted` in the inbox commits after the cursor's version."""
    latest = inbox.version()
    if latest <= cursor.version:
        return [], cursor
    column = _reason_column(inbox)
    try:
        changes = _without_string_views(
            pa.table(
                inbox.load_cdf(
                    starting_version=cursor.version + 1,
                    ending_version=latest,
                    columns=[SOURCE_TABLE, STATUS, "_change_type", column],
                )
            )
        )
    except pa.ArrowInvalid as error:
        if "not found" not in str(error):
            raise
        # An erasure or a VACUUM removed files these versions' changes are read from: they can never be read
        # again, so the sensor says so once and goes on from the newest version rather than fail every tick.
        message = (
            f"{dlq_table}: the changes of versions {cursor.version + 1} to {latest} can no longer be read (an "
            "erasure or a VACUUM removed their files); new reasons and exhausted rows committed there were not checked"
        )
        return [Alert(CHANGES_REMOVED, dlq_table, None, message, 0)], cursor.model_copy(update={"version": latest})
    images = changes.filter(pc.is_in(changes["_change_type"], pa.array(POST_IMAGES)))
    alerts, seen = [], {source: set(reasons) for source, reasons in cursor.seen.items()}
    for source, reasons in _reason_counts(images, column).items():
        for reason, rows in sorted(reasons.items()):
            if reason not in seen.setdefault(source, set()):
                seen[source].add(reason)
                message = f"{source}: a new reason, {reason}, quarantined {rows} row(s) in {dlq_table}"
                alerts.append(Alert(NEW_REASON, dlq_table, source, message, rows, reason))
    exhausted = images.filter(pc.equal(images[STATUS], EXHAUSTED))
    sources = exhausted[SOURCE_TABLE].to_pylist()
    for source in sorted(set(sources)):
        rows = sources.count(source)
        message = f"{source}: {rows} row(s) reached exhausted in {dlq_table}; they will not be retried"
        alerts.append(Alert(EXHAUSTED_ROWS, dlq_table, source, message, rows))
    updated = AlertCursor(version=latest, seen={s: sorted(r) for s, r in seen.items()}, stale=cursor.stale)
    return alerts, updated


def backlog_alerts(
    metrics: DeltaTable, dlq_table: str, limit_seconds: dict[str, float], cursor: AlertCursor
) -> tuple[list[Alert], AlertCursor]:
    """A source whose oldest quarantined row, as its latest metrics row says, is older than its limit: noticed
    once, and again only after its backlog has been within the limit."""
    rows = metrics.to_pyarrow_table(columns=["source_table", "recorded_at", "oldest_quarantined_seconds"])
    latest: dict[str, float | None] = {}
    for source, _, age in sorted(zip(*(rows[name].to_pylist() for name in rows.column_names), strict=True)):
        latest[source] = age
    alerts, stale = [], []
    for source, age in sorted(latest.items()):
        limit = limit_seconds.get(source)
        if limit is None or age is None or age <= limit:
            continue
        stale.append(source)
        if source not in cursor.stale:
            hours = age / 3600
            message = (
                f"{source}: its oldest quarantined row in {dlq_table} is {hours:.1f} h old, over {limit / 3600:g} h"
            )
            alerts.append(Alert(STALE_BACKLOG, dlq_table, source, message, 0))
    return alerts, cursor.model_copy(update={"stale": stale})


def file_alerts(files: DeltaTable | None, dlq_table: str, cursor: AlertCursor) -> tuple[list[Alert], AlertCursor]:
    """Each source file set aside whole since the cursor, once; a sensor's first look takes those there as seen."""
    records = [] if files is None else files.to_pyarrow_table().to_pylist()
    waiting = {record[KEY]: record for record in records if record[STATUS] == QUARANTINED}
    alerts = []
    for key, record in sorted(waiting.items()):
        if cursor.files is None or key in cursor.files:
            continue
        error = record[ERRORS][0]
        message = (
            f"{record[SOURCE_TABLE]}: source file {record[SOURCE_FILE]} could not be read "
            f"({error['code']}: {error['message']}) and was set aside whole in {dlq_table}; fix or replace it, then "
            "redrive-file it"
        )
        alerts.append(Alert(FILE_SET_ASIDE, dlq_table, record[SOURCE_TABLE], message, 0, error["code"]))
    return alerts, cursor.model_copy(update={"files": sorted(waiting)})


def _reason_column(inbox: DeltaTable) -> str:
    """`_dlq_errors`, whose codes tell parse reasons apart; the reference's `_dlq_failed_rules` where it is missing."""
    names = {field.name for field in inbox.schema().fields}
    return ERRORS if ERRORS in names else FAILED_RULES


def _reason_counts(rows: pa.Table, column: str) -> dict[str, dict[str, int]]:
    """Rows per source and reason: a row counts under each of its reasons."""
    failures = rows[column].combine_chunks() if rows.num_rows else pa.array([], rows.schema.field(column).type)
    reasons = pc.struct_field(pc.list_flatten(failures), "code" if column == ERRORS else "name")
    sources = pc.take(rows[SOURCE_TABLE], pc.list_parent_indices(failures))
    pairs = pa.table({"source": sources, "reason": reasons})
    counts: dict[str, dict[str, int]] = {}
    for row in pairs.group_by(["source", "reason"]).aggregate([([], "count_all")]).to_pylist():
        counts.setdefault(row["source"], {})[row["reason"]] = row["count_all"]
    return counts


def _without_string_views(table: pa.Table) -> pa.Table:
    """delta-rs hands out string views, which not every Arrow kernel takes (filter, take): plain strings instead."""
    return table.cast(pa.schema([field.with_type(_plain(field.type)) for field in table.schema]))


def _plain(data_type: pa.DataType) -> pa.DataType:
    if pa.types.is_string_view(data_type):
        return pa.string()
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type) or pa.types.is_list_view(data_type):
        return pa.list_(_plain(data_type.value_type))
    if pa.types.is_struct(data_type):
        return pa.struct([field.with_type(_plain(field.type)) for field in data_type])
    return data_type
