"""Input and output that cannot silently lose data: the start refuses, in one line, a checkpoint whose
committed output is gone (the parquet sink's log, or a file it lists; a Delta table, or batches of it)
or whose source is another kind
than the one that wrote its offsets. Each refusal leaves the checkpoint byte for byte as it was, and
the job, once the output is back, goes on to an output equal to the batch computation."""

from __future__ import annotations

import json
import re
import shutil
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from pyspark.testing import assertDataFrameEqual
from stream_job.machinery.core.checkpoint.files import START_OVER
from stream_job.machinery.core.settings import Settings
from stream_job.machinery.job.endpoints import sinks
from stream_job.machinery.job.endpoints.delta import DeltaLakeBatchWriter, committed_version
from stream_job.machinery.job.endpoints.output import read_output

from .conftest import (
    ANY_PROVIDER,
    batch_expectation,
    committed_batches,
    digest,
    edited_query,
    files_job,
    run_cli,
    run_job_of,
    run_main,
)

pytestmark = [pytest.mark.streaming]


def refused_start(settings_path: Path, checkpoint: Path, expected: str) -> str:
    before = digest(checkpoint)
    result = run_main("--settings", str(settings_path))
    assert result.returncode == 4, result.stdout[-2000:] + result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("checkpoint error: ") and expected in lines[0], result.stderr
    assert digest(checkpoint) == before
    return lines[0]


def test_lost_output_and_a_changed_source_are_refused_in_one_line(spark, make_settings, write_settings, tmp_path):
    changes = files_job(tmp_path, "parquet", ANY_PROVIDER, files=3)
    path = write_settings(changes)
    settings = make_settings(changes)
    checkpoint, output = Path(settings.query.checkpoint_location), Path(settings.sink.path)
    landing = Path(settings.source.files.path)
    later = tmp_path / "later"
    later.mkdir()
    for file in sorted(landing.iterdir())[2:]:
        file.rename(later / file.name)
    first = run_main("--settings", str(path))
    assert first.returncode == 0, first.stderr[-3000:]
    kept = tmp_path / "output-copy"
    shutil.copytree(output, kept)

    # The whole output deleted between runs: refused, and show-output says the same in one line.
    shutil.rmtree(output)
    refused_start(path, checkpoint, f"sink.path {output} has lost committed output: _spark_metadata")
    shown = run_cli("show-output", "--settings", str(path))
    assert shown.returncode == 4 and shown.stderr.startswith("show-output error: sink.path"), shown.stderr
    assert len(shown.stderr.strip().splitlines()) == 1

    # One committed data file deleted: named.
    shutil.copytree(kept, output)
    data_file = sorted(output.glob("*.parquet"))[0]
    data_file.unlink()
    refused_start(path, checkpoint, f"1 of the files its log lists as committed are gone ({data_file})")
    shutil.copy2(kept / data_file.name, data_file)

    # Another source on this checkpoint: the offsets of the files source cannot be read by the rate source.
    rate = write_settings({**changes, "source": {"type": "rate", "rate": {"rows_per_batch": 10}}}, name="rate.yaml")
    line = refused_start(rate, checkpoint, "source.type is rate-micro-batch in settings, but the checkpoint")
    assert "holds files: Spark continues a checkpoint from the offsets its source wrote" in line
    # The output put back: the job goes on, and nothing was lost.
    for file in later.iterdir():
        file.rename(landing / file.name)
    rest = run_main("--settings", str(path))
    assert rest.returncode == 0, rest.stderr[-3000:]
    assertDataFrameEqual(read_output(spark, settings.sink), batch_expectation(spark, settings))


def lost_output_line(settings: Settings, problem: str) -> str:
    """The lost-output refusal, for the problem that a sink's output shows."""
    checkpoint = Path(settings.query.checkpoint_location)
    return (
        f"sink.path {settings.sink.path} has lost committed output: {problem}, while the checkpoint {checkpoint}"
        f" has committed batches up to {committed_batches(checkpoint)[-1]}, which a restart never writes again. Put"
        f" the output back as it was (a backup, or where it was moved); or write everything again: {START_OVER}"
    )


