"""`package`: zip the package for spark-submit --py-files and print the spark-submit command."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from ..core.settings import load_settings
from ..job.spark.connectors import submit_arguments
from ..operations.packaging import DEPLOY_MODES, build_py_files, submit_command
from .arguments import add_settings_argument


def register(commands: argparse._SubParsersAction) -> None:
    package = commands.add_parser(
        "package", help="zip the package for spark-submit --py-files and print the spark-submit command"
    )
    add_settings_argument(package, "settings file to ship with --files")
    package.add_argument("--out", type=Path, default=Path("dist"), help="where the zip goes (default: %(default)s)")
    package.add_argument("--master", help="the cluster's master URL (default: spark.master of the settings)")
    package.add_argument("--deploy-mode", choices=DEPLOY_MODES, default="client", help="(default: %(default)s)")
    package.set_defaults(handler=cmd_package)


def cmd_package(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    py_files = build_py_files(args.out)
    # --packages, not this machine's connector-jars/: the driver may start on another machine (cluster mode).
    command = submit_command(
        args.master or settings.spark.master, args.deploy_mode, py_files, args.settings, submit_arguments(settings)
    )
    print(f"package: {py_files} written; run (from this folder):", file=sys.stderr)
    print(shlex.join(command))
    return 0
