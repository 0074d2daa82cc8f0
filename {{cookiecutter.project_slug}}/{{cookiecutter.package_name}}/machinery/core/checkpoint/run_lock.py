"""One process at a time on a checkpoint: the job, or a command that rewrites the checkpoint.

Spark does not stop a second process from writing the same checkpoint (two drivers, or a
repartition under a running job): both write the next batch and the checkpoint is damaged. The
holder takes an exclusive lock on the empty file `<checkpoint>/.running` for as long as it works
and removes the file when done; the kernel drops the lock when its processes end (the holder and the
JVM it started), even by SIGKILL, so a crash leaves at most an empty file that locks nothing, and
nothing is ever written into it. Only a checkpoint on the local file system can be locked.

The driver JVM a holder starts shares the lock (it inherits the locked file, held_lock_fds): Python
killed alone (`kill -9` of its pid), the JVM runs on for a few seconds, still writing, until it sees
its Python gone. The lock lasts until it exits too. A start meeting such a lock, whose locker is gone
but held by its JVM, waits for that JVM to exit (at most ORPHAN_WAIT_SECONDS) instead of writing beside it.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from .files import local_checkpoint
from .lease import leasing
from .object_store import STORES, store_of

LOCK_FILE = ".running"
LOCK_TABLE = "/proc/locks"  # Linux's table of the locks held, with the pid that took each
# A JVM whose Python ended exits once it sees its stdin closed and has run its shutdown hooks: seconds.
ORPHAN_WAIT_SECONDS = 60.0
SAY_WAIT_AFTER_SECONDS = 1.0
_HELD: dict[Path, int] = {}  # checkpoint -> the locked file's descriptor, while this process holds it


class CheckpointBusy(Exception):
    """Another process holds the checkpoint; the message names it and the way on."""


@contextmanager
def holding(location: str, purpose: str, lease_seconds: float) -> Iterator[None]:
    """Hold the checkpoint's lock for the block: this machine's lock on a local disk, a lease on S3 (lease.py:
    `lease_seconds` long), nothing elsewhere (said in a line: another store has no lease here yet)."""
    checkpoint = local_checkpoint(location)
    scheme = store_of(location)
    if scheme == "s3a":
        with leasing(location, purpose, lease_seconds):
            yield
        return
    if checkpoint is None:
        if scheme is not None:
            print(
                f"checkpoint: {location} is not locked against a second driver: a lease is kept on s3a:// only,"
                f" and {STORES[scheme]} has none here yet; start one driver at a time on it",
                file=sys.stderr,
            )
        yield
        return
    created = next((folder for folder in reversed([checkpoint, *checkpoint.parents]) if not folder.exists()), None)
    checkpoint.mkdir(parents=True, exist_ok=True)
    try:
        lock, made_the_file = _acquire(checkpoint, purpose)
        with lock:
            _HELD[checkpoint] = lock.fileno()
            try:
                yield
            finally:
                del _HELD[checkpoint]
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
        if not _locked(lock, checkpoint):
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


def _locked(lock: IO[str], checkpoint: Path) -> bool:
    """Lock it now; or, when the process that took the lock is gone (its JVM, or the JVM's children,
    still hold it open while they exit), once they have exited: at most ORPHAN_WAIT_SECONDS."""
    started, said = None, False
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            locker = _locker(checkpoint)
            if locker is None and not Path(LOCK_TABLE).exists():
                return False  # no kernel lock table to tell a live holder from an ending one
            if locker is not None and _alive(locker):
                return False
            now = time.monotonic()
            if started is None:
                started = now
            elif now - started > ORPHAN_WAIT_SECONDS:
                return False
            elif not said and now - started > SAY_WAIT_AFTER_SECONDS:  # a killed JVM is gone by then, unsaid
                orphan = _orphaned_holder(checkpoint, locker)
                if orphan is not None:
                    said = True
                    print(
                        f"checkpoint: waiting for process {orphan}, the Spark JVM of a job whose Python ended, to"
                        f" exit (it still holds {checkpoint}; at most {ORPHAN_WAIT_SECONDS:.0f} s)",
                        file=sys.stderr,
                        flush=True,
                    )
            time.sleep(0.05)


def held_lock_fds() -> tuple[int, ...]:
    """The descriptors of the locks this process holds: a JVM it starts inherits them (pass_fds)."""
    return tuple(_HELD.values())


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
    """The holder's pid from the kernel's lock table (Linux), to name it; an orphaned JVM by its own."""
    locker = _locker(checkpoint)
    orphan = _orphaned_holder(checkpoint, locker)
    if orphan is not None:
        return f"process {orphan} (the Spark JVM of a job whose Python ended; it exits within seconds)"
    return "another process" if locker is None else f"process {locker}"


def _locker(checkpoint: Path) -> int | None:
    """The pid that took the lock, from the kernel's lock table (Linux): 0 once that process is gone."""
    try:
        inode = os.stat(checkpoint / LOCK_FILE).st_ino
        with open(LOCK_TABLE) as table:
            for line in table:
                fields = line.split()
                if len(fields) > 5 and fields[1] == "FLOCK" and fields[5].endswith(f":{inode}"):
                    return int(fields[4])
    except (OSError, ValueError):
        pass
    return None


def _alive(pid: int) -> bool:
    """Whether the process runs (a zombie, killed and not yet reaped, does not: a container's init may
    never reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _orphaned_holder(checkpoint: Path, locker: int | None) -> int | None:
    """A process holding the lock though `locker`, the one that took it (_locker), is gone (a JVM that
    inherited it), by pid: of the processes that hold the locked file open (a JVM's own children may
    too), the eldest."""
    if locker is None or _alive(locker):
        return None
    path, holders = str(checkpoint / LOCK_FILE), {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                if any(os.readlink(fd) == path for fd in (proc / "fd").iterdir()):
                    holders[int(proc.name)] = _parent(proc)
            except OSError:  # another user's process, or one that just ended
                continue
    return next((pid for pid, parent in holders.items() if parent not in holders), None)


def _parent(proc: Path) -> int:
    return int((proc / "stat").read_text().rsplit(") ", 1)[1].split()[1])