def table_moved_away_is_refused(settings_path: Path, settings: Settings, away: Path) -> None:
    """The Delta table moved to `away` (and left there): the start and show-output refuse, one line each,
    the checkpoint unchanged."""
    Path(settings.sink.path).rename(away)
    missing = lost_output_line(settings, "it holds no Delta table (no _delta_log)")
    assert refused_start(settings_path, Path(settings.query.checkpoint_location), "") == f"checkpoint error: {missing}"
    shown = run_cli("show-output", "--settings", str(settings_path))
    assert (shown.returncode, shown.stdout, shown.stderr) == (4, "", f"show-output error: {missing}\n")


# The delta-spark case costs two JVMs of its own (its session extensions cannot join the shared
# session): CI moves its table away in test_exactly_once's crash of a delta-spark job instead.
@pytest.mark.parametrize(
    "sink", ["delta", pytest.param("delta-spark", marks=[pytest.mark.delta_spark, pytest.mark.secondary])]
)
def test_a_delta_table_moved_away_or_behind_the_checkpoint_is_refused_and_once_back_the_job_goes_on(
    spark, make_settings, write_settings, tmp_path, sink
):
    """Both Delta writers record every batch of the query in the table's log, an empty one too (a
    transaction: the query id and the batch id; one table version per batch). A table moved away, or
    one holding fewer of the query's batches than the checkpoint committed (an older copy put back),
    has lost committed output: refused before Spark as the parquet sink's is, the checkpoint unchanged,
    and show-output says the same. The table put back, the job goes on to the batch computation's rows."""
    changes = files_job(tmp_path, sink, ANY_PROVIDER, files=3)
    path = write_settings(changes)
    settings = make_settings(changes)
    checkpoint, output = Path(settings.query.checkpoint_location), Path(settings.sink.path)
    held_back = sorted(Path(settings.source.files.path).iterdir())[-1]
    held_back.rename(tmp_path / held_back.name)
    first = run_job_of(sink, path)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    moved = tmp_path / "moved-away"
    table_moved_away_is_refused(path, settings, moved)

    # An older copy of the table: its newest version, the last batch's, not in it.
    last = committed_batches(checkpoint)[-1]
    shutil.copytree(moved, output)
    for part in (output / "_delta_log").glob(f"*{last:020d}*"):
        part.unlink()
    query = json.loads((checkpoint / "metadata").read_text())["id"]
    older = (
        f"its Delta table holds the batches of query {query} up to {last - 1} (its log's transactions; of the batches"
        f" after it, batch {last} may have written rows: an aggregation in append mode writes the windows a moved"
        " watermark closes)"
    )
    assert refused_start(path, checkpoint, "") == f"checkpoint error: {lost_output_line(settings, older)}"

    shutil.rmtree(output)
    moved.rename(output)
    (tmp_path / held_back.name).rename(held_back)
    rest = run_job_of(sink, path)
    assert rest.returncode == 0, rest.stdout[-2000:] + rest.stderr[-3000:]
    assert committed_batches(checkpoint)[-1] > last
    assertDataFrameEqual(read_output(spark, settings.sink), batch_expectation(spark, settings))


class OlderTemplatesWriter(DeltaLakeBatchWriter):
    """The deltalake writer of templates before commit 15b007b (`git log -S "data.num_rows == 0"`): a batch
    without rows made no commit, so its table lacks such batches of the checkpoint's."""

    def __call__(self, batch, batch_id):
        from deltalake import CommitProperties, Transaction, write_deltalake

        data = batch.toArrow()
        if data.num_rows == 0:
            return
        transaction = Transaction(app_id=self.query_id(batch), version=batch_id)
        write_deltalake(
            self.path, data, mode="append", commit_properties=CommitProperties(app_transactions=[transaction])
        )


# The starter's query with a stateless branch beside the aggregation: its rows are written in any batch.
UNION_OF_RAW_EVENTS = {
    """            "key",
            "events",
        )
    )
""": """            "key",
            "events",
        )
    ).unionByName(
        events.select(
            F.col("event_time").alias("window_start"),
            F.col("event_time").alias("window_end"),
            "key",
            F.lit(1).cast("long").alias("events"),
        )
    )
"""
}


