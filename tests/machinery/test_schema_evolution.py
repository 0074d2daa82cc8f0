"""A custom_state processor's state schema changed under an existing checkpoint, the way a user edits
sessions.py: `check` says before a start whether Spark accepts the change, and which; an accepted one
(a nullable field added, with the Avro encoding the bake sets) restarts with the state carried on and
the new field null; a refused one (a field narrowed, or any added field with Spark's default
UnsafeRow encoding) is named in one line by `check` and by the start, which leaves the checkpoint
byte for byte as it was. Changing the encoding of an existing checkpoint is refused like the provider.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pyspark.testing import assertDataFrameEqual
from stream_job.machinery.job.endpoints.output import read_output

from .conftest import (
    ANY_PROVIDER,
    BAKED_OPERATOR,
    DEFAULT_OPERATOR,
    PROJECT_DIR,
    batch_expectation,
    clean_env,
    committed_batches,
    digest,
    edited_query,
    files_job,
    jvm_free,
    project_copy,
    run_cli,
    run_main,
    run_python,
)

pytestmark = [pytest.mark.streaming]
CUSTOM_STATE = pytest.mark.skipif(BAKED_OPERATOR != "custom_state", reason="the custom_state bake's processor")

INIT = 'self.state = handle.getValueState("session", STATE_SCHEMA)'
# A nullable field added to the session's value state: the processor writes it null and checks that
# every state row it reads back, those of the run before the change too, holds null there.
ADD_CHANNEL = {
    INIT: 'self.state = handle.getValueState("session", STATE_SCHEMA + ", channel string")',
    "start, end, visits, recent = stored": "start, end, visits, recent, channel = stored\n        assert channel is None, channel",
    "list(session.recent_event_ids)))": "list(session.recent_event_ids), None))",
}
# visits narrowed from bigint to int: Avro cannot read a long as an int.
NARROW_VISITS = {
    INIT: 'self.state = handle.getValueState("session", STATE_SCHEMA.replace("visits long", "visits int"))'
}


def first_run(
    tmp_path: Path, write_settings, encoding: str, files: int, provider: str = "rocksdb"
) -> tuple[Path, dict, list[Path]]:
    """Settings of a files job of `files` landing files whose first two are run now; the others wait in later/."""
    changes = files_job(tmp_path, "parquet", provider, files=files)
    changes["state_store"]["encoding_format"] = encoding
    # No UI: its port warnings (another Spark on this machine holds 4040) would join a refusal's line.
    changes["spark"]["conf"] = {"spark.ui.enabled": "false"}
    path = write_settings(changes)
    landing = Path(changes["source"]["files"]["path"])
    later = tmp_path / "later"
    later.mkdir()
    waiting = []
    for file in sorted(landing.iterdir())[2:]:
        waiting.append(later / file.name)
        file.rename(waiting[-1])
    ran = run_main("--settings", str(path))
    assert ran.returncode == 0, ran.stderr[-3000:]
    return path, changes, waiting


def edited(folder: Path, edits: dict[str, str]) -> Path:
    """The project with its sessions.py edited, as a user would, and its log configuration (a quiet console):
    a copy run in a process of its own, since Spark's Python workers import the processor from the files."""
    project = project_copy(folder, edits, module="sessions.py")
    shutil.copy(PROJECT_DIR / "log4j2.properties", project)
    return project


def one_line(result, start: str) -> str:
    assert result.returncode == 4, result.stdout[-2000:] + result.stderr[-3000:]
    lines = [line for line in result.stderr.strip().splitlines() if "Using incubator modules" not in line]
    assert len(lines) == 1 and lines[0].startswith(start), result.stderr
    return lines[0]


