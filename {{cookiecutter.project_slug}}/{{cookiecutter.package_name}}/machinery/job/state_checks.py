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

from ..core.checkpoint.files import RESTORE_OR_RESTART, state_files
from ..core.settings import Settings


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


def snapshot_findings(settings: Settings, checkpoint: Path, last_committed: int) -> tuple[list[str], list[str]]:
    """(notes, refusals): each damaged snapshot a restart would load, and what Spark does about it."""
    store = settings.state_store
    bad = [path for path in first_loaded_snapshots(checkpoint, last_committed) if damaged(path)]
    if not bad:
        return [], []
    if store.integrity.auto_snapshot_repair and store.changelog_checkpointing:
        return [
            f"{path} is damaged (its zip checksum fails); auto snapshot repair is on: Spark skips it and"
            f" rebuilds version {snapshot_version(path)} of that state store from an older snapshot and the"
            " changelogs after it"
            for path in bad
        ], []
    repair = (
        "set state_store.integrity.auto_snapshot_repair to true (Spark then rebuilds that version from an older"
        " snapshot and the changelogs after it)"
        if store.changelog_checkpointing
        else "(without changelog checkpointing there are no changelogs to rebuild it from)"
    )
    return [], [
        f"{path} is damaged (its zip checksum fails) and Spark would fail loading it: {repair}; or {RESTORE_OR_RESTART}"
        for path in bad
    ]


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