def test_a_delta_table_lacking_only_batches_without_rows_of_the_older_deltalake_writer_goes_on_to_every_row(
    spark, make_settings, write_settings, tmp_path, monkeypatch
):
    """A table of the older deltalake writer lacks the batches that wrote no row. In append mode an aggregation
    writes the windows the watermark closes, so a batch that ran with the watermark of the batch before it wrote
    none (Spark's offsets file holds each batch's watermark): such a table is whole, and the start goes on (it
    used to be refused as lost output, with a way out no such table has). Where the output does not come
    straight from the aggregation (a stateless branch beside it), those batches may have written rows: refused."""
    changes = files_job(tmp_path, "delta", ANY_PROVIDER, files=2)
    path = write_settings(changes)
    settings = make_settings(changes)
    checkpoint, landing = Path(settings.query.checkpoint_location), Path(settings.source.files.path)
    held_back = sorted(landing.iterdir())[-1]
    held_back.rename(tmp_path / held_back.name)
    first = run_main("--settings", str(path))
    assert first.returncode == 0, first.stderr[-3000:]

    # Events of the windows still open: a batch that moves no watermark and closes no window, run by
    # the older writer, which leaves it out of the table.
    newest = max(
        datetime.fromisoformat(json.loads(line)["event_time"].replace("Z", "+00:00"))
        for file in landing.iterdir()
        for line in file.read_text().splitlines()
    )
    events = [
        {"event_id": f"open-{n}", "key": f"key-{n % 4}", "event_time": (newest - timedelta(seconds=5 * n)).isoformat()}
        for n in range(10)
    ]
    (landing / "events-open.json").write_text("".join(json.dumps(event) + "\n" for event in events))
    with monkeypatch.context() as older:
        older.setattr(sinks, "DeltaLakeBatchWriter", OlderTemplatesWriter)
        tail = run_main("--settings", str(path))
    assert tail.returncode == 0, tail.stderr[-3000:]
    query = json.loads((checkpoint / "metadata").read_text())["id"]
    last = committed_batches(checkpoint)[-1]
    assert committed_version(settings.sink.path, query) == last - 1

    with edited_query(UNION_OF_RAW_EVENTS):
        line = refused_start(path, checkpoint, "")
    assert line == "checkpoint error: " + lost_output_line(
        settings,
        f"its Delta table holds the batches of query {query} up to {last - 1} (its log's transactions; batch {last}"
        f" ran with the watermark of batch {last - 1}, which writes no row only where the output comes straight"
        " from an aggregation, and this query's comes from a Union)",
    )

    (tmp_path / held_back.name).rename(held_back)
    rest = run_main("--settings", str(path))
    assert rest.returncode == 0, rest.stdout[-2000:] + rest.stderr[-3000:]
    assert (
        f"checkpoint: sink.path {settings.sink.path}: its Delta table holds the batches of query {query} up to"
        f" {last - 1} and the checkpoint {checkpoint} committed up to {last}: batch {last} ran with the watermark of"
        f" batch {last - 1}: an aggregation in append mode writes a row for each window the watermark closes, and"
        " this closed none"
    ) in rest.stdout
    assertDataFrameEqual(read_output(spark, settings.sink), batch_expectation(spark, settings))


def test_the_rate_sources_offsets_are_not_read_by_the_micro_batch_rate_source(write_settings, tmp_path):
    changes = {
        "source": {"type": "rate", "rate": {"rows_per_second": 100}},
        "sink": {"type": "parquet", "path": str(tmp_path / "output")},
        "query": {"checkpoint_location": str(tmp_path / "checkpoint"), "trigger": "1 second"},
        "spark": {"shuffle_partitions": 2, "master": "local[2]"},
        "state_store": {"provider": ANY_PROVIDER, "changelog_checkpointing": False},
    }
    path = write_settings(changes)
    ran = run_main("--settings", str(path), "--max-batches", "1")
    assert ran.returncode == 0, ran.stderr[-3000:]
    micro = write_settings({**changes, "source": {"type": "rate", "rate": {"rows_per_batch": 100}}}, name="micro.yaml")
    line = refused_start(micro, tmp_path / "checkpoint", "source.type is rate-micro-batch in settings")
    assert "holds rate: Spark continues" in line and "set source.type back to rate," in line


