"""The checkpoint guard: refuse to start when settings say one thing and the checkpoint another.

Spark records some confs in every `offsets/<batch>` file (the state store provider, the shuffle
partitions, state format versions) and on restart silently uses the recorded values. It also
records each stateful operator and its state stores in `state/<operator>/_metadata` (what the
`state-metadata` data source reads). The guard reads those files, without starting Spark, and
compares them with what these settings would set. It only reads: a refused start leaves the
checkpoint byte for byte as it was.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..contract import PACKAGE
from ..runtime.session import PROVIDER_CLASSES, spark_confs
from ..settings import Settings
from ..settings.model import INTEGRITY_CONFS

PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"
PARTITIONS_CONF = "spark.sql.shuffle.partitions"
ENCODING_CONF = "spark.sql.streaming.stateStore.encodingFormat"
# Pinned confs that settings own, and the setting that owns each; other pinned confs can only be
# set through spark.conf.
CONF_SETTINGS = {
    PROVIDER_CONF: "state_store.provider",
    PARTITIONS_CONF: "spark.shuffle_partitions",
    ENCODING_CONF: "state_store.encoding_format",
    INTEGRITY_CONFS["row_checksums"]: "state_store.integrity.row_checksums",
}


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
            f" or set query.checkpoint_location to a new directory and reprocess the input from the start{keep}."
        )


@dataclass
class GuardReport:
    checkpoint: str
    last_batch: int | None = None
    drifts: list[Drift] = field(default_factory=list)
    # What cannot be set back: output lost, say. One line each, with the way on.
    refusals: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def consistent(self) -> bool:
        return not self.drifts and not self.refusals


def check_checkpoint(settings: Settings) -> GuardReport:
    """Compare the settings with the checkpoint they point at (nothing to compare when there is none)."""
    location = settings.query.checkpoint_location
    report = GuardReport(location)
    checkpoint = local_checkpoint(location)
    if checkpoint is None:
        report.notes.append(f"checkpoint {location} is not on the local file system; the guard cannot read it")
        return report
    from .repartition import interrupted  # (repartition builds on this module)

    unfinished = interrupted(checkpoint)
    if unfinished is not None:  # checked first: mid-way the checkpoint may even be missing
        raise CheckpointUnreadable(unfinished.message())
    check_log_files(checkpoint)
    latest = latest_offsets(checkpoint)
    if latest is None:
        report.notes.append(f"no checkpoint yet at {checkpoint}: this run starts one")
        return report
    report.last_batch, pinned = latest
    report.drifts += conf_drifts(settings, pinned)
    report.drifts += format_version_drifts(settings, checkpoint)
    report.drifts += source_drifts(settings, checkpoint / "offsets" / str(report.last_batch))
    from ..endpoints.output_check import lost_output  # (it reads the checkpoint through this module)

    lost, note = lost_output(settings, checkpoint)
    report.refusals += lost
    report.notes += note
    if not any(drift.setting == "state_store.provider" for drift in report.drifts):
        report.notes += changelog_notes(settings, checkpoint)
        committed = last_committed(checkpoint)
        if settings.state_store.provider == "rocksdb" and committed is not None:
            from .state_checks import snapshot_findings  # (it builds on this module)

            notes, refusals = snapshot_findings(settings, checkpoint, committed)
            report.notes += notes
            report.refusals += refusals
    return report


def local_checkpoint(location: str) -> Path | None:
    """The folder of a checkpoint on the local file system, None for any other file system."""
    if "://" in location and not location.startswith("file:"):
        return None
    return Path(location.removeprefix("file://").removeprefix("file:"))


def latest_offsets(checkpoint: Path) -> tuple[int, dict[str, str]] | None:
    """(batch id, pinned confs) of the newest offsets file, or None without one."""
    path = highest_numbered(checkpoint / "offsets")
    if path is None:
        return None
    metadata = _offsets_metadata(path)
    return int(path.name), {key: str(value) for key, value in metadata.get("conf", {}).items()}


def last_committed(checkpoint: Path) -> int | None:
    """The newest batch with a commit record, None before the first commit."""
    path = highest_numbered(checkpoint / "commits")
    return None if path is None else int(path.name)


def batch_metadata(checkpoint: Path, batch: int) -> dict | None:
    """The metadata line of one batch's offsets file (its watermark, its pinned confs), None without one."""
    path = checkpoint / "offsets" / str(batch)
    return _offsets_metadata(path) if path.is_file() else None


