"""Sample landing files: exact content, arrival order, and the command that writes them."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from stream_job.machinery.job.endpoints.sample_input import write_sample_files

from .conftest import BAKED_OPERATOR, edited_query, operator_changes, run_cli, run_main, run_python


def test_files_hold_ordered_events_and_arrive_in_order(tmp_path):
    first = write_sample_files(tmp_path, files=2, events_per_file=3, keys=2, advance_per_file=timedelta(minutes=1))
    more = write_sample_files(tmp_path, files=1, events_per_file=3, keys=2, advance_per_file=timedelta(minutes=1))
    assert [path.name for path in first + more] == ["events-00000.json", "events-00001.json", "events-00002.json"]
    assert [json.loads(line) for line in first[1].read_text().splitlines()] == [
        {"event_id": "evt-3", "key": "key-1", "event_time": "2026-01-01T00:01:00.000000Z"},
        {"event_id": "evt-4", "key": "key-0", "event_time": "2026-01-01T00:01:20.000000Z"},
        {"event_id": "evt-5", "key": "key-1", "event_time": "2026-01-01T00:01:40.000000Z"},
    ]
    # Numbering continues after existing files, and modification times strictly increase within a call.
    assert json.loads(more[0].read_text().splitlines()[0])["event_id"] == "evt-6"
    assert first[0].stat().st_mtime_ns < first[1].stat().st_mtime_ns
    assert sorted(path.name for path in tmp_path.iterdir()) == [path.name for path in first + more]  # no temp files


def test_sample_input_command_writes_into_the_landing_directory(write_settings, tmp_path):
    landing = tmp_path / "landing"
    path = write_settings({"source": {"files": {"path": str(landing)}}, "query": {"watermark": "5 minutes"}})
    result = run_python(
        "-m",
        "stream_job",
        "sample-input",
        "--settings",
        str(path),
        "--files",
        "2",
        "--events-per-file",
        "4",
        "--keys",
        "3",
    )
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == f"wrote 2 files of 4 events (3 keys) to {landing}\n"
    # Each file covers one watermark (5 minutes) of event time by default.
    second = [json.loads(line) for line in (landing / "events-00001.json").read_text().splitlines()]
    assert [event["event_time"] for event in second] == [
        "2026-01-01T00:05:00.000000Z",
        "2026-01-01T00:06:15.000000Z",
        "2026-01-01T00:07:30.000000Z",
        "2026-01-01T00:08:45.000000Z",
    ]


def test_sample_input_refuses_a_bad_advance(write_settings, tmp_path):
    path = write_settings({"source": {"files": {"path": str(tmp_path / "landing")}}})
    result = run_cli("sample-input", "--settings", str(path), "--advance", "soon")
    assert result.returncode == 2
    assert result.stderr.startswith("sample-input error: --advance 'soon': ")
    assert not (tmp_path / "landing").exists()


@pytest.mark.operator
@pytest.mark.skipif(BAKED_OPERATOR != "stream_stream_join", reason="payments are the join's sample_event")
def test_runs_of_a_key_and_payments(tmp_path):
    shape = {"files": 1, "events_per_file": 6, "keys": 2, "advance_per_file": timedelta(minutes=1), "run_length": 3}
    (orders,) = write_sample_files(tmp_path / "orders", **shape)
    assert [json.loads(line)["key"] for line in orders.read_text().splitlines()] == ["key-0"] * 3 + ["key-1"] * 3
    delays = (timedelta(seconds=1), timedelta(seconds=2), timedelta(seconds=90))
    (payments,) = write_sample_files(tmp_path / "payments", **shape, payment_delays=delays)
    # Order n is paid delays[n % 3] later, except every fifth (evt-4); keys follow their orders.
    assert [json.loads(line) for line in payments.read_text().splitlines()] == [
        {"event_id": "pay-0", "key": "key-0", "event_time": "2026-01-01T00:00:01.000000Z"},
        {"event_id": "pay-1", "key": "key-0", "event_time": "2026-01-01T00:00:12.000000Z"},
        {"event_id": "pay-2", "key": "key-0", "event_time": "2026-01-01T00:01:50.000000Z"},
        {"event_id": "pay-3", "key": "key-1", "event_time": "2026-01-01T00:00:31.000000Z"},
        {"event_id": "pay-5", "key": "key-1", "event_time": "2026-01-01T00:02:20.000000Z"},
    ]


@pytest.mark.operator
@pytest.mark.skipif(BAKED_OPERATOR != "stream_stream_join", reason="the join bake runs it")
def test_sample_input_command_writes_orders_and_payments_for_a_join(write_settings, tmp_path):
    changes = operator_changes("stream_stream_join", tmp_path / "payments")
    changes["query"] |= {"watermark": "4 minutes", "join": {"type": "inner", "range": "4 minutes"}}
    path = write_settings(changes | {"source": {"type": "files", "files": {"path": str(tmp_path / "orders")}}})
    args = ["--settings", str(path), "--files", "1", "--events-per-file", "5"]
    result = run_cli("sample-input", *args)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines() == [
        f"wrote 1 files of 5 events (a key per event) to {tmp_path / 'orders'}",
        f"wrote 1 files of their payments to {tmp_path / 'payments'}",
    ]
    # Orders 48 s apart; payments 1, 3 and 6 minutes (a quarter, three quarters and 1.5 ranges) later.
    payments = [json.loads(line) for line in (tmp_path / "payments" / "events-00000.json").read_text().splitlines()]
    assert [(p["event_id"], p["key"], p["event_time"][11:19]) for p in payments] == [
        ("pay-0", "key-0", "00:01:00"),
        ("pay-1", "key-1", "00:03:48"),
        ("pay-2", "key-2", "00:07:36"),
        ("pay-3", "key-3", "00:03:24"),
    ]


@pytest.mark.operator
@pytest.mark.skipif(BAKED_OPERATOR != "custom_state", reason="the custom_state bake runs it")
def test_sample_input_command_writes_sessions_for_custom_state(write_settings, tmp_path):
    changes = operator_changes("custom_state") | {"source": {"files": {"path": str(tmp_path / "landing")}}}
    changes["query"]["custom_state"] = {"session_timeout": "1 minute"}
    path = write_settings(changes | {"state_store": {"provider": "rocksdb"}})
    args = ["--settings", str(path), "--files", "1", "--events-per-file", "40", "--keys", "2"]
    result = run_cli("sample-input", *args)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == f"wrote 1 files of 40 events (2 keys in runs of 10) to {tmp_path / 'landing'}\n"
    # Runs of 10 events per key over twice the session timeout: 2 minutes, 3 s apart.
    events = [json.loads(line) for line in (tmp_path / "landing" / "events-00000.json").read_text().splitlines()]
    assert [event["key"] for event in events[8:12]] == ["key-0", "key-0", "key-1", "key-1"]
    assert (events[1]["event_time"][11:19], events[-1]["event_time"][11:19]) == ("00:00:03", "00:01:57")


# A query module that keeps only what the contract requires: EVENT_SCHEMA and stateful_query (and Params).
SCHEMA_ONLY = "\n\ndel OPERATOR, events_from_rate, sample_event\n"


@pytest.mark.streaming
def test_without_sample_event_and_events_from_rate_events_are_made_from_the_schema(write_settings, tmp_path):
    landing = tmp_path / "landing"
    path = write_settings({"source": {"files": {"path": str(landing)}}, "query": {"watermark": "5 minutes"}})
    with edited_query({"\n\ndef _iso(": f"{SCHEMA_ONLY}\n\ndef _iso("}):
        result = run_cli(
            "sample-input", "--settings", str(path), "--files", "1", "--events-per-file", "2", "--keys", "3"
        )
    assert (result.returncode, result.stderr) == (0, "")
    assert [json.loads(line) for line in (landing / "events-00000.json").read_text().splitlines()] == [
        {"event_id": "evt-0", "key": "key-0", "event_time": "2026-01-01T00:00:00.000000Z"},
        {"event_id": "evt-1", "key": "key-1", "event_time": "2026-01-01T00:02:30.000000Z"},
    ]
    # The rate source makes its events from the schema too: a run of two batches writes its counts.
    rate = {"type": "rate", "rate": {"rows_per_batch": 100, "advance_per_batch": "5 minutes", "keys": 3}}
    changes = {
        "source": rate,
        "sink": {"type": "parquet", "path": str(tmp_path / "output")},
        "query": {"checkpoint_location": str(tmp_path / "checkpoint"), "trigger": "1 second"},
        "spark": {"shuffle_partitions": 2},  # not the bake's 200: each batch would run 100 waves of tasks
    }
    with edited_query({"\n\ndef _iso(": f"{SCHEMA_ONLY}\n\ndef _iso("}):
        run = run_main("--settings", str(write_settings(changes, name="rate.yaml")), "--max-batches", "3")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "batch 2: 100 input rows" in run.stdout
