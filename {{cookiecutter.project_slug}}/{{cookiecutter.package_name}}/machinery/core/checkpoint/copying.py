"""A folder copied, or a file written, whole or not at all: under a temporary name, renamed when complete.

A kill in the middle leaves only `<target>.partial`, never a half-filled target; the next attempt
removes it and starts again. Repartition's copy of the checkpoint and savepoints are made this way.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

PARTIAL = ".partial"  # a copy being made


@contextmanager
def made_whole(target: Path) -> Iterator[Path]:
    """The folder to fill (beside target, created by the block); renamed to target when the block ends
    without an error, removed when it ends with one."""
    partial = target.with_name(target.name + PARTIAL)
    shutil.rmtree(partial, ignore_errors=True)
    try:
        yield partial
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    partial.rename(target)


def write_atomically(path: Path, data: bytes) -> None:
    """path holds data whole or as it was: written beside it under a hidden name, then renamed over it."""
    temporary = path.with_name(f".{path.name}.rewriting")
    temporary.write_bytes(data)
    os.replace(temporary, path)


def copy_whole(source: Path, target: Path, ignore: Callable[[str, list[str]], set[str]] | None = None) -> None:
    """source copied to target (which must not exist), whole or not at all; symbolic links kept as links."""
    with made_whole(target) as partial:
        shutil.copytree(source, partial, symlinks=True, ignore=ignore)
