"""Settings -> Spark confs, per provider and platform, and on a real session."""

from __future__ import annotations

import pytest
from stream_job.machinery.job.spark.session import apply_confs, spark_confs

from tests.conftest import FAST_START_JVM

STATE = "spark.sql.streaming.stateStore"
OSS_HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
OSS_ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
DATABRICKS_ROCKSDB = "com.databricks.sql.streaming.state.RocksDBStateStoreProvider"


def store(provider: str, changelog: bool = False, **rocksdb) -> dict:
    return {"state_store": {"provider": provider, "changelog_checkpointing": changelog, "rocksdb": rocksdb}}


def test_hdfs_confs(make_settings):
    confs = spark_confs(make_settings(store("hdfs") | {"spark": {"shuffle_partitions": 12, "platform": "oss"}}))
    assert confs[f"{STATE}.providerClass"] == OSS_HDFS
    assert confs["spark.sql.shuffle.partitions"] == "12"
    assert confs["spark.sql.streaming.minBatchesToRetain"] == "100"
    assert not [key for key in confs if key.startswith(f"{STATE}.rocksdb.")]


@pytest.mark.parametrize("changelog", [True, False])
def test_rocksdb_confs(make_settings, changelog):
    settings = make_settings(
        store(
            "rocksdb",
            changelog,
            bounded_memory_usage=True,
            max_memory_usage_mb=256,
            block_cache_size_mb=32,
            write_buffer_size_mb=None,
        )
        | {"spark": {"platform": "oss"}}
    )
    confs = spark_confs(settings)
    assert confs[f"{STATE}.providerClass"] == OSS_ROCKSDB
    assert confs[f"{STATE}.rocksdb.changelogCheckpointing.enabled"] == str(changelog).lower()
    assert confs[f"{STATE}.rocksdb.boundedMemoryUsage"] == "true"
    assert confs[f"{STATE}.rocksdb.maxMemoryUsageMB"] == "256"
    assert confs[f"{STATE}.rocksdb.blockCacheSizeMB"] == "32"
    assert f"{STATE}.rocksdb.writeBufferSizeMB" not in confs  # null keeps Spark's default


@pytest.mark.parametrize(
    ("provider", "spark_version", "join_format"),
    [("rocksdb", "4.2.1", None), ("hdfs", "4.3.0", None), ("rocksdb", "4.3.0", "4"), ("rocksdb", "5.0.0", "4")],
)
def test_the_join_state_format_4_is_asked_for_where_spark_releases_it_for_the_store(
    make_settings, provider, spark_version, join_format
):
    """Spark 4.2 runs format 4 behind a testing flag; 4.3 releases it, for RocksDB only (test_join_format.py runs it)."""
    confs = spark_confs(make_settings(store(provider)), spark_version)
    assert confs.get("spark.sql.streaming.join.stateFormatVersion") == join_format


@pytest.mark.parametrize(("provider", "expected"), [("rocksdb", DATABRICKS_ROCKSDB), ("hdfs", OSS_HDFS)])
def test_databricks_class_names(make_settings, provider, expected):
    confs = spark_confs(make_settings(store(provider) | {"spark": {"platform": "databricks"}}))
    assert confs[f"{STATE}.providerClass"] == expected


def test_extra_confs_pass_through(make_settings):
    extra = {"spark.sql.streaming.noDataMicroBatches.enabled": False, "spark.executor.memory": "2g"}
    confs = spark_confs(make_settings({"spark": {"conf": extra}}))
    assert confs["spark.sql.streaming.noDataMicroBatches.enabled"] == "false"
    assert confs["spark.executor.memory"] == "2g"
    assert "spark.sql.streaming.metricsEnabled" not in confs


def test_metrics_enabled_sets_spark_streaming_metrics(make_settings):
    confs = spark_confs(make_settings({"monitoring": {"metrics_enabled": True}}))
    assert confs["spark.sql.streaming.metricsEnabled"] == "true"


def test_confs_reach_a_real_session(spark, make_settings):
    settings = make_settings(store("rocksdb", True) | {"spark": {"shuffle_partitions": 3, "platform": "oss"}})
    apply_confs(spark, settings)
    assert spark.conf.get(f"{STATE}.providerClass") == OSS_ROCKSDB
    assert spark.conf.get(f"{STATE}.rocksdb.changelogCheckpointing.enabled") == "true"
    assert spark.conf.get("spark.sql.shuffle.partitions") == "3"


def test_the_tests_spark_drivers_start_with_the_first_compiler_alone(spark):
    """tests/conftest.py's speed-up reaches the JVM (a pyspark that launched it otherwise would drop it unseen)."""
    runtime = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    assert FAST_START_JVM in list(runtime.getInputArguments())
