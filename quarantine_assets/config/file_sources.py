"""The reference's `cloudfiles` load (Databricks Auto Loader) as an open-source Spark file stream.

Auto Loader options are honoured where Spark can do the same, by us or under Spark's own name; each
one it cannot honour is named in a coded warning that says what happens instead. Reader options
without the `cloudFiles.` prefix (`header`, `delimiter`, ...) go to Spark's reader as they are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from quarantine_assets.codes import AUTOLOADER_OPTION_IGNORED, STRUCTURE, YAML_UNREADABLE
from quarantine_assets.config.models import FileSource
from quarantine_assets.config.yaml_files import child, is_text, read_yaml
from quarantine_assets.errors import Problem

PREFIX = "cloudFiles."
# Spark's file stream takes these under another name.
SPARK_NAMES = {"cloudFiles.maxFilesPerTrigger": "maxFilesPerTrigger", "cloudFiles.maxFileAge": "maxFileAge"}
# Honoured by us: they become fields of the FileSource.
FORMAT, SCHEMA_HINTS, INFER_COLUMN_TYPES, SCHEMA_LOCATION = (
    "cloudFiles.format",
    "cloudFiles.schemaHints",
    "cloudFiles.inferColumnTypes",
    "cloudFiles.schemaLocation",
)
RESCUED_DATA_COLUMN = ("cloudFiles.rescuedDataColumn", "cloudFiles.rescueDataColumn")  # both spellings are in use
RESCUED_DATA = "_rescued_data"
LISTING = "the stream lists the source folder itself at the start of every run"
# What happens instead of the options Spark has nothing like.
INSTEAD = {
    "cloudFiles.includeExistingFiles": "files already in the folder are read on the first run",
    "cloudFiles.schemaEvolutionMode": (
        "the schema is fixed when the stream starts (and pinned by cloudFiles.schemaLocation); a CSV file "
        "whose header names other columns is refused (QA-SRC-003) and JSON fields that appear later are not "
        "read: declare them and the next run reads them"
    ),
    "cloudFiles.maxBytesPerTrigger": "batches are bounded by file count only (cloudFiles.maxFilesPerTrigger)",
    "cloudFiles.partitionColumns": "Spark takes partition columns from key=value folder names",
    "cloudFiles.allowOverwrites": "a file rewritten in place is not read again",
    "cloudFiles.cleanSource": "processed files stay where they are",
    "cloudFiles.cleanSource.retentionDuration": "processed files stay where they are",
    "cloudFiles.cleanSource.moveDestination": "processed files stay where they are",
    "cloudFiles.useNotifications": LISTING,
    "cloudFiles.useIncrementalListing": LISTING,
    "cloudFiles.useManagedFileEvents": LISTING,
    "cloudFiles.backfillInterval": LISTING,
    "cloudFiles.fetchParallelism": LISTING,
    "cloudFiles.pathRewrites": "paths are read as written",
    "cloudFiles.resourceTag": "there are no notification resources to tag",
    "cloudFiles.validateOptions": "options are checked when the config loads",
    "cloudFiles.useStrictGlobber": "paths are globbed the way Spark globs them",
}
SCHEMA_FILE_SUFFIXES = (".yaml", ".yml", ".json")
DDL_FILE_SUFFIXES = (".ddl", ".sql")


def file_source(source: dict[str, Any], options: dict[str, str], config_dir: Path, file: Path, field: str):
    """The typed source, or None, with every problem and warning found."""
    problems: list[Problem] = []
    spark_options: dict[str, str] = {}
    for key, value in options.items():
        where = child(child(field, "options"), key)
        if not key.startswith(PREFIX):
            spark_options[key] = value
        elif key in SPARK_NAMES:
            spark_options[SPARK_NAMES[key]] = value
        elif key in RESCUED_DATA_COLUMN and value != RESCUED_DATA:
            problems.append(
                _ignored(f"{key}: {value}", f"rows that do not parse are kept in {RESCUED_DATA}", file, where)
            )
        elif key not in (FORMAT, SCHEMA_HINTS, INFER_COLUMN_TYPES, SCHEMA_LOCATION, *RESCUED_DATA_COLUMN):
            instead = INSTEAD.get(key, "open-source Spark has no such option")
            problems.append(_ignored(key, f"{instead}; the option is not applied", file, where))
    format_ = source.get("format") or options.get(FORMAT)
    if not is_text(format_):
        problems.append(
            Problem(STRUCTURE, "a cloudfiles source needs 'format'", file=file, field=child(field, "format"))
        )
    if not is_text(source.get("path")):
        problems.append(Problem(STRUCTURE, "a cloudfiles source needs 'path'", file=file, field=child(field, "path")))
    schema_key = next((key for key in ("schema", "schema_file") if source.get(key) is not None), None)
    schema, schema_problems = (
        _schema_text(source[schema_key], config_dir, file, child(field, schema_key)) if schema_key else (None, [])
    )
    hints, hint_problems = (
        _schema_text(options[SCHEMA_HINTS], config_dir, file, child(child(field, "options"), SCHEMA_HINTS))
        if SCHEMA_HINTS in options
        else (None, [])
    )
    problems += schema_problems + hint_problems
    if any(problem.severity == "error" for problem in problems):
        return None, problems
    model = FileSource(
        path=source["path"],
        format=format_,
        options=spark_options,
        schema_ddl=schema,
        schema_hints=hints,
        infer_column_types=options.get(INFER_COLUMN_TYPES, "false").lower() == "true",
        schema_location=options.get(SCHEMA_LOCATION),
    )
    return model, problems


def _ignored(option: str, instead: str, file: Path, field: str) -> Problem:
    message = f"Auto Loader option {option} cannot be honoured on open-source Spark: {instead}"
    return Problem(AUTOLOADER_OPTION_IGNORED, message, file=file, field=field, severity="warning")


def _schema_text(value: Any, config_dir: Path, file: Path, field: str) -> tuple[str | None, list[Problem]]:
    """A Spark DDL column list: written inline, in a .ddl/.sql file, or in the reference's schema file
    (YAML or JSON, `columns: [{name, type, nullable}]`)."""
    reference = value.get("file") if isinstance(value, dict) else value
    if not is_text(reference):
        return None, [
            Problem(STRUCTURE, "a schema is a DDL string or the path of a schema file", file=file, field=field)
        ]
    if not reference.lower().endswith(SCHEMA_FILE_SUFFIXES + DDL_FILE_SUFFIXES):
        return reference, []
    path = config_dir / reference
    if not path.is_file():
        return None, [Problem(STRUCTURE, f"schema file {path} does not exist", file=file, field=field)]
    if path.suffix.lower() in DDL_FILE_SUFFIXES:
        try:
            return path.read_text(encoding="utf-8").strip().rstrip(","), []
        except (OSError, UnicodeDecodeError) as error:
            return None, [Problem(YAML_UNREADABLE, f"cannot read schema file {path}: {error}", file=file, field=field)]
    document, problem = read_yaml(path)
    if problem is not None:
        return None, [problem]
    columns = document.get("columns")
    if not isinstance(columns, list) or not all(isinstance(c, dict) and "name" in c and "type" in c for c in columns):
        return None, [Problem(STRUCTURE, f"schema file {path} needs columns: [{{name, type}}]", file=file, field=field)]
    ddl = ", ".join(f"`{c['name']}` {c['type']}" + ("" if c.get("nullable", True) else " NOT NULL") for c in columns)
    return ddl, []
