"""Every answer checked before anything is written, and the sizing decision that the bake writes.

Cookiecutter renders the hooks and settings.yaml in its own process; `local_extensions.py` loads
this module from the template being rendered (fresh each time) and gives templates `review()`. It
reads durations with the machinery's parser and sizes the state with the machinery's estimate,
loaded from the same template folder, so each rule exists once. Standard library only: this runs
under cookiecutter's Python. Not a hook itself: cookiecutter runs only files named after a hook.
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import keyword
import math
import re
import sys
from decimal import Decimal
from pathlib import Path
from types import ModuleType
from typing import Any

MACHINERY = Path("{{cookiecutter.project_slug}}", "{{cookiecutter.package_name}}", "machinery")
SLUG = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
PACKAGE = re.compile(r"^[a-z_][a-z0-9_]*$")
WHOLE_NUMBER = re.compile(r"^\d+$")
# A number as people write one: 10000, 2.5, .5, 1e6, 1.5E+3 (no sign, no thousands separator).
NUMBER = re.compile(r"^(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
DURATIONS = ("watermark", "window", "join_range", "session_timeout")
AUTO_OR_WHOLE = ("shuffle_partitions", "max_cores")
# Beyond what any Spark cluster runs: baked, with a loud warning naming the figure.
MAX_PLAUSIBLE_ROWS_PER_SECOND = 10**9
MAX_PLAUSIBLE_STATE_BYTES = 2**50  # 1 PiB
# Top-level modules of the generated project's dependencies (all its extras) and of theirs: a
# package of one of these names would shadow the module for every import in the project.
# tests/test_rebake.py checks this list against the installed packages' own metadata.
DEPENDENCY_MODULES = frozenset(
    {
        *("annotated_types", "arro3", "contourpy", "cycler", "dateutil", "deltalake", "deprecated", "dotenv"),
        *("google", "iniconfig", "kiwisolver", "librt", "matplotlib", "mpl_toolkits", "mypy", "mypy_extensions"),
        *("mypyc", "numpy", "packaging", "pandas", "pathspec", "pluggy", "py", "py4j", "pyarrow", "pydantic"),
        *("pydantic_core", "pydantic_settings", "pygments", "pylab", "pyparsing", "pyspark", "pytest", "pytz"),
        *("ruff", "typing_extensions", "typing_inspection", "tzdata", "wrapt", "yaml"),
        *("grpc", "grpc_status", "zstandard"),  # the connect extra's (pyspark[connect])
        *("boto3", "botocore", "jmespath", "s3transfer", "six", "urllib3"),  # a checkpoint's lease on S3
    }
)
OWN_NAMES = frozenset({"tests", "test", "main", "conftest"})


def review(answers: dict[str, Any], template_root: str) -> dict[str, Any]:
    """What the bake needs to know about the answers: the problems (one line each, every one of
    them), the warnings, and, when there is no problem, the sizing decision and its report."""
    machinery = load_machinery(Path(template_root) / MACHINERY)
    found = name_problems(answers) + number_problems(answers, machinery["sizing.limits"].MAXIMA)
    found += duration_problems(answers, machinery["durations"])
    found += real_time_problems(answers, machinery["real_time"])
    result: dict[str, Any] = {"problems": found, "warnings": []}
    if found:
        return result
    partitions, core_rates = (machinery[f"sizing.{name}"] for name in ("partitions", "core_rates"))
    operators = machinery["operators"].STARTERS[answers["stateful_operator"]]
    real_time = machinery["real_time"] if answers["real_time"] else None
    if real_time:
        operators = (real_time.STARTERS[answers["stateful_operator"]],)
    cores = optional_whole(answers["max_cores"])
    explicit = optional_whole(answers["shuffle_partitions"])
    count = explicit or partitions.base_count(cores)
    try:
        sizing, decision = size(machinery, operators, answers, count, real_time)
        rate_cores = core_rates.advise(sizing, decision.provider, real_time and real_time.REAL_TIME)
        advice = partitions.advise(cores, decision.provider, sizing, rate_cores.cores_with_growth)
        if explicit is None and advice.recommended != count:
            # auto: the cores or the state ask for another count than the first guess; size again at it.
            first = (count, sizing, decision)
            count = advice.recommended
            sizing, decision = size(machinery, operators, answers, count, real_time)
            if cores is None and decision.provider != first[2].provider:
                # The rate's cores asked for so many partitions that each would hold less than the threshold:
                # that spreads the heap, it does not shrink it. The first count and decision stand.
                count, sizing, decision = first
                advice = partitions.advise(cores, decision.provider, sizing)
            rate_cores = core_rates.advise(sizing, decision.provider, real_time and real_time.REAL_TIME)
    except ValueError as error:  # a pairing such as custom_state with hdfs
        result["problems"] = [f"{error}."]
        return result
    partition_lines = partitions.describe(advice, count, sizing)
    too_few_cores = core_rates.against(rate_cores, cores)
    result.update(
        warnings=implausible(answers, sizing) + ([f"{too_few_cores} (max_cores)."] if too_few_cores else []),
        operators=list(operators),
        provider=decision.provider,
        driver_memory=decision.heap,
        changelog_checkpointing=decision.changelog_checkpointing,
        shuffle_partitions=count,
        max_cores=cores,
        decision_comment=decision_comment(answers, sizing, decision, partition_lines, rate_cores.lines),
        against_recommendation=decision.against_recommendation,
        against_partition_advice=bool(partitions.against(advice, count, sizing)),
        report=machinery["sizing.report"].report(sizing, decision, partition_lines)
        + "\nCores from the rate\n"
        + "\n".join(f"  {line}" for line in rate_cores.lines),
        cores_needed=rate_cores.cores_needed,
        cores_with_growth=rate_cores.cores_with_growth,
        busy_cores=round(rate_cores.busy_cores, 2),
        target_load=rate_cores.target_load,
        sizing_table=sizing_table(sizing, decision, rate_cores, count),
        rate_source_rows_per_second=rate_source_rows(number(answers["input_rows_per_second"])),
        join_rate_source_rows_per_second=rate_source_rows(join_rate(answers)),
        numbers={name: yaml_number(number(answers[name])) for name in ("input_rows_per_second", "state_growth_factor")}
        | {"join_input_rows_per_second": yaml_number(join_rate(answers))},
    )
    return result


def load_machinery(folder: Path) -> dict[str, ModuleType]:
    """The durations and sizing modules of the template's machinery core, under a fresh package name:
    cruft renders two versions of the template in one process, and each must use its own."""
    name = f"_template_machinery_{next(_LOADS)}"
    spec = importlib.util.spec_from_file_location(
        name, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    assert spec is not None and spec.loader is not None, f"no machinery package in {folder}"
    package = importlib.util.module_from_spec(spec)
    sys.modules[name] = package
    try:
        spec.loader.exec_module(package)
        sizing = ("limits", "capacity", "decision", "report", "partitions", "core_rates")
        modules = ("durations", "operators", "real_time", *(f"sizing.{module}" for module in sizing))
        return {module: importlib.import_module(f"{name}.core.{module}") for module in modules}
    finally:
        for loaded in [key for key in sys.modules if key == name or key.startswith(f"{name}.")]:
            del sys.modules[loaded]


_LOADS = itertools.count()


def name_problems(answers: dict[str, Any]) -> list[str]:
    found = []
    slug = str(answers["project_slug"])
    if not SLUG.match(slug):
        found.append(
            f"project_slug {slug!r} is not a usable directory name: use lower-case letters, "
            "digits, '-', '_' or '.', starting with a letter or digit (for example 'stream-job')."
        )
    package = str(answers["package_name"])
    if keyword.iskeyword(package):
        made = slug.replace("-", "_") == package  # the default package_name, made from project_name's slug
        given = f", the one project_name {answers['project_name']!r} gives," if made else ""
        found.append(
            f"package_name {package!r}{given} is a Python keyword, so no import can name the package: give"
            f" package_name another name (for example '{package}_job')"
            + (", or choose another project_name." if made else ".")
        )
    elif not PACKAGE.match(package):
        found.append(
            f"package_name {package!r} is not a valid Python package name: use lower-case letters, "
            "digits and '_', not starting with a digit (for example 'stream_job')."
        )
    elif clash := shadowed(package):
        found.append(
            f"package_name {package!r} would shadow {clash}, and every import of it in the project would find"
            f" your package instead; choose another name (for example '{package}_job')."
        )
    return found


def shadowed(package: str) -> str | None:
    """What a top-level package of this name would hide, or None."""
    if package in getattr(sys, "stdlib_module_names", ()) or package in sys.builtin_module_names:
        return f"the standard library's module {package!r}"
    if package in DEPENDENCY_MODULES:
        return f"the module {package!r} of a package the project depends on"
    if package in OWN_NAMES:
        return f"the project's own {package!r}"
    return None


def number_problems(answers: dict[str, Any], maxima: dict[str, float]) -> list[str]:
    found = []
    checks = [
        ("input_rows_per_second", "a number of rows per second greater than zero, like 10000 or 2.5"),
        ("state_bytes_per_row", "a whole number of bytes greater than zero, like 64"),
        ("shuffle_partitions", "auto, or a whole number of partitions greater than zero, like 200"),
        ("max_cores", "auto, or a whole number of cores greater than zero, like 16"),
        ("state_growth_factor", "a number of 1 or more, like 1 or 2.5"),
    ]
    # Used (and written) by the join only; by default it repeats input_rows_per_second, checked above.
    if answers["stateful_operator"] == "stream_stream_join":
        checks.append(("join_input_rows_per_second", "a number of rows per second greater than zero, like 500"))
    for name, expected in checks:
        text = str(answers[name]).strip()
        if name in AUTO_OR_WHOLE and text == "auto":
            continue
        whole = name in ("state_bytes_per_row", *AUTO_OR_WHOLE)
        if text.startswith(("-", "+")):
            found.append(f"{name} {answers[name]!r} has a sign: write {expected}.")
        elif whole and NUMBER.match(text) and not WHOLE_NUMBER.match(text):
            found.append(f"{name} {answers[name]!r} is not a whole number: write {expected}.")
        elif not (WHOLE_NUMBER if whole else NUMBER).match(text):
            found.append(f"{name} {answers[name]!r} is not a number: write {expected}.")
        elif not math.isfinite(float(text)):
            found.append(f"{name} {answers[name]!r} is too large to be a number: write {expected}.")
        elif float(text) <= 0:
            found.append(f"{name} {answers[name]!r} is not greater than zero: write {expected}.")
        elif name in maxima and float(text) > maxima[name]:
            found.append(
                f"{name} {answers[name]!r} is more than {maxima[name]:,}, which no job reaches: write {expected}."
            )
        elif name == "state_growth_factor" and float(text) < 1:
            found.append(
                f"{name} {answers[name]!r} is below 1: state does not shrink over a job's life; write 1 or more."
            )
    cardinality = str(answers["key_cardinality"]).strip()
    valid = WHOLE_NUMBER.match(cardinality) and 0 < int(cardinality) <= maxima["key_cardinality"]
    if cardinality != "unknown" and not valid:
        found.append(
            f"key_cardinality {answers['key_cardinality']!r} is not valid: write a whole number of distinct keys"
            f" greater than zero and at most {maxima['key_cardinality']:,}, like 100000, or unknown."
        )
    return found


def duration_problems(answers: dict[str, Any], durations: ModuleType) -> list[str]:
    """Every duration lands in settings.yaml, whichever operator uses it, so each must parse (the
    watermark may be zero, as Spark and the settings take it)."""
    found = []
    for name in DURATIONS:
        try:
            durations.parse_duration(answers[name], zero=name == "watermark")
        except durations.DurationError as error:
            found.append(f"{name} {error}.")
    return found


def real_time_problems(answers: dict[str, Any], real_time: ModuleType) -> list[str]:
    """What real_time needs of the other answers (machinery/core/real_time.py holds Spark's rules), one line each."""
    if not answers["real_time"]:
        return []
    found = []
    why = "real_time (Spark's real-time mode)"
    if answers["source"] not in real_time.SOURCES:
        found.append(f"real_time needs source kafka: {why} reads only from Kafka; answer source kafka or real_time no.")
    if answers["sink"] not in real_time.SINKS:
        found.append(
            f"real_time needs sink kafka or console, not {answers['sink']}: {why} writes to no other sink; answer"
            " one of them or real_time no."
        )
    if answers["stateful_operator"] not in real_time.STARTERS:
        found.append(
            f"real_time runs no {answers['stateful_operator']}: {why} runs a deduplication and an aggregation without"
            " a session window; answer deduplication or windowed_aggregation, or real_time no."
        )
    if answers["state_store_provider"] == "hdfs":
        found.append(f"real_time needs the rocksdb store: {why} refuses hdfs; answer rocksdb or auto.")
    return found


def number(text: Any) -> float:
    return float(str(text).strip())


def join_rate(answers: dict[str, Any]) -> float | None:
    return (
        number(answers["join_input_rows_per_second"]) if answers["stateful_operator"] == "stream_stream_join" else None
    )


def yaml_number(value: float | None) -> str:
    """A number as YAML reads it back: 10000, 2.5 or 0.001 (never 1e-3, which YAML reads as text)."""
    if value is None:
        return "null"
    if value == int(value):
        return str(int(value))
    return format(Decimal(repr(value)), "f")


def rate_source_rows(value: float | None) -> int | None:
    """Spark's rate source makes whole rows each second: the expected rate, rounded up."""
    return None if value is None else max(1, math.ceil(value))


def optional_whole(text: Any) -> int | None:
    """A checked answer that is auto (None) or a whole number."""
    text = str(text).strip()
    return None if text == "auto" else int(text)


def size(
    machinery: dict[str, ModuleType],
    operators: tuple[str, ...],
    answers: dict[str, Any],
    partitions: int,
    real_time: ModuleType | None = None,
) -> tuple[Any, Any]:
    """The estimate of the starter's operators at this partition count and the provider decision it leads to;
    with real_time (the machinery's module, for a real-time bake) at its batch duration."""
    own = [real_time.STARTER_INPUTS.get(name, {}) if real_time else {} for name in operators]
    trigger = {"trigger": real_time.REAL_TIME} if real_time else {}
    sizing = machinery["sizing.capacity"].estimate_chain(
        operators, own_inputs=own, **sizing_inputs(answers, partitions), **trigger
    )
    provider = real_time.PROVIDER if real_time else answers["state_store_provider"]  # Spark's rule: no hdfs
    return sizing, machinery["sizing.decision"].decide(provider, bool(answers["changelog_checkpointing"]), sizing)


def sizing_inputs(answers: dict[str, Any], partitions: int) -> dict[str, Any]:
    cardinality = str(answers["key_cardinality"]).strip()
    return {
        "input_rows_per_second": number(answers["input_rows_per_second"]),
        "watermark": answers["watermark"],
        "state_bytes_per_row": int(answers["state_bytes_per_row"]),
        "shuffle_partitions": partitions,
        "growth_factor": number(answers["state_growth_factor"]),
        "window": answers["window"],
        "key_cardinality": None if cardinality == "unknown" else int(cardinality),
        "join_input_rows_per_second": join_rate(answers),
        "join_range": answers["join_range"],
        "session_timeout": answers["session_timeout"],
    }


def implausible(answers: dict[str, Any], sizing: Any) -> list[str]:
    warnings = []
    rates = {"input_rows_per_second": number(answers["input_rows_per_second"])}
    rates["join_input_rows_per_second"] = join_rate(answers)
    for name, rate in rates.items():
        if rate is not None and rate > MAX_PLAUSIBLE_ROWS_PER_SECOND:
            warnings.append(
                f"{name} is {rate:,.0f} rows/s, more than any Spark cluster reads ({MAX_PLAUSIBLE_ROWS_PER_SECOND:,});"
                " baked as given: check the answer."
            )
    total = sizing.total_bytes * sizing.growth_factor
    if total > MAX_PLAUSIBLE_STATE_BYTES:
        warnings.append(
            f"the estimated state is {total:,.0f} B ({total / MAX_PLAUSIBLE_STATE_BYTES:,.1f} PiB), more than"
            " any Spark cluster keeps; baked as given: check the rate, the watermark and the bytes per row."
        )
    return warnings


def sizing_table(sizing: Any, decision: Any, cores: Any, partitions: int) -> list[list[str]]:
    """Memory and cores side by side, for the generated README: what each comes from and comes to."""
    e, rate = sizing, sizing.input_rows_per_second
    memory = (
        f"{e.total_bytes / 2**20:,.0f} MiB of heap ({e.projected_bytes_per_partition / 2**20:,.1f} MiB per partition"
        " with growth)"
        if decision.provider == "hdfs"
        else f"{e.rocksdb_memory_bytes / 2**20:,.0f} MiB of native memory and {e.rocksdb_disk_bytes / 2**20:,.0f} MiB"
        " of local disk"
    )
    return [
        [f"at {rate:,.0f} rows/s" if rate == int(rate) else f"at {rate:,} rows/s", "memory", "cores"],
        ["from", f"{e.rows:,} state rows x the bytes each takes", f"{cores.busy_cores:.2f} cores of work at the rate"],
        [
            "comes to",
            f"{memory} on {decision.provider}",
            f"{plural(cores.cores_needed, 'core')} needed ({cores.target_load:.0%} load)",
        ],
        ["with growth", f"x{e.growth_factor:g}", plural(cores.cores_with_growth, "core")],
        ["pinned", f"provider {decision.provider}", f"{partitions} shuffle partitions"],
    ]


def plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


def decision_comment(
    answers: dict[str, Any], sizing: Any, decision: Any, partition_lines: list[str], core_lines: tuple[str, ...]
) -> list[str]:
    """The sizing written beside the provider key, so that the reasoning travels with the setting."""
    e, package = sizing, answers["package_name"]
    return [
        "Chosen at generation time by the capacity estimator",
        f"(python -m {package} estimate reproduces it):",
        f"  operator {e.operator}: {e.formula}",
        *(f"    {part.operator}: {part.rows_working}" for part in e.parts),
        f"  headline rows = {e.watermark} x {e.input_rows_per_second:g} rows/s = {e.headline_rows:,}",
        f"  rows = {e.rows_working}",
        f"  payload = {e.rows:,} x {e.state_bytes_per_row} B = {e.payload_bytes:,} B; {e.state_bytes_per_row} B per row",
        "    (key + value columns) is your answer, not a measurement:",
        f"    `python -m {package} estimate --calibrate` measures the footprint per row",
        f"  hdfs heap = {e.rows:,} x {e.heap_bytes_per_row} B + {e.store_instances:,} store instances x"
        f" {e.heap_bytes_per_instance} B = {e.total_bytes:,} B",
        f"    (the store's overhead {e.store_costs_source})",
        f"  per partition = {e.total_bytes:,} B / {e.shuffle_partitions} = {e.bytes_per_partition:,} B",
        f"  x growth {e.growth_factor:g} = {e.projected_bytes_per_partition:,} B (RocksDB from {e.threshold_bytes:,} B)",
        f"  per executor = {e.executor_partitions} partitions (a local run's driver holds them all)"
        f" = {e.executor_state_bytes:,} B on the HDFS-backed store;",
        f"    heap it needs there = 300 MiB + that / 40% (beside Spark's own memory) = {e.executor_heap_bytes:,} B",
        f"  on rocksdb: {e.rocksdb_disk_bytes // e.shuffle_partitions:,} B of disk and"
        f" {e.rocksdb_memory_bytes // e.shuffle_partitions:,} B of native memory per partition",
        f"  recommended: {e.recommended_provider}; requested: {answers['state_store_provider']};"
        f" written: {decision.provider}, spark.driver_memory {decision.heap}"
        + (
            " (what that heap needs)"
            if decision.provider == "hdfs"
            else " (Spark's default: RocksDB's state is native memory)"
        ),
        *decision.notes,
        "Cores from the rate:",
        *(f"  {line}" for line in core_lines),
        f"shuffle_partitions requested: {answers['shuffle_partitions']}; max_cores: {answers['max_cores']}",
        *partition_lines,
        "The provider and spark.shuffle_partitions are pinned into the checkpoint at the first run;",
        "a new provider needs a new checkpoint location and reprocessing. The partitions of a rocksdb",
        f"checkpoint can be moved later with the job stopped (python -m {package} repartition, Spark 4.2+);",
        "those of an hdfs checkpoint cannot.",
    ]
