"""The DLQ's tables, each column named once: the inbox, the outbox, the claims, the files set aside and the
metrics, with their Delta types. Every reader, writer and check names a column through this module, and SQL
text is built from these names. No pyspark here: the delta-rs checks and the sensors read it too."""

from __future__ import annotations

# Every column of the DLQ's own starts with it; the rest of a row is its payload.
COLUMN_PREFIX = "_dlq_"
KEY = "_dlq_sk"
SOURCE_TABLE = "_dlq_source_table"
STATUS = "_dlq_status"
TIMESTAMP = "_dlq_timestamp"
FAILED_RULES = "_dlq_failed_rules"
RESCUED_DATA = "_dlq_rescued_data"
OWNER = "_dlq_action"
RUN_ID = "_dlq_run_id"
CONFIG_VERSION = "_dlq_config_version"
BATCH_ID = "_dlq_batch_id"
SOURCE_FILE = "_dlq_source_file"
SOURCE_POSITION = "_dlq_source_position"
SOURCE_VERSION = "_dlq_source_version"
ATTEMPT = "_dlq_attempt"
REASON = "_dlq_reason"
RESOLVED_AT = "_dlq_resolved_at"
UPDATED_AT = "_dlq_updated_at"
UPDATED_BY = "_dlq_updated_by"
RESOLVED_BY = "_dlq_resolved_by"
ARRIVED_AT = "_dlq_arrived_at"
ERRORS = "_dlq_errors"
RECYCLED_AT = "_dlq_recycled_at"
FIXED_AT = "_dlq_fixed_at"
CLAIMED_AT = "_dlq_claimed_at"
CLAIMED_BY = "_dlq_claimed_by"
FILE_HEAD = "_dlq_file_head"
FILE_SIZE = "_dlq_file_size"
FILE_MODIFIED_AT = "_dlq_file_modified_at"
STREAM_ID = "_dlq_stream_id"
REDRIVEN_ROWS = "_dlq_redriven_rows"
ROW_DATA = "_row_data"  # the payload, a variant: the reference's name
# Working columns of the split, never stored: a record's parse failure, a Delta source row's data file.
PARSE_CODE = "_dlq_parse_code"
PARSE_MESSAGE = "_dlq_parse_message"
DATA_FILE_NAME = "_dlq_data_file_name"
# A row's landing is recorded by both: when, and by which recycled batch (see engine/spark/recycled.py).
LANDING_STAMP = (RESOLVED_AT, UPDATED_BY)

