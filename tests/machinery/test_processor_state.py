"""A processor the user writes, with the state variables Spark offers: the start reads what its `init`
declares, and the estimate, inspect and the guard count and compare that state as Spark keeps it.

The processor (below) keeps, per key, a value state and a list state without a time to live, and a
value, a list and a map state with one, and registers a processing-time timer: every kind Spark stores.
A TTL'd variable's value is stored wrapped beside its expiry (value, ttlExpirationMs); a restart of the
unchanged query must go on (it was once refused as "field value removed"), and Spark's rows (its progress:
a list is one row per key whatever its length, a map a row per entry) are what inspect counts and what
the estimate gives, from the declared variables and capacity.map_entries_per_key.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import types
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from pyspark import cloudpickle
from pyspark.sql.types import LongType, StructField, StructType
from stream_job.machinery.core.checkpoint.files import CheckpointRead, ColumnFamily
from stream_job.machinery.core.plan_operators import PlanOperator
from stream_job.machinery.job.endpoints.sample_input import write_sample_files
from stream_job.machinery.job.guard.schema_evolution import schema_changes, with_ttl
from stream_job.machinery.job.plan.processor_state import PLAN_NODE, StateVariable

from .conftest import (
    BAKED_OPERATOR,
    PACKAGE_DIR,
    committed_batches,
    edited_query,
    files_job,
    run_cli,
    run_main,
    write_settings_file,
)

pytestmark = [pytest.mark.streaming, pytest.mark.operator]

KEYS, TYPES = 20, 3
PROCESSOR = '''"""A user's processor: per key its last 5 events, its last 2 event types, a count per type and totals."""
from __future__ import annotations

import pandas as pd
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor

HOUR_MS = 3_600_000


class Recent(StatefulProcessor):
    def init(self, handle) -> None:
        self.handle = handle
        self.first = handle.getValueState("first", "event_id string")
        self.events = handle.getListState("events", "event_id string")
        self.seen = handle.getValueState("seen", "total long", ttlDurationMs=HOUR_MS)
        self.types = handle.getListState("types", "type string", ttlDurationMs=HOUR_MS)
        self.counts = handle.getMapState("counts", "type string", "count long", ttlDurationMs=HOUR_MS)

    def handleInputRows(self, key, rows, timerValues):
        batch = pd.concat(list(rows)).sort_values("event_id")
        if not self.first.exists():
            self.first.update((batch["event_id"].iloc[0],))
        kept = [row[0] for row in self.events.get()] if self.events.exists() else []
        self.events.put([(event,) for event in (kept + list(batch["event_id"]))[-5:]])
        self.types.put([(kind,) for kind in list(batch["type"])[-2:]])
        for kind, count in batch.groupby("type").size().items():
            before = self.counts.getValue((kind,))[0] if self.counts.containsKey((kind,)) else 0
            self.counts.updateValue((kind,), (before + int(count),))
        total = (self.seen.get()[0] if self.seen.exists() else 0) + len(batch)
        self.seen.update((total,))
        self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + HOUR_MS)
        yield pd.DataFrame({"key": [key[0]], "seen": [total]})

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        yield pd.DataFrame({"key": [key[0]], "seen": [-1]})


def recent(events):
    # A key's events in turn take each of 3 types (event n is of key n mod 20, of type n div 20 mod 3).
    number = F.regexp_extract("event_id", r"(\\d+)$", 1).cast("long")
    typed = events.withColumn("type", F.concat(F.lit("t"), (F.floor(number / 20) % 3).cast("string")))
    return typed.groupBy("key").transformWithStateInPandas(Recent(), "key string, seen long", "Append", "ProcessingTime")
