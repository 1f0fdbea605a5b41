"""The DLQ's tables read without a JVM, through delta-rs: the warehouse, the Delta log, the table checks, the
sensors' reads and the claims reader. Nothing here imports pyspark (a test holds it)."""
