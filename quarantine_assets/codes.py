"""Every stable code this project reports, each with one meaning. Operators grep and alert on them,
so a code is never renumbered or reused; docs/codes.md is generated from this one."""

from __future__ import annotations

REGISTRY: dict[str, str] = {}


def _code(code: str, meaning: str) -> str:
    if code in REGISTRY:
        raise ValueError(f"{code} is registered twice")
    REGISTRY[code] = meaning
    return code


# Configuration: reported with the file and field, before anything runs.
YAML_UNREADABLE = _code("QA-CFG-001", "a config file does not parse, or its top level has the wrong shape")
STRUCTURE = _code(
    "QA-CFG-002", "a required key is missing or mistyped, the view chain is broken, or a source is unsupported"
)
UNKNOWN_TOKEN = _code("QA-CFG-003", "a ${token} is not defined, or is defined in terms of itself")
SECRET_UNSET = _code("QA-CFG-004", "a ${secret:scope/key} is malformed or its environment variable is unset")
BUILTIN_TOKEN_SHADOWED = _code("QA-CFG-005", "warning: a substitutions file sets a built-in token")
BAD_MODE = _code("QA-CFG-010", "mode is neither dqe nor quarantine")
QUARANTINE_BLOCK_MISSING = _code("QA-CFG-011", "mode quarantine without a quarantine mapping")
QUARANTINE_BLOCK_UNEXPECTED = _code("QA-CFG-012", "a quarantine mapping while mode is dqe or omitted")
BAD_DLQ_TABLE = _code("QA-CFG-013", "quarantine.dlq_table is missing or not catalog.schema.table")
BAD_SOURCE_TABLE = _code("QA-CFG-014", "quarantine.source_table is missing or not catalog.schema.table")
BAD_READ_MODE = _code("QA-CFG-015", "quarantine mode with a readMode other than stream")
EXPECTATIONS_MISSING = _code("QA-CFG-016", "expectations_file is not set or not found")
EXPECTATIONS_EMPTY = _code("QA-CFG-017", "the expectations file holds no rules")
EXPECTATION_MALFORMED = _code(
    "QA-CFG-018", "a rule without name or expression, with an unknown action, or with a duplicate name"
)
ACTION_COERCED_TO_DROP = _code("QA-CFG-019", "warning: a warn or fail rule acts as drop in quarantine mode")
SHARED_DLQ_SOURCE = _code("QA-CFG-020", "two quarantine actions share a dlq_table and a source_table")
DUPLICATE_ACTION_NAME = _code("QA-CFG-021", "two data_quality actions share a name (the asset key)")
RULE_UNPARSEABLE = _code("QA-CFG-022", "Spark cannot parse a rule expression")
DLQ_IS_TARGET = _code("QA-CFG-023", "a DLQ inbox or outbox is also a validated target table")
BAD_MAX_ATTEMPTS = _code("QA-CFG-024", "quarantine.max_attempts is not a positive whole number")
AUTOLOADER_OPTION_IGNORED = _code(
    "QA-CFG-026",
    "warning: an Auto Loader option open-source Spark cannot honour; the message says what happens instead",
)
REFERENCE_KEY_IGNORED = _code(
    "QA-CFG-027", "warning: a key of the reference's project, flowgroup or substitutions file that is not used here"
)
SOURCE_SCHEMA_UNKNOWN = _code("QA-CFG-028", "a file source has no declared schema and no file to infer one from yet")
RULE_COLUMN_MISSING = _code(
    "QA-CFG-025", "a rule names a column the source does not have; the message lists those it has"
)
UNSTORABLE_SOURCE_COLUMN = _code(
    "QA-CFG-029", "a source column holds a map whose keys are not strings, which a DLQ payload cannot keep"
)
WAREHOUSE_SCHEME_UNSUPPORTED = _code(
    "QA-CFG-030", "the warehouse root is a URL whose scheme Spark has no connector for here"
)
STORAGE_OPTIONS_INVALID = _code(
    "QA-CFG-031", "QUARANTINE_STORAGE_OPTIONS is not a dagster-deltalake storage config in JSON"
)
BAD_RETENTION = _code("QA-CFG-033", "quarantine.retention_days is not a whole number of days, 0 or more")
BAD_REDACTION = _code(
    "QA-CFG-034", "quarantine.sensitive_columns is not a list of column names, or redaction is not mask or sha256"
)
RULE_NAME_NOT_CODE_LIKE = _code(
    "QA-CFG-035",
    "warning: a rule name is not code-like (a-z, 0-9, _); it still is its failures' code",
)
SENSITIVE_COLUMN_UNKNOWN = _code(
    "QA-CFG-036", "a sensitive column is not a top-level column of the source, so it would redact nothing"
)
STORAGE_CREDENTIAL_IN_CLEAR = _code(
    "QA-CFG-037", "a storage credential is given in clear, where the Dagster UI would show it; name its variable"
)
BAD_REJECT_LIMIT = _code(
    "QA-CFG-038", "quarantine.max_reject_ratio is not a number from 0 to 1, or max_rejected_rows not a whole number"
)
BAD_ALERT_WEBHOOK = _code("QA-CFG-039", "the alert webhook is not an http(s) URL")
DEMO_NEEDS_LOCAL_WAREHOUSE = _code(
    "QA-CFG-032", "the demo writes its input files on local disk: give it a local warehouse"
)

