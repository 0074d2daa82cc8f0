"""`savepoint create|restore|verify`: a stopped job's checkpoint and output saved whole, and moved."""

from __future__ import annotations

import argparse
import json
import shlex
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from ..core.checkpoint.files import LANDING_FLAGS
from ..core.checkpoint.run_lock import holding
from ..core.contract import PACKAGE
from ..core.settings import ENV_PREFIX, Settings, load_settings
from ..operations.savepoint import (
    CHECKPOINT,
    OUTPUT,
    SavepointMismatch,
    SavepointRefused,
    Targets,
    check_files,
    check_restored,
    compare_state,
    create,
    place_of,
    plan_create,
    plan_restore,
    publish,
    read_manifest,
    read_state,
    restore,
    staged_here,
    undo_restore,
)
from .arguments import add_settings_argument


def register(commands: argparse._SubParsersAction) -> None:
    command = commands.add_parser(
        "savepoint",
        help="save a stopped job's checkpoint and output whole, restore them in new locations, verify them",
        description="A savepoint is a folder holding a stopped job's checkpoint at a committed batch, its output"
        " and a manifest (rows per operator and store, every file's SHA-256). Take one before a repartition, a"
        " cruft update or a Spark upgrade, or to move the job to other folders, another mount or a cluster's paths.",
    )
    actions = command.add_subparsers(dest="action", required=True, metavar="ACTION")
    make = actions.add_parser("create", help="copy the stopped job's checkpoint and output into a new savepoint folder")
    add_settings_argument(make)
    make.add_argument("savepoint", type=Path, help="the folder to write the savepoint into (new or empty)")
    make.set_defaults(handler=cmd_create)

    put = actions.add_parser(
        "restore", help="copy a savepoint into a new checkpoint and output folder, moving the paths Spark wrote"
    )
    put.add_argument("savepoint", type=Path, help="the folder savepoint create wrote")
    put.add_argument(
        "--checkpoint", type=_place, required=True, help="the new checkpoint folder (new or empty; s3a:// too)"
    )
    put.add_argument("--output", type=_place, help="the new output folder (new or empty), for a savepoint with output")
    for section, flag in LANDING_FLAGS.items():
        put.add_argument(
            flag, dest=section, type=_place, metavar="FOLDER", help=f"where {section}'s input files are now, if moved"
        )
    put.set_defaults(handler=cmd_restore)

    check = actions.add_parser(
        "verify",
        help="compare a savepoint, or a checkpoint restored from it, with its manifest (exit 4 on a difference)",
    )
    check.add_argument("savepoint", type=Path, help="the folder savepoint create wrote")
    check.add_argument("--checkpoint", type=_place, help="a checkpoint restored from it: check that instead")
    check.add_argument("--output", type=_place, help="the output restored with it (with --checkpoint)")
    check.set_defaults(handler=cmd_verify)


@contextmanager
def state_reader(settings: Settings | None = None) -> Iterator[Any]:
    """A function that starts the session reading the state, once, when first called: a local one, or through
    the settings' (else SPARK_REMOTE's) Spark Connect server."""
    started: list[Any] = []

    with ExitStack() as stack:

        def session():
            if not started:
                from ..job.spark.session import tool_session
                from ..operations.state_reader import READER_CONFS

                started.append(stack.enter_context(tool_session("savepoint", READER_CONFS, settings)))
            return started[0]

        yield session


