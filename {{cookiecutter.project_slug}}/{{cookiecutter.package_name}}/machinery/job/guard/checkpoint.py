"""The checkpoint guard: refuse to start when settings say one thing and the checkpoint another.

Spark records some confs in every `offsets/<batch>` file (the state store provider, the shuffle
partitions, state format versions) and on restart silently uses the recorded values. It also
records each stateful operator and its state stores in `state/<operator>/_metadata` (what the
`state-metadata` data source reads). The output mode it records nowhere: the state key record
(state_fit.KeyRecord) holds it. The guard reads those files, without starting Spark, and
compares them with what these settings would set. It only reads: a refused start leaves the
checkpoint byte for byte as it was.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

from ...core.checkpoint.file_access import LocalFiles, LocationPath, local_resolved
from ...core.checkpoint.files import (
    LANDING_FLAGS,
    LOCAL,
    START_OVER,
    CheckpointRead,
    CheckpointUnreadable,
    Files,
    interrupted,
    local_checkpoint,
    read_checkpoint,
    reader_root,
)
from ...core.checkpoint.object_store import StoreFiles, store_of
from ...core.confs import (
    ENCODING_CONF,
    EVICTING_JOIN_FORMAT,
    EVICTING_JOIN_FORMAT_FROM,
    JOIN_FORMAT_CONF,
    MANAGED_CONFS,
    PARTITIONS_CONF,
    PROVIDER_CONF,
    STATE_STORE,
    provider_name,
    spark_release,
)
from ...core.contract import PACKAGE
from ...core.operators import OPERATORS
from ...core.real_time import STATE_NAMES
from ...core.settings import Settings, connect_url
from ..endpoints.delta import mode_written
from ..spark.session import spark_confs
from .output_check import (
    behind_notes,
    check_sink_log,
    lost_output,
    output_ahead,
    output_elsewhere,
    output_folder,
    output_place,
    with_output,
)
from .spark_moves import spark_move
from .state_checks import snapshot_findings
from .state_fit import KeyRecord


@dataclass(frozen=True)
class Drift:
    """One setting whose value differs from the one the checkpoint holds."""

    setting: str
    in_settings: str
    in_checkpoint: str
    why: str
    # A way to convert the existing state, where there is one.
    convert: str = ""

    def message(self, checkpoint: str) -> str:
        keep = self.convert or " (the existing state cannot be converted)"
        return (
            f"{self.setting} is {self.in_settings} in settings, but the checkpoint {checkpoint} holds"
            f" {self.in_checkpoint}: {self.why} Either set {self.setting} back to {self.in_checkpoint},"
            f" or {START_OVER}{keep}."
        )


@dataclass
class GuardReport:
    checkpoint: str
    last_batch: int | None = None
    drifts: list[Drift] = field(default_factory=list)
    # What cannot be set back: output lost, say. One line each, with the way on.
    refusals: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # What the checkpoint's files say, for the checks that need the query's plan (None when not local).
    held: CheckpointRead | None = None

    @property
    def consistent(self) -> bool:
        return not self.drifts and not self.refusals


def output_seen(settings: Settings, files: Files) -> bool:
    """Whether the guard compares the output with the checkpoint: where this machine reads the checkpoint
    itself (its disk, an object store), and so the output; or the output is on an object store, which this
    machine reads whoever runs the job."""
    return isinstance(files, (LocalFiles, StoreFiles)) or bool(store_of(settings.sink.path))


def check_checkpoint(
    settings: Settings, files: Files = LOCAL, output_seen: bool = True, server_version: str | None = None
) -> GuardReport:
    """Compare the settings with the checkpoint they point at (nothing to compare when there is none), its
    files read where they are (session_files.py checkpoint_files: on a Spark Connect server's disk, through
    the session). The output is compared where this machine sees it only (`output_seen`): Spark reads no
    file of the parquet sink's log (`_spark_metadata`) through a session, and the deltalake library reads
    from this machine's disk. `server_version`: a Spark Connect server's release (spark.version), which runs the
    query there; without one, this machine's pyspark runs it, and through Connect the release is not checked."""
    location = settings.query.checkpoint_location
    report = GuardReport(location)
    checkpoint = reader_root(location, files)
    if checkpoint is None:
        report.notes.append(f"checkpoint {location} is not on the local file system; the guard cannot read it")
        return report
    unfinished = interrupted(checkpoint, files)
    if unfinished is not None:  # checked first: mid-way the checkpoint may even be missing
        raise CheckpointUnreadable(unfinished.message())
    held = read_checkpoint(checkpoint, files)
    if output_seen:
        held = with_output(settings, held)
        check_sink_log(held.sink_log)
        report.refusals += output_ahead(settings, held)
    elif settings.sink.writes_files:
        report.notes.append(
            f"sink.path {settings.sink.path} is not compared with the checkpoint before the start: it is on the Spark"
            " Connect server's file system, and Spark reads no file of an output's log through a session"
        )
    report.held = held
    if held.last_batch is None:
        report.notes.append(f"no checkpoint yet at {location}: this run starts one")
        return report
    report.last_batch = held.last_batch
    # Without state, the state store's confs and the partitions it is split into pin nothing that matters.
    pinned = {key: value for key, value in held.pinned.items() if not (held.stateless and _of_state(key))}
    report.drifts += conf_drifts(settings, pinned)
    report.drifts += [] if held.stateless else format_version_drifts(settings, held)
    join_refusals = join_format_refusals(held)
    report.refusals += join_refusals
    # A join's format 4 on an older Spark is said more exactly there. Through Spark Connect the server runs the
    # query, in its own release: the record names that one (state_fit.check_state_key), not this pyspark.
    # The state key record, read once: the Spark release and the output mode its results were written in.
    record = None if held.stateless else KeyRecord(None, location, files)
    running = server_version or (pyspark.__version__ if connect_url(settings.spark.remote) is None else None)
    if record is not None and not join_refusals and running is not None:
        written = record.spark_version()
        operators = [info["operatorName"] for info in held.operators]
        move_notes, move_refusals = spark_move(written, running, operators)
        report.notes += move_notes
        report.refusals += move_refusals
    report.drifts += source_drifts(settings, held.last_batch, held.offsets)
    mode_drifts, mode_notes = output_mode_drifts(settings, held, record, output_seen)
    report.drifts += mode_drifts
    report.notes += mode_notes
    report.refusals += moved_paths(settings, held)
    report.refusals += lost_output(settings, held) if output_seen else []
    report.notes += behind_notes(settings, held) if output_seen else []
    if not any(drift.setting == "state_store.provider" for drift in report.drifts):
        report.notes += changelog_notes(settings, checkpoint, files)
        if settings.state_store.provider == "rocksdb" and held.last_committed is not None and files is not LOCAL:
            where = "an object store" if store_of(location) else "the Spark Connect server's file system"
            report.notes.append(
                f"the RocksDB snapshots of {location} are not checked before the start: they are on {where}, and"
                " each would be copied here whole; Spark checks each as it loads it"
            )
        elif settings.state_store.provider == "rocksdb" and held.last_committed is not None:
            notes, refusals = snapshot_findings(settings, checkpoint, held.last_committed)
            report.notes += notes
            report.refusals += refusals
    return report


