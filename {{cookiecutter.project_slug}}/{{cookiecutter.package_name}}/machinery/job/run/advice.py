"""The lines a failed run ends with: a cause the job knows said in one line with the ways on (a bad record,
the heap run out, a refused Delta batch, too few real-time slots, a broker or an object store gone), else where Spark's error points (damaged
checkpoint files, a folder not writable, a full disk, records Kafka deleted, a state schema Spark refused)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from ...core import real_time
from ...core.checkpoint.files import RESTORE_OR_RESTART, empty_state_files
from ...core.checkpoint.object_store import store_problems
from ...core.delta_merge import DELTA_SINK_REFUSED
from ...core.figures import human_bytes
from ...core.settings import Settings, nearest_existing_folder
from ...core.sizing.estimate import Estimate
from ...core.sizing.memory import memory_setting
from ..endpoints.kafka import KAFKA_ERROR, EndpointsChecked
from ..endpoints.sources import AHEAD_OF_ARRIVAL, BAD_RECORD_ERROR
from ..guard.state_checks import local_checksum_failures


def out_of_memory_line(settings: Settings, sizing: Estimate | None, heap_max: int | None) -> str:
    """The one line an OutOfMemoryError ends in: the state, the heap and the fix."""
    heap = f"{human_bytes(heap_max)} heap" if heap_max else f"heap (spark.driver_memory {settings.spark.driver_memory})"
    store = settings.state_store.provider
    if sizing is not None and store == "hdfs":
        needed = sizing.executor_heap_bytes
        state = f"the HDFS-backed state, estimated at {human_bytes(sizing.executor_state_bytes)} per executor"
        fix = (
            f"set spark.driver_memory (on a cluster spark.executor.memory) to {memory_setting(needed)} or more and start"
            " again (the checkpoint is intact: the batch runs again), or move the state to rocksdb on a new checkpoint"
        )
    else:
        state = f"the job's work beside its {store} state"
        fix = (
            "raise spark.driver_memory (on a cluster spark.executor.memory) and start again; the checkpoint is"
            " intact and the batch runs again"
        )
    return f"the JVM's {heap} ran out (java.lang.OutOfMemoryError) holding {state}; {fix}"


def damaged_checkpoint_advice(message: str, checkpoint: str) -> list[str]:
    """When Spark's error points into the checkpoint: the files concerned, and the ways out.

    Spark names a missing file, but not a truncated one ("An error occurred during loading
    state"); then the state files of zero bytes are named, or else the state folder.
    """
    root = checkpoint.removeprefix("file:").rstrip("/")
    if any(reason in message for reason in NOT_WRITABLE):
        return permission_advice(message, root)
    paths = {"/" + path.lstrip("/").rstrip(".,;:)") for path in re.findall(r"(?:file:)?(/[^\s'\"]+)", message)}
    named = sorted(_state_version(path) for path in paths if path.startswith(root + "/"))
    if not named and "CANNOT_LOAD_STATE_STORE" in message and "://" not in root:
        damaged = {*empty_state_files(Path(root)), *local_checksum_failures(Path(root))}
        named = [str(path) for path in sorted(damaged)] or [f"{root}/state (a state file there)"]
    if not named:
        return []
    return [
        *(f"checkpoint file: {path}" for path in named),
        f"The checkpoint is damaged there; nothing was committed past it. To recover, {RESTORE_OR_RESTART}.",
    ]


# What the file system says when this user may not write somewhere: not damage.
NOT_WRITABLE = ("Permission denied", "Read-only file system")


def permission_advice(message: str, checkpoint: str) -> list[str]:
    """A folder this user may not write in (a chmod, another owner, a read-only mount): the folders
    Spark names, and the fix, which restores nothing."""
    named = re.findall(r"(?:file:)?(/[^\n]*?) \((Permission denied|Read-only file system)\)", message)
    folders = sorted({str(Path(path).parent) for path, _ in named})
    target = checkpoint if all(folder.startswith(checkpoint + "/") for folder in folders) else " ".join(folders)
    if any(reason == "Read-only file system" for _, reason in named) or "Permission denied" not in message:
        fix = f"remount the file system of {target} read-write (or move it to one that is)"
    else:
        fix = f"give the user that runs the job write access: chmod -R u+rwX '{target}' (or chown -R it to that user)"
    return [
        *(f"not writable: {folder}" for folder in folders),
        f"This user may not write there ({' / '.join(sorted({reason for _, reason in named}) or NOT_WRITABLE)}):"
        f" nothing is damaged, and nothing was committed past the last batch. To go on, {fix}, then start again;"
        " the batch runs again.",
    ]


def disk_full_advice(message: str, settings: Settings) -> list[str]:
    """A full disk: the space left where the job writes, and that a restart after freeing it is safe."""
    if "No space left on device" not in message:
        return []
    places = {"query.checkpoint_location": settings.query.checkpoint_location}
    if settings.sink.writes_files:
        places["sink.path"] = settings.sink.path
    lines = []
    for setting, location in places.items():
        folder = nearest_existing_folder(location)
        if folder is not None:  # remote storage's free space cannot be asked here
            lines.append(f"disk full: {setting} {location} has {shutil.disk_usage(folder).free / 2**20:,.1f} MiB free")
    return [
        *lines,
        "Free space and start again: the batch that failed was not committed and runs again, and what was"
        " committed stays (a sink counts only committed batches).",
    ]


def data_loss_advice(message: str, settings: Settings) -> list[str]:
    """Kafka deleted records (retention, or by hand) before the job read them, and failOnDataLoss stopped it."""
    if "failOnDataLoss" not in message:
        return []
    sections = [section for section, source in settings.inputs.items() if source.type == "kafka"]
    setting = " / ".join(f"{section}.kafka.fail_on_data_loss" for section in sections)
    return [
        f"data loss: records the checkpoint still needed were deleted from Kafka before they were read"
        f" (retention ran first, or the topic was recreated); {setting} is true, so the job stopped and committed"
        f" nothing past them. Set it to false to go on without them (they are lost for the output), or replay"
        f" them from elsewhere into a new checkpoint; then raise the topic's retention.ms above the job's longest"
        f" stop."
    ]


def bad_record_advice(message: str, settings: Settings) -> list[str]:
    """A bad record a source refused with on_bad_record fail (endpoints/sources.py): where it came
    from (its file, or Kafka topic, partition and offset), what is wrong with it, the record, and the
    ways on."""
    # Spark's raise_error message (not the plan's text of that expression, which a failure's message may
    # quote); the record runs to the end of the line, but for the SQL states Spark appends to its messages.
    pattern = r"\[USER_RAISED_EXCEPTION\] " + BAD_RECORD_ERROR + r" (\S+) (.+?): (.+?); row (.*?)(?: SQLSTATE: \w+)*$"
    found = re.search(pattern, message, re.M)
    if found is None:
        return []
    section, origin, what, row = found.groups()
    source = settings.inputs.get(section)
    setting = f"{section}.{source.type}.on_bad_record" if source else "on_bad_record"
    bound = settings.query.max_event_time_ahead
    ahead = (
        f" (query.max_event_time_ahead, {bound}, is how far ahead of its arrival an event time may be;"
        " epoch milliseconds read as seconds land some 50,000 years ahead)"
        if AHEAD_OF_ARRIVAL in what
        else ""
    )
    # A real-time batch writes each result to Kafka as its record arrives: those before the bad one may be out.
    written = (
        "the results of its records before this one may be out already, and are written again when it runs again"
        if settings.query.real_time and settings.sink.type == "kafka"
        else "nothing of it was written"
    )
    return [
        f"bad record: {origin} holds {what}{ahead}: {row}; {setting} is fail,"
        f" so the batch stopped uncommitted ({written}). Fix or remove the row at its source, or"
        " set on_bad_record to drop to skip and count such rows; the next start runs the batch again."
    ]


def broker_gone_advice(message: str, endpoints: EndpointsChecked) -> list[str]:
    """Kafka's client gave up on a broker that stopped answering while the job ran (Spark's Kafka source
    tries 3 times, each within Kafka's 60 s API timeout, so some 3 minutes): where, and the way on."""
    found = KAFKA_ERROR.search(message)
    if found is None or found[1] != "TimeoutException":
        return []
    said = re.sub(r"( SQLSTATE: \w+)+$", "", found[2].strip())
    silent = endpoints.unanswered()
    now = f"no broker answers at {' nor at '.join(silent)} now" if silent else "a broker answers there again"
    return [
        f"kafka: the Kafka client gave up on the broker while the job ran (TimeoutException: {said}); {now}. The"
        " checkpoint holds every committed batch: start the job once the broker is back, and the batch in flight"
        " runs again (its results written again to a Kafka sink, which is at least once)"
    ]


# How S3A says its store stopped answering, after its retries: a connection refused (some 2 minutes with S3A's
# defaults), or no answer within its call timeout (a server that hangs).
STORE_GONE = re.compile(
    r"(\w+) on (s3a://\S+?): \S+?(?:SdkClientException: Unable to execute HTTP request: (.+?) \(SDK Attempt"
    r"|ApiCallTimeoutException: (Client execution did not complete before the specified timeout[^:]*))"
)


def store_gone_advice(message: str, settings: Settings) -> list[str]:
    """The object store stopped answering while the job ran: which call, whether it answers now, the way on."""
    found = STORE_GONE.search(message)
    if found is None:
        return []
    now = "it does not answer now" if store_problems(settings.locations) else "it answers again now"
    said = re.sub(r" \[[^]]*\]", "", found[3] or found[4]).strip()
    return [
        f"object store: S3 stopped answering while the job ran ({found[1]} on {found[2]}: {said}); {now}. The"
        " checkpoint holds every committed batch: start the job once the store answers, and the batch in flight"
        " runs again"
    ]


def real_time_slots_advice(message: str) -> list[str]:
    """A real-time batch Spark would not start for want of task slots (core/real_time.py): its one line."""
    line = real_time.slots_gone_line(message)
    return [] if line is None else [f"real-time: {line}"]


def delta_sink_refusal(message: str) -> list[str]:
    """A batch the Delta writer refused (endpoints/delta.py): its one line, which says the way on."""
    found = re.search(DELTA_SINK_REFUSED + r" (.+?)(?: SQLSTATE: \w+)*$", message, re.M)
    return [] if found is None else [f"delta sink: {found.group(1)}"]


def _state_version(path: str) -> str:
    """RocksDB names N.changelog when version N is missing, even if it was written as N.zip."""
    if path.endswith(".changelog") and not Path(path).exists() and not Path(path).with_suffix(".zip").exists():
        version = Path(path).with_suffix("")
        return f"{version}.zip or {version}.changelog (neither is there: version {version.name} of this state is lost)"
    return path
