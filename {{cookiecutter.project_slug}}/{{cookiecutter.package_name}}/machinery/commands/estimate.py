"""`estimate`: size the state store and recommend a provider; with --calibrate the bytes per row are
measured first, with executors the cluster is sized too, and --check fails a provider outgrown."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ..core.checkpoint.object_store import store_of
from ..core.durations import AVAILABLE_NOW, parse_duration
from ..core.figures import human_bytes
from ..core.operators import NAMES
from ..core.plan_operators import chain, unsized
from ..core.settings import Settings, load_settings
from ..core.sizing import capacity, core_rates, partitions
from ..core.sizing.cluster_sizing import (
    DEFAULT_EXECUTOR_MEMORY,
    ClusterSizing,
    cluster_report,
    size_cluster,
)
from ..core.sizing.estimate import ASSUMED_BYTES_PER_ROW, Estimate
from ..core.sizing.limits import MAXIMA
from ..core.sizing.memory import parse_memory
from ..core.sizing.partitions import PartitionAdvice
from ..core.sizing.report import report
from ..core.sizing.requests import RequestBill, bill_lines, request_bill
from ..core.sizing.restart import (
    MAINTENANCE_CONF,
    MAINTENANCE_DEFAULT,
    MIN_DELTAS_CONF,
    MIN_DELTAS_DEFAULT,
    Restart,
    replayed_versions,
    restart,
    restart_lines,
    spark_time_seconds,
)
from ..core.sizing.shape import DEFAULT_TRIGGER
from ..job.plan.query_plan import checked_plan
from .arguments import EXIT_BAD_INPUT, EXIT_QUERY_FAILED, add_settings_argument, positive_float, positive_int

if TYPE_CHECKING:
    from ..operations.calibration import Calibration

# estimate flag -> the keyword of capacity.estimate (and of Settings.sizing) whose settings value it replaces.
FLAG_KEYWORDS = {
    "rate": "input_rows_per_second",
    "watermark": "watermark",
    "bytes_per_row": "state_bytes_per_row",
    "partitions": "shuffle_partitions",
    "growth": "growth_factor",
    "operator": "operator",
    "window": "window",
    "keys": "key_cardinality",
    "join_rate": "join_input_rows_per_second",
    "join_range": "join_range",
    "session_timeout": "session_timeout",
    "map_entries": "map_entries_per_key",
}
# Without these the estimate needs the settings file; the others have defaults.
REQUIRED_FLAGS = ("rate", "watermark", "bytes_per_row", "partitions", "operator")
CLUSTER_HINT = (
    "Cluster sizing: give --executors N (or set spark.executor.instances in spark.conf) for the state and"
    " memory per executor"
)


def register(commands: argparse._SubParsersAction) -> None:
    estimate = commands.add_parser("estimate", help="size the state store and recommend a provider")
    add_settings_argument(estimate, "where missing inputs are read from")
    estimate.add_argument("--rate", type=positive_float, help="input rows per second")
    estimate.add_argument("--watermark", help="watermark, such as '10 minutes'")
    estimate.add_argument("--bytes-per-row", type=positive_int, help="bytes per state row")
    estimate.add_argument("--partitions", type=positive_int, help="shuffle partitions")
    estimate.add_argument("--growth", type=positive_float, help="growth factor, 1 or more")
    estimate.add_argument(
        "--operator", choices=NAMES, help="one stateful operator alone (default: each operator of the query's plan)"
    )
    estimate.add_argument("--window", help="windowed_aggregation: window length, such as '1 minute'")
    estimate.add_argument("--keys", type=positive_int, help="windowed_aggregation, custom_state: distinct keys")
    estimate.add_argument("--join-rate", type=positive_float, help="stream_stream_join: join_source rows per second")
    estimate.add_argument("--join-range", help="stream_stream_join: the join's time range, such as '15 minutes'")
    estimate.add_argument("--session-timeout", help="custom_state: inactivity that closes a session")
    estimate.add_argument(
        "--map-entries", type=positive_float, help="custom_state: the entries a key's map state holds (each a row)"
    )
    estimate.add_argument(
        "--max-cores", type=positive_int, help="the most cores the job will run on, for the partition advice"
    )
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
        help="exit 2 when settings.yaml's provider is hdfs but the sizing needs rocksdb (for CI); warn when the"
        " rate needs more cores than capacity.max_cores",
    )
    estimate.set_defaults(handler=cmd_estimate)


def cmd_estimate(args: argparse.Namespace) -> int:
    if args.calibrate and args.bytes_per_row is not None:
        print("estimate error: give --bytes-per-row or --calibrate (which measures it), not both", file=sys.stderr)
        return EXIT_BAD_INPUT
    beyond = [
        f"--{flag.replace('_', '-')} {value:g} is more than {MAXIMA[keyword]:,}, which no job reaches"
        for flag, keyword in (*FLAG_KEYWORDS.items(), ("max_cores", "max_cores"))
        if keyword in MAXIMA and (value := getattr(args, flag)) is not None and value > MAXIMA[keyword]
    ]
    if beyond:
        print(f"estimate error: {'; '.join(beyond)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    needs_settings = args.calibrate or any(getattr(args, flag) is None for flag in REQUIRED_FLAGS)
    settings = load_settings(args.settings) if needs_settings else None
    overrides: dict[str, Any] = {
        keyword: getattr(args, flag) for flag, keyword in FLAG_KEYWORDS.items() if getattr(args, flag) is not None
    }
    calibration = None
    if args.calibrate:
        assert settings is not None  # needs_settings
        if args.operator is not None:
            print(
                f"estimate error: --calibrate measures the query of the settings (the operators of its plan);"
                f" drop --operator {args.operator}",
                file=sys.stderr,
            )
            return EXIT_BAD_INPUT
        from ..operations.calibration import CalibrationError  # imports Spark: only when calibrating

        try:
            calibration = run_calibration(settings, args.calibrate_events)
        except CalibrationError as error:
            print(f"estimate error: {error}", file=sys.stderr)
            return EXIT_QUERY_FAILED
        overrides.update(measured_on=calibration.provider, measured_bytes_per_row=calibration.bytes_per_row)
    overrides["bytes_per_row_source"] = _bytes_source(args, calibration)
    if args.executors is not None:  # the state spreads over them: the heap each needs follows
        overrides["executors"] = args.executors
    # The settings file is read once: here if the inputs above did not need it.
    if settings is None and (args.check or args.executors is not None or args.executor_memory is not None):
        settings = load_settings(args.settings)
    try:  # the cluster's figures are checked before planning starts a JVM: a typo costs no wait
        cluster_inputs = None if settings is None else cluster_inputs_of(settings, args.executors, args.executor_memory)
    except ValueError as error:
        print(f"estimate error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    # The operators of the query's plan, unless --operator asks about one operator alone.
    plan = None if settings is None or args.operator is not None else checked_plan(settings)
    left_out = [operator for operator in plan or [] if not operator.known]
    for operator in left_out:
        print(f"{'!' * 78}\nestimate: {unsized(operator)}\n{'!' * 78}", file=sys.stderr)
    if args.check and left_out:
        print(
            f"sizing check failed: the estimate leaves out the state of {chain([o.kind for o in left_out])}, so it"
            " cannot vouch for the provider or the partitions; size that state yourself (Spark's numRowsTotal in a"
            " test run, `inspect`), then choose state_store.provider by it",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    if plan is not None and not any(operator.known for operator in plan):
        print(f"estimate: the query's plan holds no stateful operator to size ({chain([o.kind for o in plan])})")
        return 0
    try:
        # Settings.sizing maps the settings to the estimate's inputs; the flags given replace theirs.
        sizing = capacity.estimate(**overrides) if settings is None else settings.sizing(plan, **overrides)
    except ValueError as error:
        print(f"estimate error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    cores = core_advice(settings, sizing)
    max_cores = args.max_cores or (settings.capacity.max_cores if settings else None)
    try:
        replay_bound = restart_inputs(settings)
        restart_time = restart_estimate(settings, sizing, max_cores or cores.cores_with_growth, replay_bound)
    except ValueError as error:
        print(f"estimate error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.check:
        assert settings is not None  # loaded above
        return sizing_check(settings, sizing, cores)
    cluster = None if cluster_inputs is None else cluster_inputs.sized(sizing)
    advice = partition_advice(settings, sizing, args.max_cores, cores)
    if args.json:
        result = sizing.to_dict()
        result["cores_needed"] = cores.cores_needed
        result["cores"] = asdict(cores) | {
            "rows_per_second_per_core": [
                core_rates.per_core(part.operator, provider_of(settings, sizing)) for part in sizing.operators
            ],
            "against": core_rates.against(cores, max_cores),
        }
        result["partitions"] = asdict(advice) | {
            "against": partitions.against(advice, sizing.shuffle_partitions, sizing)
        }
        result["restart"] = asdict(restart_time) | {"seconds": restart_time.seconds}
        if calibration is not None:
            result["calibration"] = calibration.to_dict()
        if cluster is not None:
            result["cluster"] = asdict(cluster)
        bill = object_store_bill(settings, sizing)
        if bill is not None:
            result["object_store_requests"] = {
                "per_batch": bill.per_batch,
                "per_month": bill.per_month,
                "cost_per_month": bill.cost_per_month(),
            }
        print(json.dumps(result, indent=2))
    else:
        print(report(sizing, partition_lines=partitions.describe(advice, sizing.shuffle_partitions, sizing)))
        print(cores_report(cores, max_cores))
        print(restart_report(restart_time, replay_bound))
        print(cluster_report(cluster) if cluster else CLUSTER_HINT)
        requests = requests_report(settings, sizing)
        if requests:
            print(requests)
    return 0


def restart_inputs(settings: Settings | None) -> tuple[str, int, str]:
    """The trigger, and the two spark.conf values that bound a start's replay (Spark's defaults where unset)."""
    if settings is None:
        return DEFAULT_TRIGGER, MIN_DELTAS_DEFAULT, MAINTENANCE_DEFAULT
    conf = settings.spark.conf
    min_deltas = (
        positive_conf(MIN_DELTAS_CONF, conf[MIN_DELTAS_CONF]) if MIN_DELTAS_CONF in conf else MIN_DELTAS_DEFAULT
    )
    return settings.query.trigger, min_deltas, str(conf.get(MAINTENANCE_CONF, MAINTENANCE_DEFAULT))


def restart_estimate(
    settings: Settings | None, sizing: Estimate, cores: int, replay_bound: tuple[str, int, str]
) -> Restart:
    """A start's time for the sized state (growth included) on the settings' store, else the recommended one
    (with changelog checkpointing, the template's default), its replay bounded by restart_inputs; a ValueError
    names a bad spark.conf value."""
    provider = provider_of(settings, sizing)
    changelog = settings.state_store.changelog_checkpointing if settings else True
    trigger, min_deltas, maintenance = replay_bound
    batch_s = 0.0 if trigger == AVAILABLE_NOW else capacity.steady_batch_seconds(trigger)
    versions = replayed_versions(
        provider, changelog, batch_s, min_deltas, spark_time_seconds(MAINTENANCE_CONF, maintenance)
    )
    growth = sizing.growth_factor
    return restart(
        provider,
        changelog,
        round(sizing.rows * growth),
        round(sizing.rows_changed_per_batch * growth),
        versions,
        sizing.shuffle_partitions,
        cores,
        sizing.store_instances,
    )


def restart_report(restart_time: Restart, replay_bound: tuple[str, int, str]) -> str:
    trigger, min_deltas, maintenance = replay_bound
    lines = restart_lines(restart_time, trigger, min_deltas, maintenance, trigger == AVAILABLE_NOW)
    return "\n".join(["Restart: from a start to its first committed batch", *(f"  {line}" for line in lines)])


def object_store_bill(settings: Settings | None, sizing: Estimate) -> RequestBill | None:
    """The requests of a checkpoint on an object store at an interval trigger, billed at the settings' prices."""
    if settings is None or not store_of(settings.query.checkpoint_location) or not interval_trigger(settings):
        return None
    store = settings.state_store
    snapshot_each_commit = store.provider == "rocksdb" and not store.changelog_checkpointing
    prices = settings.capacity.request_prices.model_dump()
    files_sources = sum(
        1 for source in settings.inputs.values() if source.type == "files" and store_of(source.files.path)
    )
    trigger = parse_duration(settings.query.trigger)
    return request_bill(sizing.store_instances, trigger, snapshot_each_commit, prices, files_sources)


def interval_trigger(settings: Settings) -> bool:
    return settings.query.trigger != AVAILABLE_NOW and not settings.query.real_time


def requests_report(settings: Settings | None, sizing: Estimate) -> str | None:
    """The object store's requests and their bill, where the settings' checkpoint is on one."""
    if settings is None or not store_of(settings.query.checkpoint_location):
        return None
    header = f"Object store requests (checkpoint {settings.query.checkpoint_location})"
    bill = object_store_bill(settings, sizing)
    if bill is None:
        return f"{header}\n  not estimated for a {settings.query.trigger} trigger: measured for interval triggers only"
    lines = bill_lines(bill, settings.query.trigger, sizing.store_instances, sizing.rocksdb_disk_bytes)
    return "\n".join([header, *(f"  {line}" for line in lines)])


def provider_of(settings: Settings | None, sizing: Estimate) -> str:
    """The settings' provider, else the recommended one."""
    return sizing.recommended_provider if settings is None else settings.state_store.provider


def core_advice(settings: Settings | None, sizing: Estimate) -> core_rates.CoreAdvice:
    """The cores the rate needs on the settings' provider at the settings' trigger."""
    return core_rates.advise(sizing, provider_of(settings, sizing), settings.query.trigger if settings else None)


def cores_report(cores: core_rates.CoreAdvice, max_cores: int | None) -> str:
    """The cores beside the memory: the working, and a warning when max_cores is fewer."""
    lines = ["Cores from the rate", *(f"  {line}" for line in cores.lines)]
    warning = core_rates.against(cores, max_cores)
    if warning:
        lines.append(f"  WARNING: {warning}.")
    return "\n".join(lines)


def partition_advice(
    settings: Settings | None,
    sizing: Estimate,
    max_cores: int | None,
    cores: core_rates.CoreAdvice,
) -> PartitionAdvice:
    """The advice for the settings' provider (else the recommended one) and cores (else --max-cores, else
    the cores the rate needs, with growth)."""
    if max_cores is None and settings is not None:
        max_cores = settings.capacity.max_cores
    return partitions.advise(max_cores, provider_of(settings, sizing), sizing, cores.cores_with_growth)


@dataclass(frozen=True)
class ClusterInputs:
    """The cluster sizing's inputs, from the flags or else spark.conf, each checked."""

    settings: Settings
    executors: int
    memory: str
    memory_field: str

    def sized(self, sizing: Estimate) -> ClusterSizing:
        rocksdb = self.settings.state_store.rocksdb
        overhead = self.settings.spark.conf.get("spark.executor.memoryOverhead")
        return size_cluster(
            sizing,
            self.settings.state_store.provider,
            self.executors,
            self.memory,
            rocksdb.bounded_memory_usage,
            rocksdb.max_memory_usage_mb,
            None if overhead is None else str(overhead),
            memory_field=self.memory_field,
        )


def cluster_inputs_of(settings: Settings, executors: int | None, executor_memory: str | None) -> ClusterInputs | None:
    """The executors and memory of the flags, else of spark.conf; None without a count. A ValueError names a bad one."""
    conf = settings.spark.conf
    if executors is None:
        if "spark.executor.instances" not in conf:
            return None
        executors = positive_conf("spark.executor.instances", conf["spark.executor.instances"])
    if executor_memory is not None:
        memory, field = executor_memory, "--executor-memory"
    elif "spark.executor.memory" in conf:
        memory, field = str(conf["spark.executor.memory"]), "spark.conf spark.executor.memory"
    else:
        memory, field = DEFAULT_EXECUTOR_MEMORY, "executor memory"
    parse_memory(field, memory)
    overhead = conf.get("spark.executor.memoryOverhead")
    if overhead is not None:
        parse_memory("spark.conf spark.executor.memoryOverhead", overhead)
    return ClusterInputs(settings, executors, memory, field)


def positive_conf(name: str, value: object) -> int:
    try:
        number = int(str(value))
    except ValueError:
        number = 0
    if number < 1:
        raise ValueError(f"spark.conf {name} must be a whole number of 1 or more, got {value!r}")
    return number


def sizing_check(settings: Settings, sizing: Estimate, cores: core_rates.CoreAdvice) -> int:
    """The bake-time decision, checked again: an HDFS-backed store that the sizing has outgrown fails;
    a rate that needs more cores than capacity.max_cores is warned about."""
    chosen = settings.state_store.provider
    warning = core_rates.against(cores, settings.capacity.max_cores)
    if warning:
        print(f"{'!' * 78}\nsizing check WARNING: {warning} (capacity.max_cores).\n{'!' * 78}", file=sys.stderr)
    per_partition = human_bytes(sizing.projected_bytes_per_partition)
    if chosen == "hdfs" and sizing.recommended_provider == "rocksdb":
        print(
            f"sizing check failed: state_store.provider is hdfs but the sizing of settings.yaml needs rocksdb"
            f" ({per_partition} per partition); before the first run set provider: rocksdb, or lower the"
            " capacity figures if they are wrong (a checkpoint that exists keeps its provider: see docs/state.md)",
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
    return ASSUMED_BYTES_PER_ROW


def run_calibration(settings: Settings, events_per_file: int) -> Calibration:
    """The calibration run, in a local Spark session of its own; its progress goes to stderr."""
    from ..job.spark.session import tool_session
    from ..operations.calibration import calibrate

    print(
        f"calibrating: running the query on {settings.state_store.provider} with sample files",
        file=sys.stderr,
    )
    with tool_session("calibrate-state", {}, settings) as spark:
        return calibrate(spark, settings, events_per_file, progress_to=sys.stderr)
