"""One process at a time on a checkpoint: the job, or a command that rewrites the checkpoint.

Spark does not stop a second process from writing the same checkpoint (two drivers, or a
repartition under a running job): both write the next batch and the checkpoint is damaged. The
holder takes an exclusive lock on the empty file `<checkpoint>/.running` for as long as it works
and removes the file when done; the kernel drops the lock when the process ends, even by SIGKILL,
so a crash leaves at most an empty file that locks nothing, and nothing is ever written into it. Only a checkpoint on the local file system can be locked.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from .files import local_checkpoint

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
        lock, made_the_file = _acquire(checkpoint, purpose)
        with lock:
            try:
                yield
            finally:
                if made_the_file:  # removed while still held: a refused start leaves the checkpoint as it was
                    (checkpoint / LOCK_FILE).unlink(missing_ok=True)
    finally:
        if created is not None:
            _remove_if_empty(checkpoint, created)


def _acquire(checkpoint: Path, purpose: str) -> tuple[IO[str], bool]:
    """The open, locked lock file, and whether this process created it (then it removes it when done)."""
    path = checkpoint / LOCK_FILE
    for _ in range(5):
        made_the_file = not path.exists()
        lock = open(path, "a")  # noqa: SIM115 (held open for the block: the lock lives with the file)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise CheckpointBusy(
                f"{checkpoint} is in use by {_process(checkpoint)} (a job or a repartition of this"
                f" checkpoint): stop it first; {purpose} beside it would write the same batches and damage"
                " the checkpoint"
            ) from None
        try:
            current = os.stat(path).st_ino == os.fstat(lock.fileno()).st_ino
        except FileNotFoundError:
            current = False
        if current:
            return lock, made_the_file
        lock.close()  # its last holder removed the file we locked meanwhile: lock the one in place now
    raise CheckpointBusy(f"{checkpoint}: its lock file {LOCK_FILE} keeps being replaced; is a start looping on it?")


def _remove_if_empty(checkpoint: Path, created: Path) -> None:
    """A start that failed before Spark wrote anything leaves no checkpoint folder behind."""
    folder = checkpoint
    while True:
        try:
            folder.rmdir()
        except OSError:  # not empty (Spark wrote there, or something else was put there): it stays
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
