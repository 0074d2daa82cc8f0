"""Command line: run the job, size the state, look at the output.

Exit codes: 0 done, 1 the query failed, 2 bad settings or arguments, 3 something the job needs is
missing from this machine (Java, a connector JAR, the deltalake package), 4 the settings disagree
with the existing checkpoint (nothing was started or changed).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from . import capacity
from .cluster_sizing import DEFAULT_EXECUTOR_MEMORY, ClusterSizing, cluster_report, size_cluster
from .connectors import ConnectorError, packages
from .delta_writer import MissingPackageError, require_deltalake
from .guard import RESTORE_OR_RESTART, CheckpointUnreadable, GuardReport, check_checkpoint, empty_state_files
from .inspection import InspectError
from .java import JavaError
from .packaging import DEPLOY_MODES, build_py_files, shell_line, submit_command
from .settings import DEFAULT_SETTINGS_FILE, Settings, SettingsError, load_settings, nearest_existing_folder

if TYPE_CHECKING:
    from .calibration import Calibration

EXIT_QUERY_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_MISSING_DEPENDENCY = 3
EXIT_CHECKPOINT_DRIFT = 4
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


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number; give 0 or more") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be 0 or more")
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
    estimate.add_argument("--window", help="windowed_aggregation: window length, such as '1 minute'")
    estimate.add_argument("--keys", type=positive_int, help="windowed_aggregation, custom_state: distinct keys")
    estimate.add_argument("--join-rate", type=positive_float, help="stream_stream_join: join_source rows per second")
    estimate.add_argument("--join-range", help="stream_stream_join: the join's time range, such as '15 minutes'")
    estimate.add_argument("--session-timeout", help="custom_state: inactivity that closes a session")
    estimate.add_argument(
        "--calibrate",
        action="store_true",
        help="measure the bytes per state row first: run this query briefly on sample files in a scratch"
        " directory, with the settings' provider (about a minute)",
    )
    estimate.add_argument(
        "--calibrate-events",
        type=positive_int,
        default=2000,
        help="events per sample file of the calibration run, 6 files (default: %(default)s)",
    )
    estimate.add_argument(
        "--executors",
        type=positive_int,
        help="add the cluster sizing: state and memory per executor for N executors"
        " (default: spark.conf spark.executor.instances, if set)",
    )
    estimate.add_argument(
        "--executor-memory",
        help="executor heap for the cluster sizing, such as 8g (default: spark.conf spark.executor.memory, else 1g)",
    )
    estimate.add_argument("--json", action="store_true", help="print JSON instead of the report")
    estimate.add_argument(
        "--check",
        action="store_true",
        help="exit 2 when settings.yaml's provider is hdfs but the sizing needs rocksdb (for CI)",
    )

    package = commands.add_parser(
        "package", help="zip the package for spark-submit --py-files and print the spark-submit command"
    )
    add_settings_argument(package, "settings file to ship with --files")
    package.add_argument("--out", type=Path, default=Path("dist"), help="where the zip goes (default: %(default)s)")
    package.add_argument("--master", help="the cluster's master URL (default: spark.master of the settings)")
    package.add_argument("--deploy-mode", choices=DEPLOY_MODES, default="client", help="(default: %(default)s)")

    check = commands.add_parser(
        "check", help="compare settings with the existing checkpoint, without starting Spark (exit 4 on drift)"
    )
    add_settings_argument(check)

    inspect = commands.add_parser(
        "inspect", help="read the checkpoint's state: rows and bytes per partition, skew, kept batches, the estimate"
    )
    where = inspect.add_mutually_exclusive_group()
    where.add_argument(
        "--settings",
        type=Path,
        help=f"inspect query.checkpoint_location and compare with these settings' estimate (default: {DEFAULT_SETTINGS_FILE})",
    )
    where.add_argument("--checkpoint", help="inspect this checkpoint directory instead (no estimate to compare)")
    inspect.add_argument(
        "--batch-id", type=non_negative_int, help="the state as of this batch (default: the last committed one)"
    )
    inspect.add_argument("--json", action="store_true", help="print JSON instead of the tables")

    bench = commands.add_parser(
        "bench",
        help="run this query on synthetic input per state store configuration and state size; write results,"
        " a summary table and a chart (minutes)",
    )
    add_settings_argument(bench)
    bench.add_argument(
        "--keys",
        type=positive_int,
        nargs="+",
        default=[10_000, 100_000, 1_000_000],
        help="state sizes: the state rows held at the last counted batch (default: %(default)s)",
    )
    bench.add_argument(
        "--batches", type=positive_int, default=10, help="batches counted per run (default: %(default)s)"
    )
    bench.add_argument(
        "--warmup", type=positive_int, default=3, help="batches run first, not counted (default: %(default)s)"
    )
    bench.add_argument(
        "--providers",
        default="hdfs,rocksdb,rocksdb+changelog",
        help="configurations, comma separated (default: %(default)s)",
    )
    bench.add_argument("--out", type=Path, default=Path("bench-results"), help="results folder (default: %(default)s)")

    config = commands.add_parser(
        "config",
        help="print the effective configuration: settings after environment overrides, and the Spark confs and"
        " source options the job sets (secrets shown as the variable they come from)",
    )
    add_settings_argument(config)

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
        if args.command == "package":
            return cmd_package(args)
        if args.command == "check":
            return cmd_check(args)
        if args.command == "inspect":
            return cmd_inspect(args)
        if args.command == "bench":
            return cmd_bench(args)
        if args.command == "config":
            return cmd_config(args)
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
    except CheckpointUnreadable as error:
        print(f"checkpoint error: {error}", file=sys.stderr)
        return EXIT_CHECKPOINT_DRIFT
    except InspectError as error:
        print(f"inspect error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT


# estimate flag -> (Settings -> its value): what a missing flag falls back to.
ESTIMATE_FROM_SETTINGS = {
    "rate": lambda s: s.capacity.input_rows_per_second,
    "watermark": lambda s: s.query.watermark,
    "bytes_per_row": lambda s: s.capacity.state_bytes_per_row,
    "partitions": lambda s: s.spark.shuffle_partitions,
    "growth": lambda s: s.capacity.state_growth_factor,
    "operator": lambda s: s.query.operator,
    "window": lambda s: s.query.window,
    "keys": lambda s: s.capacity.key_cardinality,
    "join_rate": lambda s: s.capacity.join_input_rows_per_second,
    "join_range": lambda s: s.query.join.range,
    "session_timeout": lambda s: s.query.custom_state.session_timeout,
}
# Without these the estimate needs the settings file; the others have defaults.
ESTIMATE_REQUIRED = ("rate", "watermark", "bytes_per_row", "partitions", "operator")


def cmd_estimate(args: argparse.Namespace) -> int:
    inputs = {name: getattr(args, name) for name in ESTIMATE_FROM_SETTINGS}
    settings = None
    if args.calibrate and args.bytes_per_row is not None:
        print("estimate error: give --bytes-per-row or --calibrate (which measures it), not both", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.calibrate or any(inputs[name] is None for name in ESTIMATE_REQUIRED):
        settings = load_settings(args.settings)
        inputs = {
            name: read(settings) if inputs[name] is None else inputs[name]
            for name, read in ESTIMATE_FROM_SETTINGS.items()
        }
    calibration = None
    if args.calibrate:
        if inputs["operator"] != settings.query.operator:
            print(
                f"estimate error: --calibrate measures the query of the settings ({settings.query.operator});"
                f" drop --operator {inputs['operator']}",
                file=sys.stderr,
            )
            return EXIT_BAD_INPUT
        from .calibration import CalibrationError  # imports Spark: only when calibrating

        try:
            calibration = run_calibration(settings, args.calibrate_events)
        except CalibrationError as error:
            print(f"estimate error: {error}", file=sys.stderr)
            return EXIT_QUERY_FAILED
        inputs["bytes_per_row"] = calibration.bytes_per_row
    try:
        sizing = capacity.estimate(
            inputs["rate"],
            inputs["watermark"],
            inputs["bytes_per_row"],
            inputs["partitions"],
            inputs["growth"] or 1.0,
            inputs["operator"],
            bytes_per_row_source=_bytes_source(args, calibration),
            window=inputs["window"],
            key_cardinality=inputs["keys"],
            join_input_rows_per_second=inputs["join_rate"],
            join_range=inputs["join_range"],
            session_timeout=inputs["session_timeout"],
        )
    except ValueError as error:
        print(f"estimate error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    # The settings file is read once: here if the inputs above did not need it.
    if settings is None and (args.check or args.executors is not None or args.executor_memory is not None):
        settings = load_settings(args.settings)
    if args.check:
        return sizing_check(settings, sizing)
    try:
        cluster = (
            None if settings is None else cluster_sizing_of(settings, sizing, args.executors, args.executor_memory)
        )
    except ValueError as error:
        print(f"estimate error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json:
        result = sizing.to_dict()
        if calibration is not None:
            result["calibration"] = calibration.to_dict()
        if cluster is not None:
            result["cluster"] = asdict(cluster)
        print(json.dumps(result, indent=2))
    else:
        print(capacity.report(sizing))
        print(cluster_report(cluster) if cluster else CLUSTER_HINT)
    return 0


CLUSTER_HINT = (
    "Cluster sizing: give --executors N (or set spark.executor.instances in spark.conf) for the state and"
    " memory per executor"
)


def cluster_sizing_of(
    settings: Settings, sizing: capacity.Estimate, executors: int | None, executor_memory: str | None
) -> ClusterSizing | None:
    """The cluster sizing for the flags, else the executors and memory of spark.conf; None without a count."""
    conf = settings.spark.conf
    if executors is None:
        if "spark.executor.instances" not in conf:
            return None
        executors = positive_conf("spark.executor.instances", conf["spark.executor.instances"])
    rocksdb = settings.state_store.rocksdb
    overhead = conf.get("spark.executor.memoryOverhead")
    if executor_memory is not None:
        memory, field = executor_memory, "--executor-memory"
    elif "spark.executor.memory" in conf:
        memory, field = str(conf["spark.executor.memory"]), "spark.conf spark.executor.memory"
    else:
        memory, field = DEFAULT_EXECUTOR_MEMORY, "executor memory"
    return size_cluster(
        sizing,
        settings.state_store.provider,
        executors,
        memory,
        rocksdb.bounded_memory_usage,
        rocksdb.max_memory_usage_mb,
        None if overhead is None else str(overhead),
        memory_field=field,
    )


def positive_conf(name: str, value: object) -> int:
    try:
        number = int(str(value))
    except ValueError:
        number = 0
    if number < 1:
        raise ValueError(f"spark.conf {name} must be a whole number of 1 or more, got {value!r}")
    return number


def sizing_check(settings: Settings, sizing: capacity.Estimate) -> int:
    """The bake-time decision, checked again: an HDFS-backed store that the sizing has outgrown fails."""
    chosen = settings.state_store.provider
    per_partition = capacity.human_bytes(sizing.projected_bytes_per_partition)
    if chosen == "hdfs" and sizing.recommended_provider == "rocksdb":
        print(
            f"sizing check failed: state_store.provider is hdfs but the sizing of settings.yaml needs rocksdb"
            f" ({per_partition} per partition); before the first run set provider: rocksdb, or lower the"
            " capacity figures if they are wrong (a checkpoint that exists keeps its provider: see README)",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    print(f"sizing check: state_store.provider {chosen} holds {per_partition} per partition")
    return 0


def _bytes_source(args: argparse.Namespace, calibration: Calibration | None) -> str:
    if calibration is not None:
        return calibration.describe()
    if args.bytes_per_row is not None:
        return "--bytes-per-row, as given (an assumption; --calibrate measures it)"
    return capacity.ASSUMED_BYTES_PER_ROW


def run_calibration(settings: Settings, events_per_file: int) -> Calibration:
    """The calibration run, in a local Spark session of its own; its progress goes to stderr."""
    from .calibration import calibrate
    from .session import local_session

    print(
        f"calibrating: running {settings.query.operator} on {settings.state_store.provider} with sample files",
        file=sys.stderr,
    )
    spark = local_session("calibrate-state", {})
    try:
        return calibrate(spark, settings, events_per_file, progress_to=sys.stderr)
    finally:
        spark.stop()


def cmd_run(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    problems = settings.problems_before_run()
    if problems:
        raise SettingsError(problems)
    # With JSON progress lines, stdout carries the events only; remarks go to stderr.
    remarks_to = sys.stderr if settings.monitoring.progress_format == "json" else sys.stdout
    if not guard_passes(check_checkpoint(settings), remarks_to):
        return EXIT_CHECKPOINT_DRIFT
    if settings.sink.delta_writer == "deltalake":
        require_deltalake()
    # Spark is imported only now, so that bad input never starts a JVM.
    from pyspark.errors import StreamingQueryException

    from .connectors import require_connectors
    from .job import run_query
    from .session import build_session
    from .state_key import StateKeyChanged

    spark = build_session(settings)
    print(startup_line(settings, spark.version, spark.sparkContext.master), file=remarks_to, flush=True)
    try:
        require_connectors(spark, settings)
        run_query(spark, settings, args.max_batches, args.timeout)
    except StateKeyChanged as error:
        print(f"checkpoint error: {error}", file=sys.stderr)
        return EXIT_CHECKPOINT_DRIFT
    except StreamingQueryException as error:
        print(f"query {settings.query.name} failed: {_first_line(str(error))}", file=sys.stderr)
        print(f"checkpoint: {settings.query.checkpoint_location}", file=sys.stderr)
        chain = _message_chain(error)
        for line in damaged_checkpoint_advice(chain, settings.query.checkpoint_location):
            print(line, file=sys.stderr)
        for line in disk_full_advice(chain, settings):
            print(line, file=sys.stderr)
        return EXIT_QUERY_FAILED
    finally:
        spark.stop()
    return 0


def cmd_package(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    py_files = build_py_files(args.out)
    command = submit_command(
        args.master or settings.spark.master, args.deploy_mode, py_files, args.settings, packages(settings)
    )
    print(f"package: {py_files} written; run (from this folder):", file=sys.stderr)
    print(shell_line(command))
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    settings = None if args.checkpoint else load_settings(args.settings or DEFAULT_SETTINGS_FILE)
    location = args.checkpoint or settings.query.checkpoint_location
    from .inspection import READER_CONFS, checkpoint_facts, inspect_checkpoint, render

    checkpoint_facts(location, args.batch_id)  # what can be checked before Spark starts
    from .session import local_session, secret_confs

    # The user's own confs may carry what a cloud checkpoint needs (credentials, file systems).
    confs = {} if settings is None else {key: str(value) for key, value in settings.spark.conf.items()}
    if settings is not None:
        confs.update(secret_confs(settings))
    spark = local_session("inspect-state", {**confs, **READER_CONFS})
    try:
        inspection = inspect_checkpoint(spark, location, args.batch_id)
    finally:
        spark.stop()
    if settings is not None:
        inspection.estimate = settings.sizing()
    print(json.dumps(inspection.to_dict(), indent=2) if args.json else render(inspection))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from .bench import BenchError, BenchRunFailed, run_bench

    settings = load_settings(args.settings)
    configurations = [name.strip() for name in args.providers.split(",") if name.strip()]
    try:
        run_bench(args.settings, settings, args.keys, configurations, args.warmup, args.batches, args.out)
    except BenchError as error:
        print(f"bench error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BenchRunFailed as error:
        print(f"bench error: {error}", file=sys.stderr)
        return EXIT_QUERY_FAILED
    print((args.out / "summary.md").read_text(), end="")
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    import yaml

    from .effective_config import effective_configuration

    configuration = effective_configuration(load_settings(args.settings))
    print(yaml.safe_dump(configuration, sort_keys=False, default_flow_style=False, width=10**6), end="")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    report = check_checkpoint(load_settings(args.settings))
    if not guard_passes(report):
        return EXIT_CHECKPOINT_DRIFT
    if report.last_batch is not None:
        print(f"checkpoint {report.checkpoint}: consistent with the settings (last batch {report.last_batch})")
    return 0


def guard_passes(report: GuardReport, notes_to: TextIO | None = None) -> bool:
    """Print the guard's notes (on stdout unless told), and each drift as one line on stderr; True
    when there is none."""
    for note in report.notes:
        print(f"checkpoint: {note}", file=notes_to or sys.stdout)
    for drift in report.drifts:
        print(f"checkpoint error: {drift.message(report.checkpoint)}", file=sys.stderr)
    return report.consistent


def startup_line(settings: Settings, spark_version: str, master: str) -> str:
    store = settings.state_store
    changelog = " with changelog checkpointing" if store.changelog_checkpointing else ""
    writer = f" ({settings.sink.delta_writer})" if settings.sink.delta_writer else ""
    sources = " + ".join(source.type for source in settings.inputs.values())
    return (
        f"{settings.query.name}: Spark {spark_version} on {master}, {sources} -> {settings.sink.type}"
        f"{writer}, state store {store.provider}{changelog}, {settings.spark.shuffle_partitions} shuffle partitions,"
        f" checkpoint {settings.query.checkpoint_location}"
    )


def cmd_sample_input(args: argparse.Namespace) -> int:
    from .sample_input import write_for_settings

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


def damaged_checkpoint_advice(message: str, checkpoint: str) -> list[str]:
    """When Spark's error points into the checkpoint: the files concerned, and the ways out.

    Spark names a missing file, but not a truncated one ("An error occurred during loading
    state"); then the state files of zero bytes are named, or else the state folder.
    """
    root = checkpoint.removeprefix("file:").rstrip("/")
    paths = {"/" + path.lstrip("/").rstrip(".,;:)") for path in re.findall(r"(?:file:)?(/[^\s'\"]+)", message)}
    named = sorted(_state_version(path) for path in paths if path.startswith(root + "/"))
    if not named and "CANNOT_LOAD_STATE_STORE" in message and "://" not in root:
        named = [str(path) for path in empty_state_files(Path(root))] or [f"{root}/state (a state file there)"]
    if not named:
        return []
    return [
        *(f"checkpoint file: {path}" for path in named),
        f"The checkpoint is damaged there; nothing was committed past it. To recover, {RESTORE_OR_RESTART}"
        " (the output already written stays).",
    ]


def disk_full_advice(message: str, settings: Settings) -> list[str]:
    """A full disk: the space left where the job writes, and that a restart after freeing it is safe."""
    if "No space left on device" not in message:
        return []
    places = {"query.checkpoint_location": settings.query.checkpoint_location}
    if settings.sink.type != "console":
        places["sink.path"] = settings.sink.path
    lines = []
    for setting, location in places.items():
        folder = nearest_existing_folder(location)
        if folder is not None:  # remote storage's free space cannot be asked here
            lines.append(f"disk full: {setting} {location} has {shutil.disk_usage(folder).free / 2**20:,.1f} MiB free")
    return [
        *lines,
        "Free space and start again: the batch that failed was not committed and runs again, and what was"
        " committed stays (a sink counts only committed batches).",
    ]


def _state_version(path: str) -> str:
    """RocksDB names N.changelog when version N is missing, even if it was written as N.zip."""
    if path.endswith(".changelog") and not Path(path).exists() and not Path(path).with_suffix(".zip").exists():
        version = Path(path).with_suffix("")
        return f"{version}.zip or {version}.changelog (neither is there: version {version.name} of this state is lost)"
    return path


def _message_chain(error: BaseException) -> str:
    """Spark's message and those of its causes, where a full disk or a missing file is often named."""
    messages: list[str] = []
    cause: BaseException | None = error
    while cause is not None and len(messages) < 20:
        messages.append(str(cause))
        cause = getattr(cause, "_cause", None)  # pyspark keeps the Java cause chain there, converted
    return "\n".join(messages)


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), text)
