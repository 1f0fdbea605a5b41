"""Dagster: turns the typed pipeline config into assets, checks, sensors and jobs (`definitions`). No Spark logic
here; the sensors and table checks read through delta-rs and import no pyspark."""
