"""Stable problem codes. Operators grep and alert on these, so a code is never renumbered or reused."""

from __future__ import annotations

YAML_UNREADABLE = "QA-CFG-001"  # does not parse, or the top level has the wrong shape
STRUCTURE = "QA-CFG-002"  # required key missing or mistyped, broken view chain, unsupported source
UNKNOWN_TOKEN = "QA-CFG-003"  # ${token} not defined (or defined in terms of itself)
SECRET_UNSET = "QA-CFG-004"  # ${secret:scope/key} malformed or its environment variable is unset
BUILTIN_TOKEN_SHADOWED = "QA-CFG-005"  # warning: a substitutions file sets a built-in token
BAD_MODE = "QA-CFG-010"  # mode is neither dqe nor quarantine
QUARANTINE_BLOCK_MISSING = "QA-CFG-011"  # mode quarantine without a quarantine mapping
QUARANTINE_BLOCK_UNEXPECTED = "QA-CFG-012"  # quarantine block while mode is dqe or omitted
BAD_DLQ_TABLE = "QA-CFG-013"  # quarantine.dlq_table missing or not catalog.schema.table
BAD_SOURCE_TABLE = "QA-CFG-014"  # quarantine.source_table missing or not catalog.schema.table
BAD_READ_MODE = "QA-CFG-015"  # quarantine mode with readMode other than stream
EXPECTATIONS_MISSING = "QA-CFG-016"  # expectations_file not set or not found
EXPECTATIONS_EMPTY = "QA-CFG-017"  # expectations file holds no rules
EXPECTATION_MALFORMED = "QA-CFG-018"  # rule without name or expression, bad action, duplicate name
ACTION_COERCED_TO_DROP = "QA-CFG-019"  # warning: warn/fail rule acts as drop in quarantine mode
SHARED_DLQ_SOURCE = "QA-CFG-020"  # two quarantine actions share dlq_table and source_table
DUPLICATE_ACTION_NAME = "QA-CFG-021"  # two data_quality actions share a name (the asset key)
RULE_UNPARSEABLE = "QA-CFG-022"  # Spark cannot parse a rule expression
DLQ_IS_TARGET = "QA-CFG-023"  # a DLQ inbox or outbox is also a validated target table
BAD_MAX_ATTEMPTS = "QA-CFG-024"  # quarantine.max_attempts (ours) is not a positive whole number
