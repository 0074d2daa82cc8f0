"""`bench`: this query on synthetic input per state store configuration and state size.
`sustain`: the highest input rate this query holds on N local cores."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..core.settings import load_settings
from ..job.plan.query_plan import checked_plan
from .arguments import EXIT_BAD_INPUT, EXIT_QUERY_FAILED, add_settings_argument, positive_float, positive_int


def register(commands: argparse._SubParsersAction) -> None:
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
        help="configurations, comma separated, of hdfs, rocksdb, rocksdb+changelog, rocksdb+tuned (default: %(default)s)",
    )
    bench.add_argument("--out", type=Path, default=Path("bench-results"), help="results folder (default: %(default)s)")
    bench.set_defaults(handler=cmd_bench)
    register_sustain(commands)


def register_sustain(commands: argparse._SubParsersAction) -> None:
    sustain = commands.add_parser(
        "sustain",
        help="find the highest input rate this query holds (batches within the trigger) on N local cores, per"
        " state store configuration; rows per second per core, and where the time per row goes (minutes)",
    )
    add_settings_argument(sustain)
    sustain.add_argument(
        "--cores", type=positive_int, nargs="+", default=[1], help="local cores, one search each (default: %(default)s)"
    )
    sustain.add_argument(
        "--providers",
        default=None,
        help="configurations, comma separated: hdfs, rocksdb, rocksdb+changelog, rocksdb+tuned (changelog checkpointing,"
        " rows not tracked) (default: the settings' store)",
    )
    sustain.add_argument("--trigger", default="2 seconds", help="trigger interval of the tries (default: %(default)s)")
    sustain.add_argument(
        "--batches",
        type=positive_int,
        default=5,
        help="batches counted per try, after the warm-up (default: %(default)s)",
    )
    sustain.add_argument(
        "--start-rate",
        type=positive_float,
        help="rows per second of the first try (default: what the template's measured costs say the cores hold)",
    )
    sustain.add_argument(
        "--max-tries", type=positive_int, default=6, help="runs per search at most (default: %(default)s)"
    )
    sustain.add_argument(
        "--precision",
        type=positive_float,
        default=0.15,
        help="stop when the lowest rate that fell behind is within this share above the highest that held"
        " (default: %(default)s)",
    )
    sustain.add_argument(
        "--driver-memory",
        default="4g",
        help="heap of the tries' JVM (local mode runs the tasks in it), in place of spark.driver_memory:"
        " enough that the search measures the cores, not the heap, which estimate sizes (default: %(default)s)",
    )
    sustain.add_argument(
        "--out", type=Path, default=Path("sustain-results"), help="results folder (default: %(default)s)"
    )
    sustain.set_defaults(handler=cmd_sustain)


def cmd_bench(args: argparse.Namespace) -> int:
    from ..operations.bench import run_bench
    from ..operations.scratch_run import BenchError, BenchRunFailed

    settings = load_settings(args.settings)
    configurations = [name.strip() for name in args.providers.split(",") if name.strip()]
    plan = checked_plan(settings)  # the input is shaped for the operator the events reach first
    try:
        run_bench(args.settings, settings, plan, args.keys, configurations, args.warmup, args.batches, args.out)
    except BenchError as error:
        print(f"bench error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BenchRunFailed as error:
        print(f"bench error: {error}", file=sys.stderr)
        return EXIT_QUERY_FAILED
    print((args.out / "summary.md").read_text(), end="")
    return 0


def cmd_sustain(args: argparse.Namespace) -> int:
    from ..core.durations import named_duration
    from ..core.plan_operators import chain, flow_order
    from ..core.sizing.memory import parse_memory
    from ..operations.scratch_run import BenchError, BenchRunFailed
    from ..operations.store_configurations import configuration_of
    from ..operations.sustain_report import write_results
    from ..operations.sustained_rate import sustained

    settings = load_settings(args.settings)
    try:
        if named_duration("--trigger", args.trigger) <= 0:
            raise ValueError(f"--trigger must be an interval longer than zero, got {args.trigger!r}")
    except ValueError as error:
        print(f"sustain error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.providers is None:
        configurations = [configuration_of(settings.state_store)]
    else:
        configurations = [name.strip() for name in args.providers.split(",") if name.strip()]
    try:
        parse_memory("--driver-memory", args.driver_memory)
    except ValueError as error:
        print(f"sustain error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    spark_conf = {key: str(value) for key, value in settings.spark.conf.items()}
    spark_conf["spark.driver.memory"] = args.driver_memory
    plan = checked_plan(settings)
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    try:
        for configuration in configurations:
            for cores in dict.fromkeys(args.cores):
                results.append(
                    sustained(
                        args.settings,
                        spark_conf,
                        plan,
                        configuration,
                        cores,
                        args.trigger,
                        args.batches,
                        args.start_rate,
                        args.max_tries,
                        args.precision,
                        args.out,
                    )
                )
    except BenchError as error:
        print(f"sustain error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BenchRunFailed as error:
        print(f"sustain error: {error}", file=sys.stderr)
        return EXIT_QUERY_FAILED
    finally:
        if results:
            operator = chain([operator.kind for operator in flow_order(plan) if operator.known])
            write_results(args.out, operator, results)
    print((args.out / "sustain.md").read_text(), end="")
    return 0
