"""The checkpoint, the output and the landing folders, none inside another."""

from __future__ import annotations

import itertools

from ..checkpoint.files import local_checkpoint
from .model import Settings


def overlapping_folders(settings: Settings) -> list[str]:
    """The checkpoint, the output and each landing folder, two by two: one folder inside (or equal to)
    another mixes their files, and Spark says nothing (a landing folder that is the output: every file
    landing there is ignored, since Spark reads a folder holding a sink's _spark_metadata log as that output)."""
    places = settings.locations
    # Each as the file system resolves it (symbolic links, ..); remote storage is left out.
    local = {
        setting: folder.resolve() for setting, location in places.items() if (folder := local_checkpoint(location))
    }
    lines = []
    for (one, one_folder), (other, other_folder) in itertools.combinations(local.items(), 2):
        if one.endswith(".files.path") and other.endswith(".files.path"):
            continue  # two landing folders: the model refuses the same one twice
        if one_folder.is_relative_to(other_folder) and one_folder != other_folder:
            inner, outer = one, other
        elif other_folder.is_relative_to(one_folder):
            inner, outer = other, one
        else:
            continue
        same = one_folder == other_folder
        pair = {inner, outer}
        if same and "sink.path" in pair and pair != {"sink.path", "query.checkpoint_location"}:
            harm = (
                "every file landing there would be ignored for good (Spark reads a folder holding a sink's log as"
                " that sink's output, and nothing else)"
            )
        elif pair == {"sink.path", "query.checkpoint_location"}:
            harm = (
                "the output's files and the checkpoint's would mix, and removing or restoring the checkpoint would"
                " take the output with it"
            )
        elif outer.endswith(".files.path"):
            harm = f"the source would read the files of {inner} as input"
        else:
            harm = f"the input files would mix with those of {outer}"
        lines.append(
            f"{inner} = {places[inner]!r}: {'is the same directory as' if same else 'is inside'} {outer}"
            f" {places[outer]!r}: {harm}; give each its own"
            " directory, side by side"
        )
    return lines