def cmd_create(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    target = _absolute(args.savepoint)
    with state_reader(settings) as session:
        if settings.spark.connect_url is not None:  # copied with this machine's file system: it must see the folder
            from ..job.spark.session_files import require_this_machines

            require_this_machines(session(), settings.query.checkpoint_location, "savepoint create")
        origin = plan_create(settings, target)
        output = f" and {origin.output}" if origin.output else ""
        print(f"savepoint: copying {origin.checkpoint} (batch {origin.batch}){output} into {target}", flush=True)
        with holding(settings.query.checkpoint_location, "a savepoint", settings.query.lease_seconds):
            manifest = create(session, origin, target)
    _print_state(manifest)
    files = manifest["files"].values()
    print(
        f"savepoint: done: {target} holds batch {manifest['batch']} of query {manifest['query_id']}"
        f" ({len(files):,} files, {sum(entry['bytes'] for entry in files):,} bytes); check it any time with"
        f" python -m {PACKAGE} savepoint verify {target}"
    )
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    savepoint = _absolute(args.savepoint)
    manifest = read_manifest(savepoint)
    given = {section: getattr(args, section) for section in LANDING_FLAGS}
    landing = {section: folder for section, folder in given.items() if folder is not None}
    targets = Targets(args.checkpoint, args.output, landing)
    plan_restore(savepoint, manifest, targets)
    check_files(savepoint, manifest)  # a damaged savepoint is not restored
    print(f"savepoint: restoring batch {manifest['batch']} from {savepoint}", flush=True)
    with tempfile.TemporaryDirectory(prefix="savepoint-restore-") as staging:
        here = targets.staged(Path(staging))  # made and checked here, then uploaded, for a target on a store
        try:
            rewritten = restore(savepoint, manifest, targets, here)
            check_restored(manifest, here.places, targets.places)
            with state_reader() as session:
                compare_state(manifest, read_state(session, here.checkpoint, manifest["batch"]), targets.checkpoint)
            publish(here, targets)
        except SavepointMismatch as error:
            undo_restore(targets)
            raise SavepointMismatch(f"{error}; the restored folders were removed, nothing else was changed") from None
        except BaseException:
            undo_restore(targets)
            raise
    print(f"savepoint: moved the absolute paths Spark wrote in {len(rewritten)} files to the new locations")
    _print_state(manifest)
    changes = {"query.checkpoint_location": targets.checkpoint}
    if targets.output is not None:
        changes["sink.path"] = targets.output
    changes.update({f"{section}.files.path": folder for section, folder in landing.items()})
    # Quoted as YAML reads them (JSON's quoting is YAML's): a path with ' #' is cut there unquoted.
    print(
        "next: set in the settings file\n"
        + "\n".join(f"  {key}: {json.dumps(str(path))}" for key, path in changes.items())
    )
    variables = (
        f"{ENV_PREFIX}{key.upper().replace('.', '__')}={shlex.quote(str(path))}" for key, path in changes.items()
    )
    print("or in the environment of the start\n" + "\n".join(f"  export {line}" for line in variables))
    print(f"then start the job: it goes on after batch {manifest['batch']}, as query {manifest['query_id']}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    savepoint = _absolute(args.savepoint)
    manifest = read_manifest(savepoint)
    if args.checkpoint is None and args.output is not None:
        raise SavepointRefused("--output goes with --checkpoint: give the restored checkpoint too")
    if args.checkpoint is None:
        check_files(savepoint, manifest)
    with tempfile.TemporaryDirectory(prefix="savepoint-verify-") as staging:
        here = where = savepoint / CHECKPOINT
        if args.checkpoint is not None:
            places = {CHECKPOINT: args.checkpoint, **({OUTPUT: args.output} if args.output else {})}
            copies = staged_here(places, Path(staging))  # those on an object store copied here to be read
            check_restored(manifest, copies, places)
            here, where = copies[CHECKPOINT], args.checkpoint
        with state_reader() as session:
            compare_state(manifest, read_state(session, here, manifest["batch"]), where)
    checked = "the savepoint's files" if args.checkpoint is None else "the restored files"
    print(f"savepoint verify: {where}: {checked} match the manifest; the state of batch {manifest['batch']}:")
    _print_state(manifest)
    return 0


def _print_state(manifest: dict[str, Any]) -> None:
    for store in manifest["state"]:
        print(f"  operator {store['operator_id']} ({store['operator']}) store {store['store']}: {store['rows']:,} rows")
    if not manifest["state"]:
        print("  no state (the query has no stateful operator)")


def _absolute(path: Path) -> Path:
    return path.expanduser().absolute()


def _place(text: str) -> Path:
    """A folder given on the command line: on this machine's disk (made absolute), or on an object store."""
    place = place_of(text)
    if place is None:
        raise argparse.ArgumentTypeError(f"{text} is neither on this machine's disk nor on an object store (s3a://)")
    return place
