"""`check` and `inspect`: the existing checkpoint against the settings, and the state it holds."""

from __future__ import annotations

import argparse
import json
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.checkpoint.files import LOCAL, CheckpointRead
from ..core.settings import DEFAULT_SETTINGS_FILE, Settings, connect_url, load_settings
from ..job.guard.checkpoint import check_checkpoint, output_seen
from .arguments import EXIT_CHECKPOINT_DRIFT, add_settings_argument, non_negative_int
from .run import guard_passes

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(commands: argparse._SubParsersAction) -> None:
    check = commands.add_parser(
        "check", help="compare the settings and the query with the existing checkpoint; nothing runs (exit 4 on drift)"
    )
    add_settings_argument(check)
    check.set_defaults(handler=cmd_check)

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
    what = inspect.add_mutually_exclusive_group()
    what.add_argument(
        "--key",
        help="one key instead of the counts: the stores that hold it, its rows and times against the watermark,"
        " why it is held or gone (compared as text with each key column), and its puts and deletes batch by batch"
        " where the store keeps a change feed",
    )
    what.add_argument(
        "--changes",
        action="store_true",
        help="each store's puts and deletes per kept batch, from the change feed (HDFS-backed, or RocksDB with"
        " changelog checkpointing), to set beside the progress' rows_updated and rows_removed",
    )
    inspect.add_argument("--json", action="store_true", help="print JSON instead of the tables")
    inspect.set_defaults(handler=cmd_inspect)


def cmd_check(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    from ..job.spark.session import tool_session  # Spark is imported only when a command needs it
    from ..job.spark.session_files import checkpoint_reader, reader_here

    with ExitStack() as stack:
        # On Spark Connect the session comes first (no JVM here), to read a checkpoint on the server's disk; a
        # JVM of Spark Classic starts only for the query's plan, once the files agree.
        spark = stack.enter_context(tool_session("check-plan", {}, settings)) if settings.spark.connect_url else None
        location = settings.query.checkpoint_location
        checkpoint = reader_here(location) if spark is None else checkpoint_reader(spark, location)
        files = LOCAL if checkpoint is None else checkpoint.files()
        report = check_checkpoint(
            settings, files, output_seen(settings, files), None if spark is None else spark.version
        )
        if not guard_passes(report):
            return EXIT_CHECKPOINT_DRIFT
        spark = spark or stack.enter_context(tool_session("check-plan", {}, settings))
        operators, evolutions, unchecked = _plan_fit(spark, settings, report.held)  # built without a checkpoint too
    if unchecked:
        print(unchecked)
    if report.last_batch is None:
        print(f"query: {operators}, fits the settings; nothing to compare with yet")
        return 0
    for evolution in evolutions:
        print(f"state schema: {evolution}")
    print(
        f"checkpoint {report.checkpoint}: consistent with the settings and the query's {operators}"
        f" (last batch {report.last_batch})"
    )
    return 0


def _plan_fit(
    spark: SparkSession, settings: Settings, held: CheckpointRead | None
) -> tuple[str, list[str], str | None]:
    """The query's stateful operators, their keys and custom_state's state schemas against the
    checkpoint's, read from the query's plan (nothing runs): raises the refusal a start would give
    (state_fit.py), else returns the operators, the state schema changes Spark accepts and what of
    Spark's checks only the start can make (on Spark Connect)."""
    from ..core.plan_operators import chain, flow_order
    from ..job.guard.state_fit import check_fit
    from ..job.plan.merge_key import checked_output, merged_by_line
    from ..job.plan.query_plan import CONNECT_UNCHECKED, read_plan, stand_in_result
    from ..job.spark.remote import is_connect
    from ..job.spark.session_files import checkpoint_reader

    result = stand_in_result(spark, settings)
    plan = read_plan(result)
    checkpoint = checkpoint_reader(spark, settings.query.checkpoint_location)
    _, evolutions = check_fit(result, plan, settings, held, checkpoint, record_key=False)
    key = checked_output(result, settings)
    if key:
        print(f"sink: {merged_by_line(key, settings.sink.path)}")
    unchecked = CONNECT_UNCHECKED if is_connect(spark) else None
    return chain([operator.kind for operator in flow_order(plan)]), evolutions, unchecked


def cmd_inspect(args: argparse.Namespace) -> int:
    settings = None if args.checkpoint else load_settings(args.settings or DEFAULT_SETTINGS_FILE)
    location = args.checkpoint if settings is None else settings.query.checkpoint_location
    from ..operations.inspection import checkpoint_facts, inspect_checkpoint, render
    from ..operations.state_reader import reader_confs

    remote = connect_url(settings.spark.remote if settings else None)
    # What can be checked before Spark starts (on Spark Connect, through the session: the server's disk).
    facts = None if remote else checkpoint_facts(location, args.batch_id)
    from ..job.plan.query_plan import planned_operators
    from ..job.spark.session import secret_confs, tool_session
    from ..job.spark.session_files import checkpoint_files

    # The user's own confs may carry what a cloud checkpoint needs (credentials, file systems).
    confs = {} if settings is None else {key: str(value) for key, value in settings.spark.conf.items()}
    if settings is not None:
        confs.update(secret_confs(settings))
    with tool_session("inspect-state", {**confs, **reader_confs(location)}, settings) as spark:
        files = checkpoint_files(spark, location)
        if facts is None or files is not LOCAL:
            facts = checkpoint_facts(location, args.batch_id, files)
        if args.key is not None or args.changes:
            return _inspect_key(spark, location, facts, args)
        inspection = inspect_checkpoint(spark, location, facts, args.batch_id, files)
        plan = [] if settings is None else planned_operators(spark, settings)
        if settings is not None and any(operator.known for operator in plan):  # each operator's estimate
            inspection.estimate = settings.sizing(plan)
    print(json.dumps(inspection.to_dict(), indent=2) if args.json else render(inspection))
    return 0


def _inspect_key(spark, location: str, facts: tuple[int | None, str], args: argparse.Namespace) -> int:
    """inspect --key, or --changes: the reads of the state over the kept batches."""
    from ..core.checkpoint.files import RESTORE_OR_RESTART, CheckpointUnreadable
    from ..job.spark.spark_errors import spark_errors
    from ..operations import change_counts, key_lookup
    from ..operations.inspection import state_metadata
    from ..operations.state_reader import spark_message

    metadata, batch = state_metadata(spark, location, facts, args.batch_id)
    try:
        if args.changes:
            counts = change_counts.count_changes(spark, location, metadata, batch)
            print(json.dumps(counts.to_dict(), indent=2) if args.json else change_counts.render(counts))
            return 0
        lookup = key_lookup.find_key(spark, location, metadata, batch, args.key)
    except spark_errors() as error:
        raise CheckpointUnreadable(
            f"{location}: Spark cannot read the state: {spark_message(error)}; the checkpoint may be damaged:"
            f" {RESTORE_OR_RESTART}"
        ) from None
    print(json.dumps(lookup.to_dict(), indent=2, default=str) if args.json else key_lookup.render(lookup))
    return 0