# Tables: the run stops before anything is written.
DLQ_TABLE_MISSING = _code("QA-TBL-001", "a DLQ inbox or outbox does not exist; create it with create-tables")
VALIDATED_TABLE_MISSING = _code("QA-TBL-002", "the validated table does not exist yet; run the split first")
DLQ_WOULD_LOSE_ROWS = _code(
    "QA-TBL-003", "a DLQ table would lose rows: change feed, row tracking or deletion vectors off, or a column wrong"
)

# Sources: the run stops before anything of the batch is written.
SOURCE_SCHEMA_CHANGED = _code(
    "QA-SRC-001", "a source column was retyped or dropped in a way the split cannot follow; nothing was written"
)
SPLIT_CHECKPOINT_LOST = _code(
    "QA-SRC-002",
    "the split's checkpoint is gone while the validated table holds batches it committed; nothing was written",
)
CSV_HEADER_MISMATCH = _code(
    "QA-SRC-003",
    "a CSV file's header does not name the source's columns in order; the file is set aside whole (in dqe mode, "
    "nothing of its batch was written)",
)
SOURCE_FILE_UNREADABLE = _code(
    "QA-SRC-004",
    "a source file cannot be read with its source's format (not that format, cut short, cannot be decompressed, "
    "gone); the file is set aside whole",
)

# Data quality (dqe mode).
FAIL_RULE_VIOLATED = _code("QA-DQ-001", "a fail rule was violated; nothing of the batch was written")
REJECT_LIMIT_EXCEEDED = _code(
    "QA-DQ-004", "a batch rejected more rows than its action's limit; nothing of it was written, and it is retried"
)

# Accounting: a step whose own commits do not add up fails, and its next run retries the batch.
SPLIT_UNACCOUNTED = _code(
    "QA-DQ-002", "a split batch's validated and inbox commits do not add up to the rows it read; the batch is retried"
)
RECYCLE_UNACCOUNTED = _code(
    "QA-DQ-003", "a recycled batch's landed, returned and exhausted rows do not add up to the rows it read; retried"
)

