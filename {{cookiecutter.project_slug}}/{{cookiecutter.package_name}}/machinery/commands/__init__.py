"""Command line: run the job, size the state, look at the output.

Exit codes: 0 done, 1 the query failed, 2 bad settings or arguments, or a query Spark refuses, 3
something the job needs is missing from this machine (Java, a connector JAR, the deltalake package,
the local Kafka broker, the Spark Connect server of spark.remote or its client's packages) or the driver JVM could not start, 4 the settings or the query disagree with the existing checkpoint, or it is
in use, or a repartition or savepoint was refused (nothing was started or changed), or a savepoint
or its restored copy differs from its manifest.
"""

# (The docstring above is the description `--help` prints.) Each command module registers its
# subcommands with a handler; main() calls the handler and turns the shared errors into exit codes.

from __future__ import annotations

import argparse
import shlex
import sys

from pyspark.errors import AnalysisException

from ..core.checkpoint.files import CheckpointUnreadable
from ..core.checkpoint.lease import LeaseBusy
from ..core.checkpoint.run_lock import CheckpointBusy
from ..core.contract import PACKAGE, QUERY_MODULE, ContractError, QueryCodeError
from ..core.settings import SettingsError
from ..core.text import first_line
from ..job.endpoints.delta import MissingPackageError
from ..job.endpoints.kafka import KafkaEndpointError
from ..job.guard.output_check import OutputLost
from ..job.guard.schema_evolution import StateSchemaRefused
from ..job.guard.state_fit import OperatorsChanged, OutputColumnsChanged, StateKeyChanged, StateWindowChanged
from ..job.guard.streams_fit import StreamsChanged
from ..job.plan.query_plan import QueryRefused
from ..job.spark.connectors import ConnectorError
from ..job.spark.driver_jvm import JvmStartError
from ..job.spark.heap import OutOfMemory
from ..job.spark.java import JavaError
from ..job.spark.remote import ClientMissing, ServerGone, ServerUnreachable
from ..job.spark.session_files import CheckpointOnServer
from ..operations.inspection import InspectError
from ..operations.repartition import RepartitionRefused
from ..operations.savepoint import SavepointMismatch, SavepointRefused
from . import bench, checkpoint, config, data, estimate, kafka, package, repartition, run, savepoint
from .arguments import EXIT_BAD_INPUT, EXIT_CHECKPOINT_DRIFT, EXIT_MISSING_DEPENDENCY, EXIT_QUERY_FAILED

# In the order `--help` lists their commands.
COMMAND_MODULES = (run, estimate, package, checkpoint, repartition, savepoint, bench, config, data, kafka)
# The errors each a line on stderr with its prefix, and their exit codes (those exiting
# EXIT_CHECKPOINT_DRIFT leave the checkpoint as it was).
REFUSALS: dict[type[Exception], tuple[str, int]] = {
    JavaError: ("java error", EXIT_MISSING_DEPENDENCY),
    ConnectorError: ("connector error", EXIT_MISSING_DEPENDENCY),
    JvmStartError: ("spark error", EXIT_MISSING_DEPENDENCY),
    MissingPackageError: ("package error", EXIT_MISSING_DEPENDENCY),
    CheckpointUnreadable: ("checkpoint error", EXIT_CHECKPOINT_DRIFT),
    CheckpointOnServer: ("checkpoint error", EXIT_BAD_INPUT),
    CheckpointBusy: ("checkpoint error", EXIT_CHECKPOINT_DRIFT),
    LeaseBusy: ("checkpoint error", EXIT_CHECKPOINT_DRIFT),
    OperatorsChanged: ("checkpoint error", EXIT_CHECKPOINT_DRIFT),
    StreamsChanged: ("checkpoint error", EXIT_CHECKPOINT_DRIFT),
    StateKeyChanged: ("checkpoint error", EXIT_CHECKPOINT_DRIFT),
    StateWindowChanged: ("checkpoint error", EXIT_CHECKPOINT_DRIFT),
    StateSchemaRefused: ("checkpoint error", EXIT_CHECKPOINT_DRIFT),
    RepartitionRefused: ("repartition refused", EXIT_CHECKPOINT_DRIFT),
    SavepointRefused: ("savepoint refused", EXIT_CHECKPOINT_DRIFT),
    SavepointMismatch: ("savepoint error", EXIT_CHECKPOINT_DRIFT),
    InspectError: ("inspect error", EXIT_BAD_INPUT),
    KafkaEndpointError: ("kafka error", EXIT_BAD_INPUT),
    OutputColumnsChanged: ("output error", EXIT_CHECKPOINT_DRIFT),
    OutputLost: ("checkpoint error", EXIT_CHECKPOINT_DRIFT),
    ContractError: ("query error", EXIT_BAD_INPUT),
    QueryCodeError: ("query error", EXIT_BAD_INPUT),
    OutOfMemory: ("out of memory", EXIT_QUERY_FAILED),
    ClientMissing: ("spark connect error", EXIT_MISSING_DEPENDENCY),
    ServerUnreachable: ("spark connect error", EXIT_MISSING_DEPENDENCY),
    ServerGone: ("spark connect error", EXIT_QUERY_FAILED),
}

__all__ = ["main", "parser"]


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog=f"python -m {PACKAGE}", description=__doc__)
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(commands)
    return root


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.handler(args)
    except SettingsError as error:
        for line in error.lines:
            print(f"settings error: {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except tuple(REFUSALS) as error:
        prefix, code = REFUSALS[type(error)]
        print(f"{prefix}: {error}", file=sys.stderr)
        return code
    except PermissionError as error:  # reading the checkpoint (the guard, inspect), copying it (repartition)
        print(
            f"permission error: {error.filename}: {error.strerror} for this user (nothing is damaged); give the user"
            f" that runs the job access: chmod -R u+rwX {shlex.quote(str(error.filename))} (or chown -R it to that"
            " user)",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    except (
        QueryRefused,
        AnalysisException,
    ) as error:  # the query as written: a chain Spark does not run, a column it lacks
        print(
            # Some of Spark's messages end in a semicolon of their own.
            f"query error: Spark refuses the query of {QUERY_MODULE}: {first_line(str(error)).rstrip(';')}; change the"
            " query (no batch ran)",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