@pytest.mark.operator
@CUSTOM_STATE
def test_a_nullable_field_added_is_accepted_and_a_narrowed_one_refused_with_avro(
    spark, make_settings, write_settings, tmp_path
):
    path, changes, waiting = first_run(tmp_path, write_settings, "avro", files=4)
    settings = make_settings(changes)
    checkpoint = Path(settings.query.checkpoint_location)
    held = digest(checkpoint)

    # The encoding is pinned like the provider: refused before Spark starts, naming the setting.
    unsaferow = write_settings(
        {**changes, "state_store": {**changes["state_store"], "encoding_format": "unsaferow"}}, name="unsaferow.yaml"
    )
    drift = one_line(run_cli("check", "--settings", str(unsaferow)), "")
    assert "state_store.encoding_format is unsaferow in settings, but the checkpoint" in drift
    assert "holds avro:" in drift and "set state_store.encoding_format back to avro" in drift

    # A narrowed field: check names it, the start refuses it in the same words, the checkpoint untouched
    # (in this process: the refusal comes before the query starts).
    with edited_query(NARROW_VISITS, module="sessions.py"):
        checked = run_cli("check", "--settings", str(path))
        started = run_main("--settings", str(path))
    refusal = one_line(checked, "checkpoint error: the state's schema changed in a way Spark refuses:")
    assert "custom_state (operator 0), state variable session: field visits changed from bigint to int" in refusal, (
        refusal
    )
    assert "Either change the processor's state schema back, or set query.checkpoint_location" in refusal
    assert one_line(started, "checkpoint error: ") == refusal
    assert digest(checkpoint) == held

    # A nullable field added: accepted, and said so; the restart, in a process of its own (its console and
    # log files are proven), carries the sessions on.
    with edited_query(ADD_CHANNEL, module="sessions.py"):
        checked = run_cli("check", "--settings", str(path))
    assert checked.returncode == 0, checked.stderr[-3000:]
    assert (
        "state schema: custom_state (operator 0), state variable session: field channel string added"
        " (null in the state already kept); Spark accepts it" in checked.stdout.splitlines()
    ), checked.stdout
    added = edited(tmp_path / "added", ADD_CHANNEL)
    for file in waiting:
        file.rename(Path(changes["source"]["files"]["path"]) / file.name)
    rest = run_python("main.py", "--settings", str(path), env=clean_env(), cwd=added)
    assert rest.returncode == 0, rest.stderr[-3000:]
    # A quiet console: the driver's Python worker's print()s and Avro's warnings went to the log files.
    assert jvm_free(rest.stderr) == "", rest.stderr[-3000:]
    assert "Python worker Starting execution of UDF" in (added / "logs" / "python-workers.log").read_text()
    spark_log = (added / "logs" / "spark.log").read_text().splitlines()
    assert any(" WARN " in line and "org.apache.spark.sql.avro.AvroSerializer:" in line for line in spark_log)
    assert "state schema: custom_state (operator 0), state variable session: field channel string added" in rest.stdout
    # Every session, those open across the change too, counted as if the query had never stopped.
    assertDataFrameEqual(read_output(spark, settings.sink), batch_expectation(spark, settings))
    schemas = sorted(path.name for path in (checkpoint / "state" / "0" / "_stateSchema" / "default").glob("[0-9]*"))
    assert len(schemas) == 2, schemas  # Spark wrote the evolved schema beside the first


@pytest.mark.operator
@CUSTOM_STATE
def test_unsaferow_refuses_a_nullable_field_added(write_settings, tmp_path):
    path, _, _ = first_run(tmp_path, write_settings, "unsaferow", files=2)
    checkpoint = tmp_path / "checkpoint"
    held = digest(checkpoint)
    with edited_query(ADD_CHANNEL, module="sessions.py"):
        checked = run_cli("check", "--settings", str(path))
    refusal = one_line(checked, "checkpoint error: the state's schema changed in a way Spark refuses:")
    assert (
        "state variable session: field channel added: with the UnsafeRow encoding (unsaferow) Spark keeps a"
        " state's fields as they were; only a checkpoint started with state_store.encoding_format avro takes"
        " added or removed fields (the checkpoint " in refusal
    ), refusal
    assert digest(checkpoint) == held


# The windowed count gains an aggregate (kept by the filter after it, so that Spark cannot prune it).
MORE_AGGREGATES = {
    '.agg(F.count(F.lit(1)).alias("events"))': (
        '.agg(F.count(F.lit(1)).alias("events"), F.max("event_id").alias("last_id"))'
        '.where(F.col("last_id").isNotNull())'
    )
}


@pytest.mark.skipif(BAKED_OPERATOR != DEFAULT_OPERATOR, reason="edits the windowed aggregation's agg")
def test_an_aggregation_gaining_a_column_is_refused_by_spark_with_the_way_on(write_settings, tmp_path):
    """An aggregation's state schema is Spark's to compute: check cannot see it, and Spark refuses it at
    the first batch; the job adds the way on to Spark's line, and nothing is committed."""
    path, changes, waiting = first_run(tmp_path, write_settings, "unsaferow", files=3, provider=ANY_PROVIDER)
    checkpoint = tmp_path / "checkpoint"
    committed, state = committed_batches(checkpoint), digest(checkpoint / "state")
    for file in waiting:
        file.rename(Path(changes["source"]["files"]["path"]) / file.name)
    with edited_query(MORE_AGGREGATES):
        started = run_main("--settings", str(path))
    assert started.returncode == 1, started.stderr[-3000:]
    assert "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE" in started.stderr
    assert (
        "checkpoint: the query's state schema no longer fits the one in the checkpoint (Spark's"
        " STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE; no batch ran on the changed query). Either change the query"
        " back, or set query.checkpoint_location to a new directory" in started.stderr.splitlines()[-1]
    ), started.stderr[-3000:]
    assert committed_batches(checkpoint) == committed and digest(checkpoint / "state") == state
