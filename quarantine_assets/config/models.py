"""Typed pipeline configuration. Past the loader, no code touches raw YAML dicts."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from quarantine_assets.errors import Problem

QUALIFIED_NAME = re.compile(r"^[A-Za-z_]\w*\.[A-Za-z_]\w*\.[A-Za-z_]\w*\Z")
OUTBOX_SUFFIX = "_outbox"
CLAIMS_SUFFIX = "_claims"
METRICS_SUFFIX = "_metrics"
FILES_SUFFIX = "_files"
DEFAULT_MAX_ATTEMPTS = 3
# How a sensitive column is hidden in the DLQ; the first is the default.
REDACTION_METHODS = ("mask", "sha256")


def outbox_table(inbox_table: str) -> str:
    """The outbox is never configured: the reference derives its name from the inbox's."""
    return inbox_table + OUTBOX_SUFFIX


def claims_table(inbox_table: str) -> str:
    """Who owns each slice of the DLQ: named after the inbox, like the outbox."""
    return inbox_table + CLAIMS_SUFFIX


def metrics_table(inbox_table: str) -> str:
    """What each step did to the DLQ, a row per run, step and source: named after the inbox, like the outbox."""
    return inbox_table + METRICS_SUFFIX


def files_table(inbox_table: str) -> str:
    """The source files set aside whole, a record per file: named after the inbox, like the outbox."""
    return inbox_table + FILES_SUFFIX


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Rule(_Frozen):
    """One expectation: a SQL boolean expression that a row passes only when it is TRUE."""

    name: str
    expression: str
    failure_action: Literal["drop", "warn", "fail"] = "drop"  # `action` in the expectations file
    message: str | None = None


class MetadataColumn(_Frozen):
    """One of the reference's operational metadata columns, its expression accepted at load time."""

    name: str
    expression: str  # calls of pyspark.sql.functions on literals, e.g. F.current_timestamp()
    applies_to: tuple[str, ...]  # view: part of each source row; streaming_table: the validated table only


class FileSource(_Frozen):
    """An incremental file source (the reference's `cloudfiles`), read as a Spark file stream."""

    kind: Literal["files"] = "files"
    path: str
    format: str
    options: dict[str, str] = {}  # Spark reader options; Auto Loader's under Spark's names
    schema_ddl: str | None = None  # `source.schema` or `schema_file`: DDL, or the reference's schema file
    schema_hints: str | None = None  # cloudFiles.schemaHints: types for some inferred columns
    infer_column_types: bool = False  # cloudFiles.inferColumnTypes; as Auto Loader, strings otherwise
    schema_location: str | None = None  # cloudFiles.schemaLocation: the first inferred schema is kept there


class DeltaSource(_Frozen):
    """A Delta table read as a stream."""

    kind: Literal["delta"] = "delta"
    table: str  # catalog.schema.table
    options: dict[str, str] = {}


class QuarantineSpec(_Frozen):
    inbox_table: str  # the DLQ's inbox, `quarantine.dlq_table` in the YAML; its other tables are named after it
    source_table: str
    # Ours: recycles a row may fail before it is closed as exhausted.
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    # Ours: days a resolved row (landed, discarded, exhausted) is kept; None keeps it for good.
    retention_days: int | None = None
    # Ours: columns masked (or hashed, `redaction: sha256`) in the DLQ copy of a rejected row.
    sensitive_columns: tuple[str, ...] = ()
    redaction: Literal["mask", "sha256"] = REDACTION_METHODS[0]
    # Ours: a batch rejecting more than this share of its rows, or more than this many, writes nothing.
    max_reject_ratio: float | None = None
    max_rejected_rows: int | None = None

    @property
    def outbox_table(self) -> str:
        return outbox_table(self.inbox_table)


class DataQualityAction(_Frozen):
    """A `data_quality` transform, resolved through its flowgroup's view chain to a source and a target."""

    pipeline: str
    flowgroup: str
    name: str
    config_file: Path
    source: FileSource | DeltaSource
    target_table: str  # the validated table, catalog.schema.table
    expectations_file: Path
    rules: tuple[Rule, ...]
    mode: Literal["dqe", "quarantine"] = "dqe"
    quarantine: QuarantineSpec | None = None
    description: str | None = None
    operational_metadata: tuple[MetadataColumn, ...] = ()
    config_version: str  # short hash of the flowgroup and expectations files, stamped on DLQ rows

    @property
    def key(self) -> str:
        """Unique across the project: the asset key prefix and the checkpoint folder name."""
        return self.name

    @property
    def owner(self) -> str:
        """Globally meaningful identity, stamped on every DLQ row this action writes."""
        return f"{self.pipeline}/{self.flowgroup}/{self.name}"


class Project(_Frozen):
    config_dir: Path
    env: str
    actions: tuple[DataQualityAction, ...]
    warnings: tuple[Problem, ...] = ()

    @property
    def inbox_tables(self) -> list[str]:
        """Every DLQ inbox the actions name, once each, sorted."""
        return sorted({action.quarantine.inbox_table for action in self.actions if action.quarantine is not None})

    def action(self, key: str) -> DataQualityAction:
        for action in self.actions:
            if action.key == key:
                return action
        raise KeyError(key)
