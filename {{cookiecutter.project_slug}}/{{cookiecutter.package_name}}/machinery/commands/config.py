"""`config` and `packages`: what the settings amount to, printed without running the job (`packages
--submit-args` resolves the connectors' JARs first when the project has none yet)."""

from __future__ import annotations

import argparse
import shlex

from ..core.settings import load_settings
from ..job.spark.connectors import kafka_fallback, packages, resolution_confs, submit_arguments
from .arguments import add_settings_argument


def register(commands: argparse._SubParsersAction) -> None:
    config = commands.add_parser(
        "config",
        help="print the effective configuration: settings after environment overrides, and the Spark confs and"
        " source options the job sets (secrets shown as the variable they come from)",
    )
    add_settings_argument(config)
    config.set_defaults(handler=cmd_config)

    needed = commands.add_parser(
        "packages", help="print the --packages coordinates spark-submit needs for these settings (may be empty)"
    )
    add_settings_argument(needed)
    needed.add_argument(
        "--submit-args",
        action="store_true",
        help="print spark-submit's arguments for a start beside the project: the driver's heap and the connectors'"
        " JAR files as --jars (resolved once into connector-jars/ first)",
    )
    needed.set_defaults(handler=cmd_packages)


def cmd_config(args: argparse.Namespace) -> int:
    import yaml

    from ..operations.effective_config import effective_configuration

    configuration = effective_configuration(load_settings(args.settings))
    print(yaml.safe_dump(configuration, sort_keys=False, default_flow_style=False, width=10**6), end="")
    return 0


def cmd_packages(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    if not args.submit_args:
        print(packages(settings))
        return 0
    from ..job.spark.connector_jars import resolved_jars
    from ..job.spark.session import log_dir

    resolution = resolution_confs(settings)
    jars = resolved_jars(resolution, log_dir(), kafka_fallback(settings)) if resolution else []
    print(shlex.join(submit_arguments(settings, jars)))
    return 0
