"""The Spark confs the settings manage: the one table of which setting owns which conf.

job/spark/session.py turns settings into these confs; the settings refuse them in spark.conf; the guard
names the setting a pinned conf belongs to; the checkpoint's reader and inspect read them back.
"""

from __future__ import annotations

STATE_STORE = "spark.sql.streaming.stateStore"
PROVIDER_CONF = f"{STATE_STORE}.providerClass"
PARTITIONS_CONF = "spark.sql.shuffle.partitions"
ENCODING_CONF = f"{STATE_STORE}.encodingFormat"
CHANGELOG_CONF = f"{STATE_STORE}.rocksdb.changelogCheckpointing.enabled"
# Spark's shortest real-time batch (5 s by default): the job sets it to query.trigger's real_time duration.
MIN_BATCH_CONF = "spark.sql.streaming.realTimeMode.minBatchDuration"
PROVIDER_CLASSES = {
    "oss": {
        "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
        "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    },
    "databricks": {
        "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
        "rocksdb": "com.databricks.sql.streaming.state.RocksDBStateStoreProvider",
    },
}
# settings.state_store.rocksdb field -> RocksDB conf suffix.
ROCKSDB_CONFS = {
    "bounded_memory_usage": "boundedMemoryUsage",
    "max_memory_usage_mb": "maxMemoryUsageMB",
    "block_cache_size_mb": "blockCacheSizeMB",
    "write_buffer_size_mb": "writeBufferSizeMB",
    "max_write_buffer_number": "maxWriteBufferNumber",
    "compact_on_commit": "compactOnCommit",
    "track_total_number_of_rows": "trackTotalNumberOfRows",
}
# settings.state_store.integrity field -> the Spark conf it sets.
INTEGRITY_CONFS = {
    "checkpoint_format_version": f"{STATE_STORE}.checkpointFormatVersion",
    "file_checksums": "spark.sql.streaming.checkpoint.fileChecksum.enabled",
    "row_checksums": f"{STATE_STORE}.rowChecksum.enabled",
    "auto_snapshot_repair": f"{STATE_STORE}.autoSnapshotRepair.enabled",
}
# A stream-stream join's state format, pinned by the checkpoint's offsets like the provider. Format 4 evicts by
# the rows the watermark passes instead of scanning every row (RocksDB only); Spark 4.2 runs it behind a testing
# flag, 4.3.0 releases it. The job asks for it on a new checkpoint; Spark keeps the one a checkpoint holds.
JOIN_FORMAT_CONF = "spark.sql.streaming.join.stateFormatVersion"
EVICTING_JOIN_FORMAT = "4"
EVICTING_JOIN_FORMAT_FROM = (4, 3)
# How many changelogs auto snapshot repair replays at most on an older snapshot (Spark 4.2's default).
MAX_REPAIR_REPLAY_CONF = f"{STATE_STORE}.autoSnapshotRepair.maxChangeFileReplay"
MAX_REPAIR_REPLAY_DEFAULT = 500
# Spark confs that settings manage; spark.conf may not set them behind the settings' back.
MANAGED_CONFS = {
    "spark.master": "spark.master",
    "spark.app.name": "spark.app_name",
    "spark.driver.memory": "spark.driver_memory",
    PARTITIONS_CONF: "spark.shuffle_partitions",
    PROVIDER_CONF: "state_store.provider",
    CHANGELOG_CONF: "state_store.changelog_checkpointing",
    "spark.sql.streaming.minBatchesToRetain": "state_store.min_batches_to_retain",
    ENCODING_CONF: "state_store.encoding_format",
    "spark.sql.streaming.metricsEnabled": "monitoring.metrics_enabled",
    MIN_BATCH_CONF: "query.trigger",
    **{conf: f"state_store.integrity.{field}" for field, conf in INTEGRITY_CONFS.items()},
}
MANAGED_PREFIXES = {f"{STATE_STORE}.rocksdb.": "state_store.rocksdb"}


def provider_name(provider_class: str) -> str:
    """hdfs or rocksdb for a provider class of either platform; the class itself when it is neither."""
    for classes in PROVIDER_CLASSES.values():
        for name, known in classes.items():
            if known == provider_class:
                return name
    return provider_class


def spark_release(spark_version: str) -> tuple[int, ...]:
    """(major, minor) of a Spark version such as 4.3.0 or 4.3.0-preview1."""
    return tuple(int(part) for part in spark_version.split(".")[:2] if part.isdigit())


def join_format_for(provider: str, spark_version: str) -> str | None:
    """The join state format the job asks for on a new checkpoint: the evicting one where this Spark releases it
    for this provider, else None (Spark's default)."""
    if provider == "rocksdb" and spark_release(spark_version) >= EVICTING_JOIN_FORMAT_FROM:
        return EVICTING_JOIN_FORMAT
    return None
