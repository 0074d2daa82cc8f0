"""Sample landing files: exact content, arrival order, and the command that writes them."""

from __future__ import annotations

import json
from datetime import timedelta

from {{ cookiecutter.package_name }}.sample_input import write_sample_files

from .conftest import run_python


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
        "{{ cookiecutter.package_name }}",
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
    result = run_python("-m", "{{ cookiecutter.package_name }}", "sample-input", "--settings", str(path), "--advance", "soon")
    assert result.returncode == 2
    assert result.stderr.startswith("sample-input error: --advance 'soon': ")
    assert not (tmp_path / "landing").exists()