'''
USE_PROCESSOR = {
    "from .sessions import sessions  # imports pandas only when the query is built": "from .recent import recent",
    "    custom = query.custom_state\n    return sessions(wanted(events, query), query.watermark, custom.session_timeout,"
    " custom.recent_events)": "    return recent(wanted(events, query))",
}


@contextlib.contextmanager
def processor_module() -> Iterator[None]:
    """For the block, the package's `recent` module (PROCESSOR), which the edited query imports, in this
    process alone: Spark's Python workers get its processor by value, as they have no file of it to import."""
    name = f"{PACKAGE_DIR.name}.recent"
    module = types.ModuleType(name)
    module.__package__ = PACKAGE_DIR.name
    exec(compile(PROCESSOR, str(PACKAGE_DIR / "recent.py"), "exec"), module.__dict__)
    sys.modules[name] = module
    cloudpickle.register_pickle_by_value(module)
    try:
        yield
    finally:
        cloudpickle.unregister_pickle_by_value(module)
        del sys.modules[name]


def spark_rows_expected(landing: Path) -> int:
    """Spark's rows: per key first, events (one row however long), seen and types, and in counts a row per
    type the key has seen."""
    events = [json.loads(line) for file in landing.iterdir() for line in file.read_text().splitlines()]
    types = {(event["key"], int(event["event_id"].rsplit("-", 1)[1]) // KEYS % TYPES) for event in events}
    return 4 * len({event["key"] for event in events}) + len(types)


def state_rows_of_last_batch(output: str) -> int:
    """The state rows of Spark's progress (numRowsTotal) in the run's last batch line."""
    return int(re.findall(r"state ([\d,]+) rows", output)[-1].replace(",", ""))


@pytest.mark.skipif(BAKED_OPERATOR != "custom_state", reason="the custom_state bake (its query calls sessions.py)")
def test_a_processor_with_ttl_list_and_map_state_restarts_and_is_counted_as_spark_counts_it(spark, tmp_path):
    """The runs and inspect in this process, on the shared session: the restart is the guard's and Spark's
    reading of the checkpoint, not a process's (test_inspect proves inspect in a fresh JVM, test_exactly_once
    restarts in fresh processes)."""
    changes = files_job(tmp_path, "parquet", "rocksdb", files=1)
    landing = Path(changes["source"]["files"]["path"])
    for file in landing.iterdir():  # the job's sample shape has 4 keys: this processor's test wants 20
        file.unlink()
    shape = {"events_per_file": 60, "keys": KEYS, "advance_per_file": timedelta(minutes=2)}
    write_sample_files(landing, files=2, **shape)
    # Processing-time timers need a trigger that ends (available_now never would); 2 batches, then stop.
    changes["query"]["trigger"] = "1 second"
    changes["capacity"] = {"input_rows_per_second": 5, "key_cardinality": KEYS, "map_entries_per_key": TYPES}
    changes["spark"]["conf"] = {"spark.ui.enabled": "false"}
    settings = write_settings_file(tmp_path / "settings.yaml", changes)

    with processor_module(), edited_query(USE_PROCESSOR):
        first = run_main("--settings", str(settings), "--max-batches", "2")
        assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
        spark_rows = state_rows_of_last_batch(first.stdout)
        assert spark_rows == spark_rows_expected(landing), first.stdout[-1500:]

        inspected = run_cli("inspect", "--settings", str(settings), "--json")
        assert inspected.returncode == 0, inspected.stderr[-3000:]
        report = json.loads(inspected.stdout)
        assert report["state_rows"] == spark_rows, report["operators"][0]["stores"]
        estimate = report["estimate"]["state_rows"]
        assert abs(estimate - spark_rows) <= 0.25 * spark_rows, (estimate, spark_rows)

        # The unchanged query restarts through the guard: the TTL'd variables' stored wrapper is no change.
        write_sample_files(landing, files=1, **shape)
        second = run_main("--settings", str(settings), "--max-batches", "1")
        assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-3000:]
        assert "state schema:" not in second.stdout + second.stderr
    assert committed_batches(changes["query"]["checkpoint_location"])[-1] >= 2


TOTAL = StructType([StructField("total", LongType())])
NULL_TOTAL = "field total bigint added (null in the state already kept)"


@pytest.mark.parametrize(
    ("stored", "declared_ttl", "expected"),
    [
        # Unchanged, with and without a time to live: nothing to say.
        (with_ttl(TOTAL), 60_000, []),
        (TOTAL, None, []),
        # Spark compares the stored forms, wrapper against bare value: tried on 4.2.1 (Avro), a time to
        # live removed restarts and the processor reads its kept totals as null.
        (
            with_ttl(TOTAL),
            None,
            [
                ("time to live removed", NULL_TOTAL),
                ("time to live removed", "field value removed (its values are dropped)"),
                ("time to live removed", "field ttlExpirationMs removed (its values are dropped)"),
            ],
        ),
    ],
)
def test_a_ttl_wrapped_value_is_compared_as_spark_stores_it(stored, declared_ttl, expected):
    family = ColumnFamily("seen", {}, json.loads(stored.json()), "ValueState")
    held = CheckpointRead(Path("checkpoint"), 0, {}, [], 0, None, [], {0: [family]}, [])
    plan = [PlanOperator(0, "custom_state", PLAN_NODE, "key string", None)]
    declared = [[StateVariable("seen", "ValueState", TOTAL, ttl_ms=declared_ttl)]]
    changes = schema_changes(held, plan, declared, "avro")
    assert [(change.where.rsplit(", ", 1)[-1], change.what) for change in changes] == expected
    assert all(change.accepted for change in changes)
