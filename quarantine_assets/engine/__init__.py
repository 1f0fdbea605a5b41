"""Spark + Delta only: the split, the DLQ tables and their writes. Knows nothing of Dagster."""