def _offsets_metadata(path: Path) -> dict:
    lines = path.read_text(encoding="utf-8").splitlines()
    try:
        return dict(json.loads(lines[1]))
    except (IndexError, TypeError, ValueError):
        raise CheckpointUnreadable(
            f"{path}: not a Spark offsets file (no metadata line; half-written?); {RESTORE_OR_RESTART}"
        ) from None


def _numbered(folder: Path) -> list[Path]:
    """The entries of folder named by a number (batch, operator or version ids), in numeric order."""
    entries = [path for path in folder.iterdir() if path.name.isdigit()] if folder.is_dir() else []
    return sorted(entries, key=lambda path: int(path.name))


def highest_numbered(folder: Path) -> Path | None:
    entries = _numbered(folder)
    return entries[-1] if entries else None


class CheckpointUnreadable(Exception):
    """A checkpoint file the guard cannot parse; the message names it."""


RESTORE_OR_RESTART = (
    "restore the checkpoint from a copy, or set query.checkpoint_location to a new directory and reprocess"
    " the input from the start"
)


def check_log_files(checkpoint: Path) -> None:
    """Damage Spark reports badly or not at all, found before it starts: a half-written `metadata`
    (a Java stack trace otherwise), and a log entry's checksum file left without the entry (Spark
    then claims another query uses the checkpoint)."""
    metadata = checkpoint / "metadata"
    if metadata.is_file():
        try:
            json.loads(metadata.read_text(encoding="utf-8").splitlines()[0])["id"]
        except (IndexError, KeyError, TypeError, json.JSONDecodeError, UnicodeDecodeError):
            raise CheckpointUnreadable(
                f"{metadata}: not a Spark checkpoint metadata file (the query id); {RESTORE_OR_RESTART}"
            ) from None
    newest_commit = highest_numbered(checkpoint / "commits")
    if newest_commit is not None:
        lines = newest_commit.read_text(encoding="utf-8", errors="replace").splitlines()
        try:
            json.loads(lines[1]) if len(lines) > 1 else None
        except json.JSONDecodeError:
            checksum = newest_commit.parent / f".{newest_commit.name}.crc"
            raise CheckpointUnreadable(
                f"{newest_commit}: a half-written commit record; remove it and {checksum}, and Spark runs batch"
                f" {newest_commit.name} again (the sink skips what it already wrote); or {RESTORE_OR_RESTART}"
            ) from None
    for log in ("offsets", "commits"):
        folder = checkpoint / log
        for checksum in sorted(folder.glob(".*.crc")) if folder.is_dir() else ():
            entry = folder / checksum.name.removeprefix(".").removesuffix(".crc")
            if entry.name.isdigit() and not entry.exists():
                raise CheckpointUnreadable(
                    f"{checksum} is left without {entry} (the entry was removed or lost): remove {checksum} too,"
                    f" and Spark runs batch {entry.name} again from its offsets; or {RESTORE_OR_RESTART}"
                )


def empty_state_files(checkpoint: Path) -> list[Path]:
    """State files of zero bytes: a truncated write, which Spark reports without naming the file."""
    return sorted(path for path in (checkpoint / "state").rglob("*") if path.is_file() and path.stat().st_size == 0)


def conf_drifts(settings: Settings, pinned: dict[str, str]) -> list[Drift]:
    wanted = spark_confs(settings)
    drifts = []
    for key, recorded in pinned.items():
        if key not in wanted or wanted[key] == recorded:
            continue
        if key == PROVIDER_CONF:
            held = provider_name(recorded)
            drifts.append(
                Drift(
                    "state_store.provider",
                    settings.state_store.provider,
                    recorded if held == settings.state_store.provider else held,  # same name, other platform
                    "Spark keeps the provider a checkpoint was started with and ignores a new one.",
                )
            )
        elif key == PARTITIONS_CONF:
            drifts.append(
                Drift(
                    "spark.shuffle_partitions",
                    wanted[key],
                    recorded,
                    "the state is split into that many partitions, and Spark keeps using them.",
                    convert=repartition_advice(provider_name(pinned.get(PROVIDER_CONF, "")), wanted[key]),
                )
            )
        elif key == ENCODING_CONF:
            drifts.append(
                Drift(
                    "state_store.encoding_format",
                    wanted[key],
                    recorded,
                    "the state rows are encoded that way, and Spark keeps the encoding a checkpoint was started with.",
                )
            )
        else:
            drifts.append(
                Drift(
                    CONF_SETTINGS.get(key, f"spark.conf.{key}"),
                    wanted[key],
                    recorded,
                    "Spark keeps the value the checkpoint was started with.",
                )
            )
    return drifts