@pytest.mark.parametrize("sink", ["parquet", "delta"])
def test_an_output_ahead_of_the_checkpoint_is_refused_and_the_way_out_loses_nothing(
    spark, make_settings, write_settings, tmp_path, sink
):
    """A sink knows a batch by its id: against an output that went further, a new checkpoint (batches
    from 0) or an older copy of the checkpoint would have its batches skipped as written, their input
    lost. Both starts are refused before Spark, with nothing changed (a Delta table knows batches by
    query id, so a new checkpoint, a new query id, skips nothing there: it would write every result a
    second time, and is refused for that); the way out the refusal gives ends with every input row in
    the output, once."""
    changes = files_job(tmp_path, sink, ANY_PROVIDER, files=3)
    path = write_settings(changes)
    settings = make_settings(changes)
    checkpoint, output = Path(settings.query.checkpoint_location), Path(settings.sink.path)
    landing, later = Path(settings.source.files.path), tmp_path / "later"
    later.mkdir()
    for file in sorted(landing.iterdir())[1:]:  # one file, one batch, first
        file.rename(later / file.name)
    first = run_main("--settings", str(path))
    assert first.returncode == 0, first.stderr[-3000:]
    older = tmp_path / "checkpoint-after-batch-0"
    shutil.copytree(checkpoint, older)
    for file in later.iterdir():
        file.rename(landing / file.name)
    rest = run_main("--settings", str(path))
    assert rest.returncode == 0, rest.stderr[-3000:]
    kept = digest(output)

    # The older copy of the checkpoint put back under the newer output: its later batches would be skipped.
    older_last = max(int(entry.name) for entry in (older / "offsets").iterdir() if entry.name.isdigit())
    at_older = write_settings(
        {**changes, "query": {**changes["query"], "checkpoint_location": str(older)}}, "older.yaml"
    )
    line = refused_start(at_older, older, f"past batch {older_last}, the last the checkpoint {older} logged: the sink")
    newest = int(re.search(r"holds the output of batches up to (\d+) ", line)[1])
    assert newest > older_last
    assert f"this checkpoint's batches {older_last + 1} to {newest} as written already and skip them" in line
    assert "put back the checkpoint that wrote that output" in line
    assert digest(output) == kept

    fresh, empty = tmp_path / "checkpoint-new", tmp_path / "output-new"
    at_fresh = write_settings({**changes, "query": {**changes["query"], "checkpoint_location": str(fresh)}}, "new.yaml")
    if sink == "parquet":  # a new checkpoint against the old log: all its batches would be skipped
        logged = max(int(entry.name.split(".")[0]) for entry in (output / "_spark_metadata").glob("[0-9]*"))
        result = run_main("--settings", str(at_fresh))
        assert result.returncode == 4, result.stderr[-3000:]
        assert result.stderr.strip() == (
            f"checkpoint error: sink.path {output} holds the output of batches up to {logged} (its log"
            f" {output / '_spark_metadata'}), and the checkpoint {fresh} has logged no batch yet: the sink would"
            f" take this checkpoint's batches 0 to {logged} as written already and skip them, and their input would"
            " be lost. Nothing was started; set sink.path to an empty directory too, or set"
            " query.checkpoint_location back to the checkpoint that wrote that output"
        )
        assert not fresh.exists() and digest(output) == kept
    else:  # a new query id: every result written a second time beside the first
        query = json.loads((checkpoint / "metadata").read_text())["id"]
        result = run_main("--settings", str(at_fresh))
        assert result.returncode == 4, result.stderr[-3000:]
        assert result.stderr.strip().startswith(
            f"checkpoint error: sink.path {output} holds the output of query {query} up to batch {newest} (its Delta"
            f" log's transactions), and the checkpoint {fresh} has logged no batch yet: its query would write the"
            " input it reads again beside those rows, each result twice"
        ), result.stderr[-3000:]
        assert not fresh.exists() and digest(output) == kept

    # The way out: a new checkpoint and an empty sink.path reprocess everything.
    both = {**changes, "query": {**changes["query"], "checkpoint_location": str(fresh)}}
    both["sink"] = {**changes["sink"], "path": str(empty)}
    again = run_main("--settings", str(write_settings(both, "both.yaml")))
    assert again.returncode == 0, again.stderr[-3000:]
    moved = make_settings(both)
    assertDataFrameEqual(read_output(spark, moved.sink), batch_expectation(spark, moved))