# Why a pinned conf cannot change, for the confs whose reason is their own.
PINNED_BECAUSE = {
    PROVIDER_CONF: "Spark keeps the provider a checkpoint was started with and ignores a new one.",
    PARTITIONS_CONF: "the state is split into that many partitions, and Spark keeps using them.",
    ENCODING_CONF: "the state rows are encoded that way, and Spark keeps the encoding a checkpoint was started with.",
}


def conf_drifts(settings: Settings, pinned: dict[str, str]) -> list[Drift]:
    wanted = spark_confs(settings)
    drifts = []
    for key, recorded in pinned.items():
        if key not in wanted or wanted[key] == recorded:
            continue
        if key == JOIN_FORMAT_CONF and key not in settings.spark.conf:
            continue  # the job's choice for a new checkpoint; Spark keeps the one this checkpoint holds
        in_settings, held, convert = wanted[key], recorded, ""
        if key == PROVIDER_CONF:
            in_settings = settings.state_store.provider
            named = provider_name(recorded)
            held = recorded if named == in_settings else named  # the same name, on the other platform
        elif key == PARTITIONS_CONF:
            convert = repartition_advice(provider_name(pinned.get(PROVIDER_CONF, "")), wanted[key])
        why = PINNED_BECAUSE.get(key, "Spark keeps the value the checkpoint was started with.")
        drifts.append(Drift(MANAGED_CONFS.get(key, f"spark.conf.{key}"), in_settings, held, why, convert))
    return drifts


