"""Command line: run the job, size the state, look at the output.

Exit codes: 0 done, 1 the query failed, 2 bad settings or arguments, 3 no usable Java.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import capacity
from .java import JavaError
from .settings import DEFAULT_SETTINGS_FILE, Settings, SettingsError, load_settings

EXIT_QUERY_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_NO_JAVA = 3


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


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="python -m {{ cookiecutter.package_name }}", description=__doc__)
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run the streaming job (what main.py does)")
    run.add_argument(
        "--settings", type=Path, default=DEFAULT_SETTINGS_FILE, help="settings file (default: %(default)s)"
    )
    run.add_argument("--max-batches", type=positive_int, help="stop gracefully after N committed micro-batches")
    run.add_argument("--timeout", type=positive_float, metavar="SECONDS", help="stop gracefully after SECONDS")

    estimate = commands.add_parser("estimate", help="size the state store and recommend a provider")
    estimate.add_argument(
        "--settings",
        type=Path,
        default=DEFAULT_SETTINGS_FILE,
        help="where missing inputs are read from (default: %(default)s)",
    )
    estimate.add_argument("--rate", type=positive_float, help="input rows per second")
    estimate.add_argument("--watermark", help="watermark, such as '10 minutes'")
    estimate.add_argument("--bytes-per-row", type=positive_int, help="bytes per state row")
    estimate.add_argument("--partitions", type=positive_int, help="shuffle partitions")
    estimate.add_argument("--growth", type=positive_float, help="growth factor, 1 or more")
    estimate.add_argument("--json", action="store_true", help="print JSON instead of the report")

    show = commands.add_parser("show-output", help="print what the parquet sink has written")
    show.add_argument(
        "--settings", type=Path, default=DEFAULT_SETTINGS_FILE, help="settings file (default: %(default)s)"
    )
    show.add_argument("--limit", type=positive_int, default=20, help="rows to print (default: %(default)s)")
    return root


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "estimate":
            return cmd_estimate(args)
        if args.command == "run":
            return cmd_run(args)
        return cmd_show_output(args)
    except SettingsError as error:
        for line in error.lines:
            print(f"settings error: {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except JavaError as error:
        print(f"java error: {error}", file=sys.stderr)
        return EXIT_NO_JAVA


def cmd_estimate(args: argparse.Namespace) -> int:
    inputs = {
        "rate": args.rate,
        "watermark": args.watermark,
        "bytes_per_row": args.bytes_per_row,
        "partitions": args.partitions,
        "growth": args.growth,
    }
    if any(value is None for name, value in inputs.items() if name != "growth"):
        settings = load_settings(args.settings)
        defaults = {
            "rate": settings.capacity.input_rows_per_second,
            "watermark": settings.query.watermark,
            "bytes_per_row": settings.capacity.state_bytes_per_row,
            "partitions": settings.spark.shuffle_partitions,
            "growth": settings.capacity.state_growth_factor,
        }
        inputs = {name: defaults[name] if value is None else value for name, value in inputs.items()}
    try:
        sizing = capacity.estimate(
            inputs["rate"], inputs["watermark"], inputs["bytes_per_row"], inputs["partitions"], inputs["growth"] or 1.0
        )
    except ValueError as error:
        print(f"estimate error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(json.dumps(sizing.to_dict(), indent=2) if args.json else capacity.report(sizing))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    # Spark is imported only now, so that bad input never starts a JVM.
    from pyspark.errors import StreamingQueryException

    from .job import run_query
    from .session import build_session

    spark = build_session(settings)
    print(startup_line(settings, spark.version, spark.sparkContext.master), flush=True)
    try:
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
    return (
        f"{settings.query.name}: Spark {spark_version} on {master}, state store {store.provider}{changelog},"
        f" {settings.spark.shuffle_partitions} shuffle partitions, checkpoint {settings.query.checkpoint_location}"
    )


def cmd_show_output(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    if settings.sink.type != "parquet":
        print(f"show-output reads the parquet sink; this project's sink is {settings.sink.type}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not Path(settings.sink.path).is_dir():
        print(f"no output yet at {settings.sink.path}; run the job first")
        return 0
    from .session import build_session

    spark = build_session(settings)
    try:
        output = spark.read.parquet(settings.sink.path)
        print(f"{output.count():,} rows in {settings.sink.path}")
        output.orderBy(*output.columns).show(args.limit, truncate=False)
    finally:
        spark.stop()
    return 0


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), text)
