"""Where a file source's rejected record is in its file, as a line number and a byte offset: what an
operator opens the file at.

The split keeps the record's index among the records Spark read from its split of the file
(`_dlq_source_position`). This reads the file up to that record, with no Spark, by the rules Spark's line
reader and its CSV and JSON readers follow: lines end at `\\n`, `\\r\\n` or `\\r`; a split that does not start
the file begins after the first line end at or past its start; JSON and CSV skip blank lines, CSV also
comment lines and, at the start of a file, the header. In `multiLine` mode a CSV record may span lines.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import pyarrow.fs

from quarantine_assets import codes
from quarantine_assets.config.models import DeltaSource, FileSource
from quarantine_assets.engine.lake.delta_log import is_true
from quarantine_assets.engine.lake.dlq_schema import SOURCE_FILE, SOURCE_POSITION, SOURCE_VERSION
from quarantine_assets.errors import OperatorError

_LINE_END = re.compile(rb"\r\n|\r|\n")
_CHUNK = 1 << 20
# Reader options that change what a line or a record is in ways this does not follow.
_UNFOLLOWED_OPTIONS = ("lineSep", "encoding", "charset")


@dataclass(frozen=True)
class SourceLine:
    line: int  # from 1, the record's first line
    byte_offset: int  # of the record's first line, in the file as Spark read it (decompressed)
    text: str  # the record as the file holds it, its lines joined by "\n"


@dataclass(frozen=True)
class RecordLocation:
    label: str  # "source line" or "source row"
    where: str
    text: str | None  # a file record's text as the file holds it


def record_location(row: dict, source: FileSource | DeltaSource) -> RecordLocation | None:
    """Where an inbox row's record is, from its context columns: a file's line, or a Delta source's row at
    a version. None where the DLQ lacks those columns (a table made from Lakehouse Plumber's DDL) or the row
    has none."""
    position, file_url = row.get(SOURCE_POSITION), row.get(SOURCE_FILE)
    if not position or not file_url:
        return None
    if isinstance(source, FileSource):
        found = source_line(file_url, position["split_start"], position["record"], source)
        return RecordLocation("source line", f"{file_url}:{found.line} (byte {found.byte_offset})", found.text)
    if row.get(SOURCE_VERSION) is None:
        return None
    where = f"record {position['record']} of {file_url}, in version {row[SOURCE_VERSION]} of {source.table}"
    return RecordLocation("source row", where, None)


def source_line(file_url: str, split_start: int, record: int, source: FileSource) -> SourceLine:
    """The `record`-th record (from 0) of those Spark read from byte `split_start` of the file."""
    refusal = _refusal(source)
    if refusal:
        raise OperatorError(codes.NOT_LOCATABLE, f"{file_url}: {refusal}", field=SOURCE_POSITION)
    try:
        file_system, path = pyarrow.fs.FileSystem.from_uri(file_url)
        stream = file_system.open_input_stream(path, compression="detect")
    except (OSError, pyarrow.ArrowException) as error:
        raise OperatorError(codes.NOT_LOCATABLE, f"{file_url}: {error}", field=SOURCE_FILE) from error
    with stream:
        lines = _lines_after(_lines(stream), split_start)
        header = split_start == 0 and is_true(source.options.get("header"))
        if source.format == "csv" and is_true(source.options.get("multiLine")):
            records = _csv_records(lines, source.options)
        else:
            records = ([line] for line in lines if _is_record(line[2], source))
        for index, lines_of_record in enumerate(records, start=-1 if header else 0):
            if index == record:
                number, offset, _ = lines_of_record[0]
                text = "\n".join(line.decode("utf-8", errors="replace") for _, _, line in lines_of_record)
                return SourceLine(number, offset, text)
    raise OperatorError(
        codes.NOT_LOCATABLE,
        f"{file_url} holds fewer than {record + 1} records from byte {split_start}: it changed since the split",
        field=SOURCE_POSITION,
    )


def _refusal(source: FileSource) -> str | None:
    if source.format not in ("csv", "json"):
        return f"lines are only counted for csv and json files, not {source.format}"
    if source.format == "json" and is_true(source.options.get("multiLine")):
        return "a multiLine JSON file is one document; the position's record is an element of it, not a line"
    if source.format == "csv" and is_true(source.options.get("multiLine")):
        wide = [name for name, value in _csv_dialect(source.options).items() if len(value) != 1]
        if wide:
            return f"multiLine CSV records are only followed with one-character {wide}"
    unfollowed = [name for name in _UNFOLLOWED_OPTIONS if name in source.options]
    if unfollowed:
        return f"lines are not counted for a source with the reader option(s) {unfollowed}"
    return None


def _is_record(line: bytes, source: FileSource) -> bool:
    if not line.strip():
        return False
    comment = source.options.get("comment")
    return not (source.format == "csv" and comment and line.startswith(comment.encode()))


def _lines(stream: BinaryIO) -> Iterator[tuple[int, int, bytes]]:
    """(line number from 1, byte offset, text without its end) for each line of the stream."""
    number, offset, pending = 1, 0, b""
    while chunk := stream.read(_CHUNK):
        pending += chunk
        start = 0
        for end in _LINE_END.finditer(pending):
            # A "\r" at a chunk's end may be the first half of "\r\n": wait for the next chunk.
            if end.group() == b"\r" and end.end() == len(pending):
                break
            yield number, offset, pending[start : end.start()]
            number, offset, start = number + 1, offset + end.end() - start, end.end()
        pending = pending[start:]
    if pending:
        yield number, offset, pending.removesuffix(b"\r")


def _lines_after(lines: Iterator[tuple[int, int, bytes]], split_start: int) -> Iterator[tuple[int, int, bytes]]:
    """A split from byte 0 reads every line; any other split reads the lines that begin after its start
    (the line it starts in, or at, belongs to the split before)."""
    return (line for line in lines if split_start == 0 or line[1] > split_start)


def _csv_records(lines: Iterator[tuple[int, int, bytes]], options: dict[str, str]) -> Iterator[list]:
    """The lines of each CSV record, where a quoted value may hold line ends; empty lines are skipped."""
    consumed: list[tuple[int, int, bytes]] = []

    def texts() -> Iterator[str]:
        for line in lines:
            consumed.append(line)
            yield line[2].decode("utf-8", errors="replace") + "\n"

    dialect = _csv_dialect(options)
    reader = csv.reader(texts(), delimiter=dialect["sep"], quotechar=dialect["quote"], escapechar=dialect["escape"])
    for fields in reader:
        record_lines, consumed[:] = list(consumed), []
        if fields:
            yield record_lines


def _csv_dialect(options: dict[str, str]) -> dict[str, str]:
    """The separator, quote and escape Spark's CSV reader uses, by its option names and defaults."""
    return {
        "sep": options.get("sep", options.get("delimiter", ",")),
        "quote": options.get("quote", '"'),
        "escape": options.get("escape", "\\"),
    }