def _of_state(conf: str) -> bool:
    return conf == PARTITIONS_CONF or conf.startswith(STATE_STORE)


def format_version_drifts(settings: Settings, checkpoint: CheckpointRead) -> list[Drift]:
    """The state checkpoint format is not among the offsets' confs: Spark reads it from the conf on each
    start. A commit record of format version 2 names the unique id of each state store's version (its
    files are named after it); one of version 1 does not."""
    held = checkpoint.format_version
    wanted = settings.state_store.integrity.checkpoint_format_version
    if held is None or held == wanted:
        return []
    return [
        Drift(
            "state_store.integrity.checkpoint_format_version",
            str(wanted),
            str(held),
            f"the state was written in format version {held} (see the commit records in {checkpoint.checkpoint}/commits), and"
            f" Spark would look for its files as version {wanted} names them."
            + (
                " Spark's real-time mode (query.trigger real_time) runs on format version 2 only: keep an interval"
                " trigger on this checkpoint."
                if settings.query.real_time and held == 1
                else ""
            ),
        )
    ]


def join_format_refusals(held: CheckpointRead, spark_version: str = pyspark.__version__) -> list[str]:
    """A join's state in the evicting format, on a Spark that runs it behind a testing flag only."""
    joins = [info for info in held.operators if info.get("operatorName") == OPERATORS["stream_stream_join"].spark_name]
    if not joins or held.pinned.get(JOIN_FORMAT_CONF) != EVICTING_JOIN_FORMAT:
        return []
    if spark_release(spark_version) >= EVICTING_JOIN_FORMAT_FROM:
        return []
    since = ".".join(map(str, EVICTING_JOIN_FORMAT_FROM))
    return [
        f"the checkpoint's join state is in format {EVICTING_JOIN_FORMAT} ({JOIN_FORMAT_CONF}, pinned in its offsets),"
        f" which Spark releases from {since} on and this Spark {spark_version} does not read: start it on"
        f" pyspark {since} or later (pin it in pyproject.toml), or {START_OVER}"
    ]


def source_drifts(settings: Settings, batch: int, offsets: list[str]) -> list[Drift]:
    """The kind of each source, and Kafka's topics, as a batch's offsets show them: Spark reads a
    checkpoint's offsets with the source the query has now, and fails deep inside when it is another."""
    held = sorted(filter(None, (_offset_kind(line) for line in offsets)))
    wanted = sorted(_source_kind(source) for source in settings.inputs.values())
    if not held or [kind for kind, _ in held] == [kind for kind, _ in wanted]:
        return _topic_drifts(settings, held)
    sections = " and ".join(f"{section}.type" for section in settings.inputs)
    return [
        Drift(
            sections,
            " + ".join(kind for kind, _ in wanted),
            " + ".join(kind for kind, _ in held),
            f"Spark continues a checkpoint from the offsets its source wrote (those of batch {batch}),"
            " and another kind of source cannot read them.",
        )
    ]


# The state of an aggregation: open results (a window's count so far) that the two modes write differently.
_AGGREGATIONS = {OPERATORS[name].spark_name for name in ("aggregation", "session_window")} | set(STATE_NAMES)
# What a switch to each mode does to the results an aggregation's state holds.
_SWITCHED_TO = {
    "update": "its state holds results not written yet (windows still open), which append mode writes once final;"
    " update mode writes a result only in a batch that changes it, so those the watermark closes without a new"
    " event would never be written.",
    "append": "update mode has written the results still open in its state (a window's count so far); append mode"
    " would write each again once final, beside the first.",
}


