"""State files checked by their own checksums, without Spark: the RocksDB snapshot each store loads
first, before Spark starts, and every state file against its local checksum when a load failed.

A RocksDB snapshot is a zip file (`<version>.zip`, or `<version>_<unique id>.zip` in checkpoint
format version 2) beside the changelogs of its state store. On a restart each store loads the
newest snapshot at or below the version it continues from, then replays the changelogs after it.
A damaged snapshot fails that load: Spark then says only "An error occurred during loading state".
The zip format holds a CRC-32 of each entry, so a damaged snapshot is found here, by name, without
Spark: with auto snapshot repair (and changelogs to replay) Spark skips it, otherwise the start is
refused naming it. Only reads.
"""

from __future__ import annotations

import struct
import zipfile
import zlib
from pathlib import Path

from ...core.checkpoint.files import RESTORE_OR_RESTART, state_files
from ...core.confs import MAX_REPAIR_REPLAY_CONF, MAX_REPAIR_REPLAY_DEFAULT
from ...core.settings import Settings


def snapshot_version(path: Path) -> int | None:
    """The state version a snapshot file holds, None for a file that is not a snapshot."""
    number = path.name.removesuffix(".zip").split("_")[0]
    return int(number) if path.name.endswith(".zip") and number.isdigit() else None


def first_loaded_snapshots(checkpoint: Path, last_committed: int) -> list[Path]:
    """Per state store folder, the snapshot files of the newest version at or below the one the next
    batch loads (batch N commits state version N + 1): those a restart reads first."""
    newest: dict[Path, tuple[int, list[Path]]] = {}
    for path in sorted((checkpoint / "state").rglob("*.zip")):
        version = snapshot_version(path)
        if version is None or version > last_committed + 1:
            continue
        held, files = newest.get(path.parent, (-1, []))
        if version > held:
            newest[path.parent] = (version, [path])
        elif version == held:  # format version 2: a retried batch leaves several unique ids
            files.append(path)
    return [path for _, files in newest.values() for path in files]


def damaged(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as snapshot:
            return snapshot.testzip() is not None
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error):  # zlib's: a flipped byte inside compressed data
        return True


def repair_base(store: Path, version: int, max_replay: int) -> int | None:
    """The version auto snapshot repair would rebuild `version` of a store from, past its damaged
    snapshot: the newest sound snapshot below it (0, the empty state, when none is), if no more than
    `max_replay` versions back and every changelog after it is there to replay; None when there is
    no such version (maintenance deleted the changelogs before the oldest snapshot it keeps)."""
    sound = [
        found
        for path in store.glob("*.zip")
        if (found := snapshot_version(path)) is not None and found < version and not damaged(path)
    ]
    base = max(sound, default=0)
    changelogs = {path.name.split("_")[0].split(".")[0] for path in store.glob("*.changelog")}
    replayable = all(str(needed) in changelogs for needed in range(base + 1, version + 1))
    return base if version - base <= max_replay and replayable else None


def snapshot_findings(settings: Settings, checkpoint: Path, last_committed: int) -> tuple[list[str], list[str]]:
    """(notes, refusals): each damaged snapshot a restart would load, and what Spark does about it."""
    store = settings.state_store
    bad = [path for path in first_loaded_snapshots(checkpoint, last_committed) if damaged(path)]
    if not bad:
        return [], []
    notes, refusals = [], []
    loaded = last_committed + 1  # batch N commits state version N + 1, which the next batch loads
    configured = str(settings.spark.conf.get(MAX_REPAIR_REPLAY_CONF, MAX_REPAIR_REPLAY_DEFAULT))
    max_replay = int(configured) if configured.isdigit() else MAX_REPAIR_REPLAY_DEFAULT
    for path in bad:
        damage = f"{path} is damaged (its zip checksum fails)"
        base = repair_base(path.parent, loaded, max_replay)
        if not store.changelog_checkpointing:
            why = "without changelog checkpointing there are no changelogs to rebuild it from"
        elif base is None:
            why = (
                f"auto snapshot repair cannot rebuild version {loaded} of that state store: no sound snapshot below it"
                f" has every changelog after it kept, within {max_replay} versions"
            )
        elif store.integrity.auto_snapshot_repair:
            start = f"snapshot {base}" if base else "the empty state (version 0)"
            notes.append(
                f"{damage}; auto snapshot repair is on: Spark skips it and rebuilds version {loaded} of that state"
                f" store from {start} and the {loaded - base} changelogs after it"
            )
            continue
        else:
            why = (
                "set state_store.integrity.auto_snapshot_repair to true (Spark then rebuilds that version from an"
                " older snapshot and the changelogs after it)"
            )
        refusals.append(f"{damage} and Spark would fail loading it: {why}; or {RESTORE_OR_RESTART}")
    return notes, refusals


def local_checksum_failures(checkpoint: Path) -> list[Path]:
    """State files that differ from the checksum Hadoop's local file system wrote beside them
    (`.<name>.crc`: "crc", 0, the bytes per checksum, then a CRC-32 per chunk). Spark's own message
    for a damaged changelog is "Stream is corrupted", without the file; only local checkpoints have
    these checksum files."""
    failing = []
    for checksum in state_files(checkpoint, ".*.crc"):
        path = checksum.with_name(checksum.name[1:].removesuffix(".crc"))
        raw = checksum.read_bytes()
        if not path.is_file() or raw[:4] != b"crc\x00" or len(raw) < 8:
            continue
        chunk = struct.unpack(">i", raw[4:8])[0]
        data = path.read_bytes()
        sums = b"".join(struct.pack(">I", zlib.crc32(data[i : i + chunk])) for i in range(0, len(data), chunk))
        if sums != raw[8:]:
            failing.append(path)
    return failing