def test_a_log_file_changed_after_spark_wrote_it_is_refused_naming_it(spark, make_settings, write_settings, tmp_path):
    """Spark reads its offsets, commits and metadata without checking them against the checksums
    Hadoop writes beside them: a changed digit in a commit's watermark ran on silently, and a parquet
    sink log's merge file cut to nothing let the job write on until no reader could list the output.
    Each is refused before Spark starts, naming the file, the checkpoint and the output unchanged; put
    back, the job ends with every row."""
    changes = files_job(tmp_path, "parquet", ANY_PROVIDER, files=3)
    changes["spark"] = {**changes["spark"], "conf": {"spark.sql.streaming.fileSink.log.compactInterval": 2}}
    path = write_settings(changes)
    settings = make_settings(changes)
    checkpoint, output = Path(settings.query.checkpoint_location), Path(settings.sink.path)
    first = run_main("--settings", str(path))
    assert first.returncode == 0, first.stderr[-3000:]
    # The newest merge file: Spark and every reader of the output read the log from there on.
    compact = max((output / "_spark_metadata").glob("*.compact"), key=lambda entry: int(entry.name.split(".")[0]))

    def digit_changed(text: str) -> str:  # the first digit of the commit's watermark, one higher
        at = text.index('"nextBatchWatermarkMs":') + len('"nextBatchWatermarkMs":')
        return text[:at] + str((int(text[at]) + 1) % 10) + text[at + 1 :]

    damages = {
        checkpoint / "commits" / "1": digit_changed,
        checkpoint / "offsets" / "1": lambda text: text.replace('"logOffset"', '"logOffsef"', 1),
        # The file source's list of the files it read: one renamed would be read again.
        checkpoint / "sources" / "0" / "1": lambda text: text.replace("events-", "eventz-", 1),
        checkpoint / "metadata": lambda text: text.replace('{"id":"', '{"id":"0', 1),  # another query id, still one
        checkpoint / "state" / "0" / "_metadata" / "metadata": lambda text: text.replace(
            "operatorName", "operatorNamf"
        ),
        # The state's schema (binary around its JSON; its length kept): was read as an evolution Spark accepts.
        checkpoint / "state" / "0" / "0" / "_metadata" / "schema": lambda text: text.replace("window", "windox", 1),
    }
    if (compact.parent / f".{compact.name}.crc").is_file():  # Spark does not always write one for a merge file
        damages[compact] = lambda text: ""
    for damaged, change in damages.items():
        original = damaged.read_text(encoding="latin-1")  # every byte as it is, binary files too
        assert change(original) != original, damaged
        damaged.write_text(change(original), encoding="latin-1")
        kept = digest(output)
        refused_start(path, checkpoint, f"checkpoint error: {damaged} does not match its checksum .{damaged.name}.crc")
        assert digest(output) == kept
        damaged.write_text(original, encoding="latin-1")

    # A sink log entry that does not parse, without a checksum to tell: refused as such.
    original = compact.read_text()
    compact.write_text("")
    (compact.parent / f".{compact.name}.crc").unlink(missing_ok=True)
    line = refused_start(path, checkpoint, f"{compact} is not a v1 entry of the file sink's log (cut short or changed)")
    assert "put the output back with its _spark_metadata from a copy, or set query.checkpoint_location" in line
    compact.write_text(original)

    rest = run_main("--settings", str(path))
    assert rest.returncode == 0, rest.stderr[-3000:]
    assertDataFrameEqual(read_output(spark, settings.sink), batch_expectation(spark, settings))