def output_mode_drifts(
    settings: Settings, held: CheckpointRead, record: KeyRecord | None, output_seen: bool
) -> tuple[list[Drift], list[str]]:
    """sink.output_mode against the mode the checkpoint's results were written in, where its state holds an
    aggregation's (a stateless query, a deduplication, a join write each row once, final, in either mode).
    The state key record names the mode; for a checkpoint of an earlier version, which has none, the Delta
    table's log where it tells (mode_written), else the mode in settings is taken, said in a note, and the
    start records it. (Drifts, notes.)"""
    if record is None or held.last_committed is None or not _holds_aggregation(held):
        return [], []
    location, wanted = settings.query.checkpoint_location, settings.sink.output_mode
    written, origin = record.output_mode(), f"recorded in {record.folder}"
    place = output_place(settings) if settings.sink.type == "delta" and output_seen else None
    if written is None and place is not None and held.query_id is not None:
        written, origin = mode_written(place[0], held.query_id, place[1]), f"read from the Delta log of {place[0]}"
    if written is None:
        return [], [
            f"{location} holds no record of the output mode its results were written in (a checkpoint of an earlier"
            f" version), and its output cannot tell: sink.output_mode {wanted} is taken for it, and the start"
            " records it"
        ]
    if written == wanted:
        return [], []
    why = f"the output mode its results were written in ({origin}); {_SWITCHED_TO[wanted]}"
    return [Drift("sink.output_mode", wanted, written, why)], []


def _holds_aggregation(held: CheckpointRead) -> bool:
    """An aggregation's state, or state whose operators the checkpoint does not name."""
    names = {info["operatorName"] for info in held.operators}
    return bool(names & _AGGREGATIONS) or held.has_state and not names


def moved_paths(settings: Settings, held: CheckpointRead) -> list[str]:
    """A job's folders copied or moved elsewhere (`cp -r` of a project, checkpoint and all): the
    checkpoint and the sink's log still name files by the folders they were written in. One line naming
    each such folder, and the way that moves every path along: a savepoint. (The settings pointed back
    at the old folders would tie this job to the other: its output's log would go on listing that job's
    files, lost with them.)"""
    moved = [*moved_landings(settings, held), *output_elsewhere(settings, held.sink_log)]
    if not moved:
        return []
    found = "; ".join(why for why, _ in moved)
    return [f"{found}. {savepoint_way(settings, held.checkpoint, moved[0][1])}; or {START_OVER}"]


def moved_landings(settings: Settings, held: CheckpointRead) -> list[tuple[str, Path]]:
    """A files source whose landing folder moved under the checkpoint: Spark's file source knows the
    files it read by their full path, and would read every file that moved along again. (why, the
    folder read before) for each."""
    landings = {
        section: (local_resolved(place[0]), place[1])
        for section, source in settings.inputs.items()
        if source.type == "files" and (place := _landing(source.files.path)) is not None
    }
    sources = [files for files in held.files_read if files]
    folders_read = [{local_resolved(path.parent) for path in files} for files in sources]
    moved = []
    for files, folders in zip(sources, folders_read, strict=True):
        if folders & {landing for landing, _ in landings.values()}:
            continue  # read from where the settings point
        for section, (landing, reader) in landings.items():
            read_by_another = any(landing in other for other in folders_read)
            if not read_by_another and any(reader.exists(landing / path.name) for path in files):
                before = sorted(folders)
                moved.append(
                    (
                        f"{section}.files.path is {landing} in settings, but the checkpoint {held.checkpoint} holds"
                        f" {', '.join(map(str, before))}: Spark's file source knows the files it read by their full"
                        " path, and would read every file that moved with the checkpoint again, writing each result"
                        " twice",
                        before[0],
                    )
                )
    return moved


def _landing(location: str) -> tuple[Path, Files] | None:
    """A landing folder and the reader of its files: this machine's disk, or an object store."""
    if store_of(location):
        return LocationPath(location), StoreFiles(location)
    local = local_checkpoint(location)
    return None if local is None else (local, LOCAL)


