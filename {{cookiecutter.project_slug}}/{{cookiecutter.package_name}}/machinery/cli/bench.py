"""`bench`: this query on synthetic input per state store configuration and state size."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..runtime.query_plan import checked_plan
from ..settings import load_settings
from .arguments import EXIT_BAD_INPUT, EXIT_QUERY_FAILED, add_settings_argument, positive_int


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
        help="configurations, comma separated (default: %(default)s)",
    )
    bench.add_argument("--out", type=Path, default=Path("bench-results"), help="results folder (default: %(default)s)")
    bench.set_defaults(handler=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    from ..tools.bench import BenchError, BenchRunFailed, run_bench

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
