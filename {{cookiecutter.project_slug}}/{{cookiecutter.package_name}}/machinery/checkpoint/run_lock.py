"""One process at a time on a checkpoint: the job, or a command that rewrites the checkpoint.

Spark does not stop a second process from writing the same checkpoint (two drivers, or a
repartition under a running job): both write the next batch and the checkpoint is damaged. The
holder takes an exclusive lock on the empty file `<checkpoint>/.running` for as long as it works;
the kernel drops the lock when the process ends, even by SIGKILL, so a crash leaves nothing stale,
and nothing is ever written into the file. Only a checkpoint on the local file system can be locked.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .guard import local_checkpoint

LOCK_FILE = ".running"


class CheckpointBusy(Exception):
    """Another process holds the checkpoint; the message names it and the way on."""


@contextmanager
def holding(location: str, purpose: str) -> Iterator[None]:
    """Hold the checkpoint's lock for the block (nothing to hold for a remote checkpoint)."""
    checkpoint = local_checkpoint(location)
    if checkpoint is None:
        yield
        return
    created = next((folder for folder in reversed([checkpoint, *checkpoint.parents]) if not folder.exists()), None)
    checkpoint.mkdir(parents=True, exist_ok=True)
    try:
        with open(checkpoint / LOCK_FILE, "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise CheckpointBusy(
                    f"{checkpoint} is in use by {_process(checkpoint)} (a job or a repartition of this"
                    f" checkpoint): stop it first; {purpose} beside it would write the same batches and damage"
                    " the checkpoint"
                ) from None
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
    finally:
        if created is not None:
            _remove_if_unused(checkpoint, created)


def _remove_if_unused(checkpoint: Path, created: Path) -> None:
    """A start that failed before Spark wrote anything leaves no checkpoint folder behind."""
    if [entry.name for entry in checkpoint.iterdir()] != [LOCK_FILE]:
        return
    (checkpoint / LOCK_FILE).unlink()
    folder = checkpoint
    while True:
        try:
            folder.rmdir()
        except OSError:  # something else was put there meanwhile: it stays
            return
        if folder == created:
            return
        folder = folder.parent


def holder(checkpoint: Path) -> str | None:
    """Who holds the lock now ("process <pid>"), or None when nobody does. Reads, never creates."""
    try:
        lock = open(checkpoint / LOCK_FILE)  # noqa: SIM115 (flock needs the open file; closed below)
    except FileNotFoundError:
        return None
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _process(checkpoint)
        fcntl.flock(lock, fcntl.LOCK_UN)
        return None


def _process(checkpoint: Path) -> str:
    """The holder's pid from the kernel's lock table (Linux), to name it."""
    inode = os.stat(checkpoint / LOCK_FILE).st_ino
    try:
        with open("/proc/locks") as table:
            for line in table:
                fields = line.split()
                if len(fields) > 5 and fields[1] == "FLOCK" and fields[5].endswith(f":{inode}"):
                    return f"process {fields[4]}"
    except OSError:
        pass
    return "another process"