def format_version_drifts(settings: Settings, checkpoint: Path) -> list[Drift]:
    """The state checkpoint format is not among the offsets' confs: Spark reads it from the conf on each
    start. A commit record of format version 2 names the unique id of each state store's version (its
    files are named after it); one of version 1 does not."""
    held = held_format_version(checkpoint)
    wanted = settings.state_store.integrity.checkpoint_format_version
    if held is None or held == wanted:
        return []
    return [
        Drift(
            "state_store.integrity.checkpoint_format_version",
            str(wanted),
            str(held),
            f"the state was written in format version {held} (see the commit records in {checkpoint}/commits), and"
            f" Spark would look for its files as version {wanted} names them.",
        )
    ]


def held_format_version(checkpoint: Path, batch: int | None = None) -> int | None:
    """The state checkpoint format version of a batch's commit record (the newest one unless given): 2
    when it names the state files' unique ids. None without a record. Spark does not pin it."""
    record = highest_numbered(checkpoint / "commits") if batch is None else checkpoint / "commits" / str(batch)
    lines = record.read_text(encoding="utf-8", errors="replace").splitlines() if record else []
    if len(lines) < 2 or not lines[1].startswith("{"):
        return None
    return 2 if "stateUniqueIds" in json.loads(lines[1]) else 1


def source_drifts(settings: Settings, offsets_file: Path) -> list[Drift]:
    """The kind of each source, and Kafka's topics, as the checkpoint's offsets show them: Spark reads a
    checkpoint's offsets with the source the query has now, and fails deep inside when it is another."""
    held = sorted(filter(None, (_offset_kind(line) for line in offsets_file.read_text().splitlines()[2:])))
    wanted = sorted(_source_kind(source) for source in settings.inputs.values())
    if not held or [kind for kind, _ in held] == [kind for kind, _ in wanted]:
        return _topic_drifts(settings, held)
    sections = " and ".join(f"{section}.type" for section in settings.inputs)
    return [
        Drift(
            sections,
            " + ".join(kind for kind, _ in wanted),
            " + ".join(kind for kind, _ in held),
            f"Spark continues a checkpoint from the offsets its source wrote (those of batch {offsets_file.name}),"
            " and another kind of source cannot read them.",
        )
    ]


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


def stateful_operators(checkpoint: Path) -> list[dict]:
    """operatorInfo of each stateful operator from its state metadata file (v1 or v2), by operator id."""
    operators = []
    for directory in _numbered(checkpoint / "state"):
        metadata = _newest_metadata(directory / "_metadata")
        if metadata is None:
            continue
        lines = metadata.read_text(encoding="utf-8").splitlines()
        try:
            operators.append(json.loads(lines[1])["operatorInfo"])
        except (IndexError, KeyError, json.JSONDecodeError):
            raise CheckpointUnreadable(f"{metadata}: not a Spark state metadata file; {RESTORE_OR_RESTART}") from None
    return operators


def _newest_metadata(folder: Path) -> Path | None:
    if (folder / "metadata").is_file():  # version 1
        return folder / "metadata"
    return highest_numbered(folder / "v2")


def changelog_notes(settings: Settings, checkpoint: Path) -> list[str]:
    """Changelog checkpointing is not pinned: RocksDB reads snapshots and changelogs alike."""
    if settings.state_store.provider != "rocksdb":
        return []
    written_before = any(checkpoint.glob("state/*/*/*.changelog"))
    now = "on" if settings.state_store.changelog_checkpointing else "off"
    before = "with changelog files" if written_before else "without changelog files"
    return [
        f"changelog checkpointing is {now}; earlier runs wrote the state {before}. It may be toggled"
        " between runs: RocksDB restores from snapshots and changelogs alike."
    ]


def provider_name(provider_class: str) -> str:
    for classes in PROVIDER_CLASSES.values():
        for name, known in classes.items():
            if known == provider_class:
                return name
    return provider_class
