"""Command line: run the job, size the state, look at the output.

Exit codes: 0 done, 1 the query failed, 2 bad settings or arguments, 3 something the job needs is
missing from this machine (Java, a connector JAR, the deltalake package).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import capacity
from .connectors import ConnectorError, packages
from .delta_writer import MissingPackageError, require_deltalake
from .java import JavaError
from .settings import DEFAULT_SETTINGS_FILE, Settings, SettingsError, load_settings

EXIT_QUERY_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_MISSING_DEPENDENCY = 3
MISSING_DEPENDENCY_PREFIXES = {
    JavaError: "java error",
    ConnectorError: "connector error",
    MissingPackageError: "package error",
}


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number; give one greater than zero") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than zero")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; give one greater than zero") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number greater than zero")
    return value


def add_settings_argument(command: argparse.ArgumentParser, purpose: str = "settings file") -> None:
    command.add_argument(
        "--settings", type=Path, default=DEFAULT_SETTINGS_FILE, help=f"{purpose} (default: %(default)s)"
    )


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="python -m {{ cookiecutter.package_name }}", description=__doc__)
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run the streaming job (what main.py does)")
    add_settings_argument(run)
    run.add_argument("--max-batches", type=positive_int, help="stop gracefully after N committed micro-batches")
    run.add_argument("--timeout", type=positive_float, metavar="SECONDS", help="stop gracefully after SECONDS")

    estimate = commands.add_parser("estimate", help="size the state store and recommend a provider")
    add_settings_argument(estimate, "where missing inputs are read from")
    estimate.add_argument("--rate", type=positive_float, help="input rows per second")
    estimate.add_argument("--watermark", help="watermark, such as '10 minutes'")
    estimate.add_argument("--bytes-per-row", type=positive_int, help="bytes per state row")
    estimate.add_argument("--partitions", type=positive_int, help="shuffle partitions")
    estimate.add_argument("--growth", type=positive_float, help="growth factor, 1 or more")
    estimate.add_argument(
        "--operator", choices=list(capacity.FORMULAS), help="the stateful operator (default: from settings)"
    )
    estimate.add_argument("--json", action="store_true", help="print JSON instead of the report")

    needed = commands.add_parser(
        "packages", help="print the --packages coordinates spark-submit needs for these settings (may be empty)"
    )
    add_settings_argument(needed)

    sample = commands.add_parser(
        "sample-input", help="write deterministic JSON event files into source.files.path (for the files source)"
    )
    add_settings_argument(sample)
    sample.add_argument("--files", type=positive_int, default=6, help="files to add (default: %(default)s)")
    sample.add_argument("--events-per-file", type=positive_int, default=1000, help="(default: %(default)s)")
    sample.add_argument("--keys", type=positive_int, default=100, help="distinct keys (default: %(default)s)")
    sample.add_argument(
        "--advance", help="event time covered by each file (default: query.watermark, so windows close quickly)"
    )

    show = commands.add_parser("show-output", help="print what the parquet or delta sink has written")
    add_settings_argument(show)
    show.add_argument("--limit", type=positive_int, default=20, help="rows to print (default: %(default)s)")
    return root


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "estimate":
            return cmd_estimate(args)
        if args.command == "run":
            return cmd_run(args)
        if args.command == "sample-input":
            return cmd_sample_input(args)
        if args.command == "packages":
            print(packages(load_settings(args.settings)))
            return 0
        return cmd_show_output(args)
    except SettingsError as error:
        for line in error.lines:
            print(f"settings error: {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (JavaError, ConnectorError, MissingPackageError) as error:
        print(f"{MISSING_DEPENDENCY_PREFIXES[type(error)]}: {error}", file=sys.stderr)
        return EXIT_MISSING_DEPENDENCY


def cmd_estimate(args: argparse.Namespace) -> int:
    inputs = {
        "rate": args.rate,
        "watermark": args.watermark,
        "bytes_per_row": args.bytes_per_row,
        "partitions": args.partitions,
        "growth": args.growth,
        "operator": args.operator,
    }
    if any(value is None for name, value in inputs.items() if name != "growth"):
        settings = load_settings(args.settings)
        defaults = {
            "rate": settings.capacity.input_rows_per_second,
            "watermark": settings.query.watermark,
            "bytes_per_row": settings.capacity.state_bytes_per_row,
            "partitions": settings.spark.shuffle_partitions,
            "growth": settings.capacity.state_growth_factor,
            "operator": settings.query.operator,
        }
        inputs = {name: defaults[name] if value is None else value for name, value in inputs.items()}
    try:
        sizing = capacity.estimate(
            inputs["rate"],
            inputs["watermark"],
            inputs["bytes_per_row"],
            inputs["partitions"],
            inputs["growth"] or 1.0,
            inputs["operator"],
        )
    except ValueError as error:
        print(f"estimate error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(json.dumps(sizing.to_dict(), indent=2) if args.json else capacity.report(sizing))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    problems = settings.problems_before_run()
    if problems:
        raise SettingsError(problems)
    if settings.sink.delta_writer == "deltalake":
        require_deltalake()
    # Spark is imported only now, so that bad input never starts a JVM.
    from pyspark.errors import StreamingQueryException

    from .connectors import require_connectors
    from .job import run_query
    from .session import build_session

    spark = build_session(settings)
    print(startup_line(settings, spark.version, spark.sparkContext.master), flush=True)
    try:
        require_connectors(spark, settings)
        run_query(spark, settings, args.max_batches, args.timeout)
    except StreamingQueryException as error:
        print(f"query {settings.query.name} failed: {_first_line(str(error))}", file=sys.stderr)
        print(f"checkpoint: {settings.query.checkpoint_location}", file=sys.stderr)
        return EXIT_QUERY_FAILED
    finally:
        spark.stop()
    return 0


def startup_line(settings: Settings, spark_version: str, master: str) -> str:
    store = settings.state_store
    changelog = " with changelog checkpointing" if store.changelog_checkpointing else ""
    writer = f" ({settings.sink.delta_writer})" if settings.sink.delta_writer else ""
    return (
        f"{settings.query.name}: Spark {spark_version} on {master}, {settings.source.type} -> {settings.sink.type}"
        f"{writer}, state store {store.provider}{changelog}, {settings.spark.shuffle_partitions} shuffle partitions,"
        f" checkpoint {settings.query.checkpoint_location}"
    )


def cmd_sample_input(args: argparse.Namespace) -> int:
    from datetime import timedelta

    from .sample_input import write_sample_files

    settings = load_settings(args.settings)
    advance = args.advance or settings.query.watermark
    try:
        seconds = capacity.parse_duration(advance)
    except ValueError as error:
        print(f"sample-input error: --advance {advance!r}: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    directory = settings.source.files.path
    written = write_sample_files(directory, args.files, args.events_per_file, args.keys, timedelta(seconds=seconds))
    print(f"wrote {len(written)} files of {args.events_per_file} events ({args.keys} keys) to {directory}")
    return 0


def cmd_show_output(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    if settings.sink.type not in ("parquet", "delta"):
        print(
            f"show-output reads the parquet or delta sink; this project's sink is {settings.sink.type}", file=sys.stderr
        )
        return EXIT_BAD_INPUT
    if not Path(settings.sink.path).is_dir():
        print(f"no output yet at {settings.sink.path}; run the job first")
        return 0
    from .output import read_output
    from .session import build_session

    # Reading needs no connector: a Delta table is read with the deltalake package.
    spark = build_session(settings, with_connectors=False)
    try:
        output = read_output(spark, settings.sink)
        print(f"{output.count():,} rows in {settings.sink.path}")
        output.orderBy(*output.columns).show(args.limit, truncate=False)
    finally:
        spark.stop()
    return 0


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), text)