# Operator commands: refused, nothing changed.
UNKNOWN_KEY = _code("QA-OPS-001", "no DLQ row has this key")
OTHER_SOURCES_ROW = _code("QA-OPS-002", "the row belongs to another source_table; a change is scoped to one source")
ROW_CLOSED = _code("QA-OPS-003", "the row is recycled, discarded or exhausted; only quarantined or fixed rows change")
UNKNOWN_FIELD = _code("QA-OPS-004", "a field to set is not a column of the validated table")
FIX_NEEDS_ONE_CHANGE = _code("QA-OPS-005", "a fix needs fields to set or a whole payload, not both and not neither")
DISCARD_NEEDS_REASON = _code("QA-OPS-006", "a discard needs a reason")
UNKNOWN_SOURCE = _code("QA-OPS-007", "no quarantine action owns this source_table")
DLQ_AMBIGUOUS = _code("QA-OPS-008", "the configs name several DLQs; choose one with --dlq")
NOT_A_JSON_OBJECT = _code("QA-OPS-009", "a payload or set_fields text is not valid JSON, or not a JSON object")
BAD_FIELD_ASSIGNMENT = _code("QA-OPS-010", "a --set or --set-expr item is not field=value, or sets a field twice")
SENSITIVE_FIELDS_NOT_SUPPLIED = _code(
    "QA-OPS-012", "a fix of a row whose sensitive columns were redacted must supply each of them"
)
NOT_LOCATABLE = _code(
    "QA-OPS-013", "a row's record cannot be found by line: its format or reader options, or its file is gone or changed"
)
RETENTION_UNSET = _code("QA-OPS-011", "purge without --older-than-days for an action that sets no retention_days")
KEY_REPEATED = _code("QA-OPS-014", "one command names the same row key more than once")
NOT_A_FINITE_NUMBER = _code("QA-OPS-015", "a value to set is NaN or infinite, which no column of a payload keeps")
BAD_AGE = _code(
    "QA-OPS-016", "--older-than-days or --older-than-hours is negative, not a number, or reaches back before year 1"
)
BAD_EXPRESSION = _code(
    "QA-OPS-017", "a --where or --set-expr does not parse or names no field or DLQ column; or --where is no condition"
)
EXPRESSION_DOES_NOT_FIT = _code(
    "QA-OPS-018", "a --set-expr value is not of its field's type, does not fit it, or fails on a selected row"
)
SELECTION_NOT_QUARANTINED = _code("QA-OPS-019", "a --where matches rows that are not quarantined")
FIX_NEEDS_ONE_SELECTION = _code("QA-OPS-020", "a fix names rows by key or by --where, not both and not neither")
REDRIVE_CHANGES_NOTHING = _code("QA-OPS-021", "a redrive sends rows back as they are: it sets no field")
ERASURE_UNREADABLE_FILES = _code(
    "QA-OPS-022", "a DLQ table maps its columns to physical names, so erasure cannot find the rows in its files"
)
ERASURE_IN_FLIGHT = _code(
    "QA-OPS-023", "rows to erase are on their way to the validated table (fixed, or recycled and not landed)"
)
FILE_NOT_SET_ASIDE = _code("QA-OPS-024", "no file set aside and not yet redriven has that path")
BAD_ROW_LIMIT = _code("QA-OPS-026", "a limit of rows is not a whole number from 1 to 2,147,483,647")
COMMAND_USAGE = _code("QA-OPS-025", "a command, option or argument is unknown, missing, repeated or not of its kind")

# Ownership: one owner per DLQ slice.
SLICE_OWNED_ELSEWHERE = _code(
    "QA-OWN-001", "another action owns this source_table in the DLQ; nothing was written; release or transfer the claim"
)

# Runs.
RUN_FAILED = _code("QA-RUN-001", "a Dagster run started by a command failed; the message names its failed steps")
SPARK_SERVER_UNREACHABLE = _code(
    "QA-RUN-002",
    "the Spark Connect server QUARANTINE_SPARK_REMOTE names does not answer, or the local one did not start; start "
    "it or set the variable to `local`",
)
SPARK_SERVER_EXPOSED = _code(
    "QA-RUN-003", "the Spark server would listen beyond loopback without a token chosen on purpose"
)
SPARK_SERVER_PORT_TAKEN = _code(
    "QA-RUN-004", "the Spark server's port is taken, by a server started before or another program"
)


def codes_document() -> str:
    """`docs/codes.md`, as `python -m quarantine_assets.codes > docs/codes.md` writes it."""
    rows = [f"| `{code}` | {meaning} |" for code, meaning in sorted(REGISTRY.items())]
    return "\n".join(
        [
            "# Codes",
            "",
            "Every problem reaches you with a stable code: config problems with their file and field, runtime",
            "errors before anything is written, refused operator commands with nothing changed. Generated from",
            "`quarantine_assets/codes.py` by `python -m quarantine_assets.codes > docs/codes.md`; a test keeps it",
            "current.",
            "",
            "| code | meaning |",
            "| --- | --- |",
            *rows,
            "",
        ]
    )


if __name__ == "__main__":
    print(codes_document(), end="")