def savepoint_way(settings: Settings, checkpoint: Path, written_for: Path) -> str:
    """How a job copied or moved from the project of `written_for` takes its paths along: a savepoint of
    the job there, restored here, which moves every path Spark wrote (restore fills new folders only)."""
    output = output_folder(settings)
    places = [shlex.quote(str(folder)) for folder in (checkpoint, output) if folder is not None]
    landings = "".join(
        f" {LANDING_FLAGS[section]} {shlex.quote(source.files.path)}"
        for section, source in settings.inputs.items()
        if source.type == "files"
    )
    return (
        "Move the job with its paths by a savepoint: in the project it was copied or moved from (the one holding"
        f" {written_for}), python -m {PACKAGE} savepoint create SAVEPOINT; here, move the copied"
        f" {' and '.join(places)} aside, then python -m {PACKAGE} savepoint restore SAVEPOINT --checkpoint"
        f" {places[0]}{f' --output {places[1]}' if output else ''}{landings}"
    )


def _topic_drifts(settings: Settings, held: list[tuple[str, frozenset[str]]]) -> list[Drift]:
    """Kafka's topics: the checkpoint's against those subscribed (a pattern may match new ones)."""
    held_topics = frozenset().union(*(topics for kind, topics in held if kind == "kafka"))
    subscribed = [(section, source.kafka) for section, source in settings.inputs.items() if source.type == "kafka"]
    if not held_topics or any(kafka.topic is None for _, kafka in subscribed):
        return []
    wanted = frozenset(topic.strip() for _, kafka in subscribed for topic in str(kafka.topic).split(","))
    if held_topics <= wanted:
        return []
    return [
        Drift(
            " / ".join(f"{section}.kafka.topic" for section, _ in subscribed),
            ", ".join(sorted(wanted)),
            ", ".join(sorted(held_topics)),
            f"its offsets are those of these topics: the job would stop reading"
            f" {', '.join(sorted(held_topics - wanted))} and start the others from starting_offsets, which is not"
            " a continuation.",
        )
    ]


def _source_kind(source) -> tuple[str, frozenset[str]]:
    if source.type == "rate" and source.rate.rows_per_batch is not None:
        return "rate-micro-batch", frozenset()
    return source.type, frozenset()


def _offset_kind(line: str) -> tuple[str, frozenset[str]] | None:
    """What wrote an offset line of the offsets log: a number is the rate source's, a JSON object names
    the others by its keys; None for what is not known here."""
    text = line.strip()
    if text.isdigit():
        return "rate", frozenset()
    try:
        offset = json.loads(text)
    except ValueError:
        return None
    if not isinstance(offset, dict):
        return None
    if "logOffset" in offset:
        return "files", frozenset()
    if "offset" in offset:
        return "rate-micro-batch", frozenset()
    if offset and all(isinstance(value, dict) for value in offset.values()):
        return "kafka", frozenset(offset)
    return None


def repartition_advice(provider: str, partitions: str) -> str:
    """How the state can move to other partitions, on the provider that holds it."""
    if provider == "rocksdb":
        return (
            f"; or keep the state and move it into {partitions} partition{'' if partitions == '1' else 's'} with the"
            " job stopped:"
            f" python -m {PACKAGE} repartition --partitions {partitions}"
        )
    return (
        f" (a checkpoint of the {provider} store cannot be repartitioned: Spark's repartitioning reads RocksDB"
        " state only)"
    )


def changelog_notes(settings: Settings, checkpoint: Path, files: Files = LOCAL) -> list[str]:
    """Changelog checkpointing is not pinned: RocksDB reads snapshots and changelogs alike."""
    if settings.state_store.provider != "rocksdb":
        return []
    partitions = (partition for operator in files.list(checkpoint / "state") for partition in files.list(operator))
    written_before = any(path.suffix == ".changelog" for partition in partitions for path in files.list(partition))
    now = "on" if settings.state_store.changelog_checkpointing else "off"
    before = "with changelog files" if written_before else "without changelog files"
    return [
        f"changelog checkpointing is {now}; earlier runs wrote the state {before}. It may be toggled"
        " between runs: RocksDB restores from snapshots and changelogs alike."
    ]
