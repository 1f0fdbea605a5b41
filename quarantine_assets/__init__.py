"""A Dagster asset graph that gives Spark + Delta Lake pipelines a dead-letter queue."""
