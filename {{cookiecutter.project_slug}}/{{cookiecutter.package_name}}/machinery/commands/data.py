"""`sample-input` and `show-output`: the job's data, written into the landing folder and read back
from the sink."""

from __future__ import annotations

import argparse
import sys

from ..core.checkpoint.files import local_checkpoint, read_checkpoint
from ..core.checkpoint.object_store import exists_here
from ..core.settings import load_settings
from ..job.guard.output_check import lost_output, with_output
from .arguments import EXIT_BAD_INPUT, EXIT_CHECKPOINT_DRIFT, EXIT_QUERY_FAILED, add_settings_argument, positive_int


def register(commands: argparse._SubParsersAction) -> None:
    sample = commands.add_parser(
        "sample-input", help="write deterministic JSON event files into source.files.path (for the files source)"
    )
    add_settings_argument(sample)
    sample.add_argument("--files", type=positive_int, default=6, help="files to add (default: %(default)s)")
    sample.add_argument("--events-per-file", type=positive_int, default=1000, help="(default: %(default)s)")
    sample.add_argument(
        "--keys", type=positive_int, help="distinct keys (default: 100; stream_stream_join: one per order)"
    )
    sample.add_argument(
        "--advance",
        help="event time covered by each file (default: query.watermark, so windows close quickly;"
        " custom_state: twice the session timeout, so sessions end)",
    )
    sample.add_argument(
        "--run-length",
        type=positive_int,
        help="consecutive events sharing a key (default: 10 for custom_state, making sessions; else 1)",
    )
    sample.set_defaults(handler=cmd_sample_input)

    show = commands.add_parser("show-output", help="print what the parquet or delta sink has written")
    add_settings_argument(show)
    show.add_argument("--limit", type=positive_int, default=20, help="rows to print (default: %(default)s)")
    show.set_defaults(handler=cmd_show_output)


def cmd_sample_input(args: argparse.Namespace) -> int:
    from ..job.endpoints.sample_input import write_for_settings

    settings = load_settings(args.settings)
    try:
        shape = write_for_settings(settings, args.files, args.events_per_file, args.keys, args.advance, args.run_length)
    except ValueError as error:
        print(f"sample-input error: --advance {args.advance!r}: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"wrote {shape.describe()} to {settings.source.files.path}")
    if settings.join_source is not None:
        # Two of three payments fall within the join range; every fifth order is never paid.
        print(f"wrote {args.files} files of their payments to {settings.join_source.files.path}")
    return 0


def cmd_show_output(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    if settings.sink.type not in ("parquet", "delta"):
        print(
            f"show-output reads the parquet or delta sink; this project's sink is {settings.sink.type}", file=sys.stderr
        )
        return EXIT_BAD_INPUT
    checkpoint = local_checkpoint(settings.query.checkpoint_location)
    lost = [] if checkpoint is None else lost_output(settings, with_output(settings, read_checkpoint(checkpoint)))
    if lost:
        print(f"show-output error: {lost[0]}", file=sys.stderr)
        return EXIT_CHECKPOINT_DRIFT
    if not exists_here(settings.sink.path):
        print(f"no output yet at {settings.sink.path}; run the job first")
        return 0
    from ..job.endpoints.output import read_output
    from ..job.spark.session import job_session
    from ..job.spark.spark_errors import spark_errors
    from ..operations.state_reader import spark_message

    # Reading needs no connector: a Delta table is read with the deltalake package.
    with job_session(settings, with_connectors=False) as spark:
        try:
            output = read_output(spark, settings.sink)
            print(f"{output.count():,} rows in {settings.sink.path}")
            output.orderBy(*output.columns).show(args.limit, truncate=False)
        except spark_errors() as error:  # a damaged output Spark cannot read: its first line, not a traceback
            print(f"show-output error: {settings.sink.path} cannot be read: {spark_message(error)}", file=sys.stderr)
            return EXIT_QUERY_FAILED
    return 0