# The reference's columns, verbatim (Lakehouse Plumber's DDL), then ours: the context a quarantine record must carry.
INBOX_CORE_COLUMNS = {
    KEY: "STRING NOT NULL",
    SOURCE_TABLE: "STRING NOT NULL",
    STATUS: "STRING NOT NULL",
    TIMESTAMP: "TIMESTAMP NOT NULL",
    FAILED_RULES: "ARRAY<STRUCT<name: STRING, rule: STRING>>",
    RESCUED_DATA: "STRING",
    ROW_DATA: "VARIANT NOT NULL",
}
INBOX_CONTEXT_COLUMNS = {
    OWNER: "STRING",  # owning action: pipeline/flowgroup/action
    RUN_ID: "STRING",  # the Dagster run that wrote the row
    CONFIG_VERSION: "STRING",  # hash of the flowgroup and expectations that judged it
    BATCH_ID: "BIGINT",  # the source stream's micro-batch
    SOURCE_FILE: "STRING",  # the file the row came from (file sources)
    # where in that file: the byte its split starts at (0 unless Spark split the file), the record's index there
    SOURCE_POSITION: "STRUCT<split_start: BIGINT, record: BIGINT>",
    SOURCE_VERSION: "BIGINT",  # a Delta source's version whose snapshot holds the row's data file
    ATTEMPT: "INT",  # 1 on first quarantine, +1 each failed recycle
    REASON: "STRING",  # why a row was discarded or gave up
    RESOLVED_AT: "TIMESTAMP",  # when the row landed in the validated table, was discarded or exhausted
    UPDATED_AT: "TIMESTAMP",
    UPDATED_BY: "STRING",
    RESOLVED_BY: "STRING",  # who resolved it: the operator who fixed or discarded it, or `recycled`
    ARRIVED_AT: "TIMESTAMP",  # when the row reached the source: its file's modification time
    # per failed rule: expectation or parse, a stable code, and what was wrong in words
    ERRORS: "ARRAY<STRUCT<type: STRING, code: STRING, message: STRING>>",
}
OUTBOX_CORE_COLUMNS = {
    KEY: "STRING NOT NULL",
    SOURCE_TABLE: "STRING NOT NULL",
    ROW_DATA: "VARIANT NOT NULL",
    RECYCLED_AT: "TIMESTAMP NOT NULL",
}
OUTBOX_CONTEXT_COLUMNS = {
    ATTEMPT: "INT",  # with the key, lets a re-fixed row recycle again
    OWNER: "STRING",
    FIXED_AT: "TIMESTAMP",  # the inbox image sent: its _dlq_updated_at, set by the operator's last fix
}
# What a DLQ lacking a context column loses (a table created from Lakehouse Plumber's DDL lacks them all).
# Nothing fails without them; the schema check and every run say what is lost, and
# `quarantine-assets upgrade-tables` adds them in place.
INBOX_CONTEXT_LOSSES = {
    OWNER: "rows do not say which action wrote them, so single_source_owner cannot verify ownership",
    RUN_ID: "rows do not name the run that wrote or last moved them",
    CONFIG_VERSION: "rows do not say which version of the config judged them",
    BATCH_ID: "rows do not name the source micro-batch they came from",
    SOURCE_FILE: "rows of file sources do not name their file",
    SOURCE_POSITION: "rows do not say where in their file they were, so finding the original takes a search",
    SOURCE_VERSION: "rows of Delta sources name no version that holds them: once the source is compacted, "
    "finding the original takes a search of its history",
    ATTEMPT: "recycle attempts are not counted, so quarantine.max_attempts cannot be enforced",
    REASON: "the reason for a discard or for giving up on a row is not kept",
    RESOLVED_AT: "landings are not recorded: a reset recycled checkpoint could land a row twice",
    UPDATED_AT: "the time of a row's last change is not kept",
    UPDATED_BY: "who changed a row last is not kept, and landings are not recorded",
    RESOLVED_BY: "rows do not say who resolved them (fixed, discarded)",
    ARRIVED_AT: "rows of file sources do not say when their file arrived",
    ERRORS: "failures carry no message and records that did not parse no reason code",
}
OUTBOX_CONTEXT_LOSSES = {
    ATTEMPT: "a row fixed again after a failed recycle looks like a duplicate to outbox_keys_unique",
    OWNER: "outbox rows do not say which action sent them",
    FIXED_AT: "outbox rows do not say which fix of their row they carry",
}
# Who owns each slice of a DLQ (see engine/spark/claims.py).
CLAIMS_COLUMNS = {
    SOURCE_TABLE: "STRING NOT NULL",
    OWNER: "STRING NOT NULL",  # the owning action: pipeline/flowgroup/action
    CLAIMED_AT: "TIMESTAMP NOT NULL",
    CLAIMED_BY: "STRING",  # who claimed or handed it over: a run, or an operator
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
# A source file that cannot be read with its format and schema, set aside whole (engine/spark/file_quarantine.py).
FILES_COLUMNS = {
    KEY: "STRING NOT NULL",  # the file in its batch: source, stream, batch and the file's URI
    SOURCE_TABLE: "STRING NOT NULL",
    STATUS: "STRING NOT NULL",  # quarantined, then redriven
    TIMESTAMP: "TIMESTAMP NOT NULL",  # when it was set aside
    SOURCE_FILE: "STRING NOT NULL",  # the file's URI, as the split's stream names it
    ERRORS: "ARRAY<STRUCT<type: STRING, code: STRING, message: STRING>>",  # type `file`
    FILE_HEAD: "STRING",  # its first lines; NULL where the action declares sensitive columns
    FILE_SIZE: "BIGINT",
    FILE_MODIFIED_AT: "TIMESTAMP",
    OWNER: "STRING",
    RUN_ID: "STRING",
    STREAM_ID: "STRING",
    BATCH_ID: "BIGINT",
    RESOLVED_AT: "TIMESTAMP",  # when its rows were read again by redrive-file
    RESOLVED_BY: "STRING",  # the run or operator that redrove it
    REDRIVEN_ROWS: "MAP<STRING, BIGINT>",  # what the redrive wrote: validated, quarantined
}
# Text from the source (a malformed record's, its file's name) or from people (reasons, user names).
FREE_TEXT_COLUMNS = (RESCUED_DATA, SOURCE_FILE, REASON, UPDATED_BY, RESOLVED_BY)
CLUSTERING_COLUMN = SOURCE_TABLE
