"""A checkpoint's files, read without Spark: the logs, the state metadata and schemas, the sink's log, the run lock."""
