"""What a run needs of this machine beyond valid settings: folders it can write in, and the environment
variables that hold the secrets set."""

from __future__ import annotations

import os
import shlex
import tempfile
from pathlib import Path

from ..checkpoint.files import local_checkpoint
from ..checkpoint.sink_log import DELTA_LOG, LOG_DIR


def nearest_existing_folder(location: str) -> Path | None:
    """The local folder that is location or its nearest existing parent; None for remote storage."""
    folder = local_checkpoint(location)
    if folder is None:
        return None
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def write_problems(setting: str, location: str) -> list[str]:
    """Whether a file can be created where location is, or would be: found before Spark, not mid-batch.

    The probe is a temporary file in the location, or in its nearest existing parent, removed at
    once, so nothing is left behind (a refused run creates no directory).
    """
    folder = nearest_existing_folder(location)
    if folder is None:
        return []
    try:
        tempfile.NamedTemporaryFile(dir=folder, prefix=".write-probe-").close()
    except OSError as error:
        return [
            f"{setting} = {location!r}: cannot write in {folder} ({error.strerror}); choose a directory this"
            " user can write to, or fix its permissions"
        ]
    if folder != local_checkpoint(location):
        return []
    # The job also writes inside: a checkpoint's logs and state folders, a sink's log. A folder there
    # made read-only (or owned by another user) fails the batch, which reads like damage.
    inside = [folder] if setting == "query.checkpoint_location" else [folder / LOG_DIR, folder / DELTA_LOG]
    for top in (path for path in inside if path.is_dir()):
        for sub, _, _ in os.walk(top):
            if not os.access(sub, os.W_OK | os.X_OK):
                return [
                    f"{setting} = {location!r}: this user cannot write in {sub}, where the job writes; give it write"
                    f" access to the whole folder (chmod -R u+rwX {shlex.quote(str(folder))}, or chown -R it to this"
                    " user)"
                ]
    return []


def unset_secrets(needed: dict[str, str]) -> list[str]:
    """Setting -> the environment variable it names: one line per variable that is not set."""
    return [
        f"{field} = {name!r}: the environment variable {name} is not set (or is empty);"
        " export it before starting the job"
        for field, name in needed.items()
        if not os.environ.get(name)
    ]
