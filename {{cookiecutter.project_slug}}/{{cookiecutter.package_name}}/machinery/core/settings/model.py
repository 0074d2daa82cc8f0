"""Settings: settings.yaml, overridden by environment variables, validated before Spark starts.

Sources in order of precedence: keyword arguments > environment (<PACKAGE>_ prefix, `__` between
nested keys) > settings.yaml. Unknown keys are errors. The models; loading.py reads the file.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Self, TextIO, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, SettingsConfigDict

from .. import real_time
from ..checkpoint.files import local_checkpoint
from ..checkpoint.sink_log import DELTA_LOG, LOG_DIR
from ..confs import MANAGED_CONFS, MANAGED_PREFIXES
from ..contract import QUERY_MODULE, user_query
from ..durations import AVAILABLE_NOW, parse_duration
from ..operators import NAMES, OPERATORS, UPDATE_JOIN_TYPES
from ..plan_operators import PlanOperator, chain, flow_order
from ..sizing import capacity
from ..sizing.estimate import Estimate
from ..sizing.limits import JAVA_INT, MAXIMA
from ..sizing.memory import parse_memory
from ..sizing.partitions import SPARK_MAX_PARTITIONS

if TYPE_CHECKING:
    OperatorName = str  # mypy makes no Literal of a tuple built at run time
else:
    OperatorName = Literal[NAMES]  # pydantic does: one of the operators' names

# The package this machinery belongs to names the environment prefix and the default paths.
PACKAGE = __name__.split(".")[0]
ENV_PREFIX = f"{PACKAGE.upper()}_"
ENV_VAR_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
# Conf names whose values are credentials: Spark's own redaction pattern, plus the account and
# private keys of Azure and Google Cloud storage.
SECRET_CONF = re.compile(r"(?i)secret|password|token|access[.]?key|account[.]key|private[.]key")


# Spark reads these settings as a Java int or long: a larger value fails inside Spark, after it started.
JAVA_LONG = 2**63 - 1
MAX_ROWS_PER_SECOND, MAX_KEYS = MAXIMA["input_rows_per_second"], MAXIMA["key_cardinality"]
# A factor the sizing multiplies by, or the watchdog compares with.
MAX_FACTOR = MAXIMA["state_growth_factor"]


class SettingsError(Exception):
    """Settings that cannot be used; each line names a field, its value and the fix."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


class Section(BaseModel):
    # A rate or a factor of inf or nan would pass `gt=0` and fail in the sizing's arithmetic, after Spark started.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        """pydantic reads true as 1 for a number: `shuffle_partitions: true` would pin one partition."""
        if isinstance(value, bool) and info.field_name is not None and _numeric(cls.model_fields[info.field_name]):
            raise ValueError(f"{str(value).lower()} is not a number")
        return value


def _numeric(field: FieldInfo) -> bool:
    return any(kind in (int, float) for kind in (get_args(field.annotation) or (field.annotation,)))


def _duration(value: str) -> str:
    parse_duration(value)  # raises DurationError, a ValueError pydantic reports per field
    return value


Duration = Annotated[str, AfterValidator(_duration)]


def _delay(value: str) -> str:
    parse_duration(value, zero=True)
    return value


# A watermark delay: a duration, or zero (Spark takes it: an event older than the newest is late).
Delay = Annotated[str, AfterValidator(_delay)]


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("is blank, which names no folder (or one named by spaces); give a directory path or URI")
    return value


# Every folder setting (the checkpoint, the output, each landing and archive directory): a local path,
# relative to settings.yaml, or a URI.
Folder = Annotated[str, AfterValidator(_not_blank)]


CONNECT_URL = r"^sc://[^/;\s]+(/;\S*)?$"


def connect_url(remote: str | None) -> str | None:
    """The Spark Connect server to run through: spark.remote, else pyspark's own SPARK_REMOTE, else none."""
    return remote or os.environ.get("SPARK_REMOTE") or None


HIDDEN = "<secret>"


def masked_url(url: str) -> str:
    """A Spark Connect URL (or a value given for one) as it may be printed: the value of each parameter with
    a secret-looking name (sc://host:15002/;token=...) hidden. The one rule for every line, error and
    configuration that shows spark.remote or SPARK_REMOTE."""
    head, *parameters = url.split(";")
    return ";".join([head, *(_masked_parameter(parameter) for parameter in parameters)])


def _masked_parameter(parameter: str) -> str:
    name, equals, _ = parameter.partition("=")
    return f"{name}={HIDDEN}" if equals and SECRET_CONF.search(name) else parameter


def _remote_problems(spark: SparkSettings) -> list[str]:
    """SPARK_REMOTE is pyspark's; where it names no server (local, which starts one inside this process
    on a JVM of its own), the job would be Spark Classic in disguise."""
    url = spark.connect_url
    if spark.remote is None and url is not None and not re.match(CONNECT_URL, url):
        return [
            f"SPARK_REMOTE is {masked_url(url)!r}, not a Spark Connect server's URL such as sc://host:15002; set"
            " spark.remote (or SPARK_REMOTE) to the server's, or unset SPARK_REMOTE to run on spark.master"
        ]
    return []


def _conf_scalar(value: Any) -> Any:
    if value is None or isinstance(value, dict | list):
        raise ValueError("a Spark conf value is text, a number or true/false")
    return value


def _number_from_text(value: Any) -> Any:
    """An environment override arrives as text: '2' is the number 2 for a choice among numbers."""
    return int(value) if isinstance(value, str) and value.strip().isdigit() else value


# One line for a bad value, not one per member of the union.
ConfValue = Annotated[str | int | float | bool, BeforeValidator(_conf_scalar)]


class SparkSettings(Section):
    app_name: str = Field(PACKAGE, min_length=1, description="the Spark application name")
    master: str = Field(
        "local[2]", min_length=1, description="a Spark master URL such as local[2] or spark://host:7077"
    )
    # A Spark Connect server the job and its tools run through; null: a JVM this process starts (master).
    remote: str | None = Field(
        None, pattern=CONNECT_URL, description="a Spark Connect URL such as sc://host:15002, or null"
    )
    platform: Literal["oss", "databricks"] = Field("oss", description="oss or databricks")
    shuffle_partitions: int = Field(
        200,
        gt=0,
        le=SPARK_MAX_PARTITIONS,  # Spark refuses a larger count only once it has started
        description=f"a whole number of partitions greater than zero (python -m {PACKAGE} estimate advises one)",
    )
    conf: dict[str, ConfValue] = Field(default_factory=dict, description="a mapping of Spark conf names to values")
    # Confs whose values are secrets (cloud storage keys): conf name -> NAME of the environment variable.
    secret_conf: dict[str, Annotated[str, Field(pattern=ENV_VAR_NAME)]] = Field(
        default_factory=dict, description="a mapping of Spark conf names to environment variable NAMES"
    )
    fetch_packages: bool = Field(True, description="true or false")
    # The Kafka connector (spark-sql-kafka-0-10) to fetch; null: Spark's minor release x.y.0, which
    # Spark publishes with the minor. Pin another where your Maven serves only that one, or a vendor's build.
    kafka_connector_version: str | None = Field(
        None,
        pattern=r"^[0-9]+\.[0-9]+\.[0-9]+([.-][A-Za-z0-9.-]+)?$",
        description="a Maven version such as 4.2.0, or null for Spark's own minor",
    )
    # The driver JVM's heap (spark.driver.memory) when the job starts it: `python main.py` and
    # `make submit`. A local run's executors are the driver: the sizing writes what its state needs.
    driver_memory: str = Field("1g", description="a Spark memory size such as 1g or 4g")

    @field_validator("driver_memory")
    @classmethod
    def _memory_size(cls, value: str) -> str:
        parse_memory("spark.driver_memory", value)
        return value.strip()

    @property
    def connect_url(self) -> str | None:
        """The Spark Connect server to run through: spark.remote, else pyspark's own SPARK_REMOTE."""
        return connect_url(self.remote)

    @property
    def connect_url_shown(self) -> str | None:
        """connect_url as printed: its token hidden (masked_url)."""
        url = self.connect_url
        return None if url is None else masked_url(url)

    @property
    def sizing_executors(self) -> int:
        """The executors the state spreads over: a local master runs them all in the driver, one JVM; a
        cluster has spark.executor.instances of them (1 when not set: the safe side)."""
        if self.master.strip().startswith("local"):
            return 1
        count = str(self.conf.get("spark.executor.instances", "1"))
        return int(count) if count.isdigit() and int(count) > 0 else 1

    @property
    def secret_conf_variables(self) -> dict[str, str]:
        """Setting -> the environment variable it names."""
        return {f"spark.secret_conf.{key}": name for key, name in self.secret_conf.items()}

    @field_validator("conf")
    @classmethod
    def _no_managed_or_secret_confs(cls, conf: dict[str, Any]) -> dict[str, Any]:
        for key in conf:
            if SECRET_CONF.search(key):
                raise ValueError(
                    f"{key} would put a secret in settings.yaml; move it to spark.secret_conf, which names"
                    " the environment variable holding the value"
                )
            owner = MANAGED_CONFS.get(key) or next(
                (field for prefix, field in MANAGED_PREFIXES.items() if key.startswith(prefix)), None
            )
            if owner:
                raise ValueError(f"{key} is managed by the setting {owner}; set it there instead")
        return conf


class RocksDBSettings(Section):
    bounded_memory_usage: bool = Field(False, description="true or false")
    max_memory_usage_mb: int = Field(500, gt=0, le=JAVA_INT, description="megabytes greater than zero")
    block_cache_size_mb: int | None = Field(None, gt=0, le=JAVA_INT, description="megabytes greater than zero, or null")
    write_buffer_size_mb: int | None = Field(
        None, gt=0, le=JAVA_INT, description="megabytes greater than zero, or null"
    )
    max_write_buffer_number: int | None = Field(
        None, gt=0, le=JAVA_INT, description="a whole number greater than zero, or null"
    )
    compact_on_commit: bool = Field(False, description="true or false")
    track_total_number_of_rows: bool = Field(True, description="true or false")


class IntegritySettings(Section):
    """How far the state checkpoint checks itself (docs/state.md, "A checkpoint that checks itself").
    The defaults are Spark 4.2's own, which is what checkpoints written before these settings hold."""

    # 2: each state version's files carry a unique id named in the commit log; needed for file checksums.
    checkpoint_format_version: Annotated[Literal[1, 2], BeforeValidator(_number_from_text)] = Field(
        1, description="1 or 2 (2 needs provider rocksdb)"
    )
    # A checksum file beside each state file (format version 2 only); a mismatch fails the load.
    file_checksums: bool = Field(True, description="true or false")
    # A checksum in each state row, checked when state is loaded; pinned by a checkpoint.
    row_checksums: bool = Field(False, description="true or false")
    # A snapshot that fails to load is skipped and the state rebuilt from older ones and changelogs.
    auto_snapshot_repair: bool = Field(True, description="true or false")


class StateStoreSettings(Section):
    provider: Literal["hdfs", "rocksdb"] = Field(description="hdfs or rocksdb")
    changelog_checkpointing: bool = Field(False, description="true or false (rocksdb only)")
    min_batches_to_retain: int = Field(100, ge=1, le=JAVA_INT, description="a whole number of batches, 1 or more")
    # How state rows are encoded; pinned by a checkpoint. The default is Spark's (and what checkpoints
    # written before this setting hold); avro lets a custom_state processor's state schema evolve.
    encoding_format: Literal["unsaferow", "avro"] = Field("unsaferow", description="unsaferow or avro")
    rocksdb: RocksDBSettings = Field(default_factory=RocksDBSettings)
    integrity: IntegritySettings = Field(default_factory=IntegritySettings)

    @property
    def rows_tracked(self) -> bool:
        """Whether Spark's progress counts the state rows (numRowsTotal): RocksDB's count costs a read
        before each write, which track_total_number_of_rows false saves."""
        return self.provider == "hdfs" or self.rocksdb.track_total_number_of_rows

    @model_validator(mode="after")
    def _changelog_needs_rocksdb(self) -> StateStoreSettings:
        if self.changelog_checkpointing and self.provider != "rocksdb":
            raise ValueError(
                "changelog_checkpointing is true but provider is hdfs: changelog checkpointing is a"
                " RocksDB feature; set changelog_checkpointing to false"
            )
        if self.integrity.checkpoint_format_version == 2 and self.provider != "rocksdb":
            raise ValueError(
                "integrity.checkpoint_format_version is 2 but provider is hdfs: Spark writes format version 2"
                " for RocksDB only; set integrity.checkpoint_format_version to 1"
            )
        return self


class RateSourceSettings(Section):
    rows_per_second: int = Field(
        1000, gt=0, le=MAX_ROWS_PER_SECOND, description="a whole number of rows per second greater than zero"
    )
    rows_per_batch: int | None = Field(
        None, gt=0, le=JAVA_LONG, description="rows per micro-batch greater than zero, or null"
    )
    advance_per_batch: Duration = Field("1 second", description="a Spark interval of 1 millisecond or more")
    start_timestamp_ms: int = Field(0, ge=0, le=JAVA_LONG, description="epoch milliseconds, 0 or more")
    keys: int = Field(1000, gt=0, le=MAX_KEYS, description="a whole number of distinct keys greater than zero")
    num_partitions: int | None = Field(None, gt=0, le=JAVA_INT, description="a whole number greater than zero, or null")

    @field_validator("advance_per_batch")
    @classmethod
    def _whole_milliseconds(cls, value: str) -> str:
        if parse_duration(value) < 0.001:
            raise ValueError("the rate-micro-batch source advances in whole milliseconds; use 1 millisecond or more")
        return value

    @property
    def advance_millis(self) -> int:
        return round(parse_duration(self.advance_per_batch) * 1000)


OnBadRecord = Literal["fail", "drop"]


class FilesSourceSettings(Section):
    path: Folder = Field(f"landing/{PACKAGE}", description="the landing directory")
    format: Literal["json", "csv", "parquet"] = Field("json", description="json, csv or parquet")
    max_files_per_trigger: int | None = Field(
        1000,
        gt=0,
        le=JAVA_INT,
        description="a whole number of files per micro-batch greater than zero, or null for all",
    )
    clean_source: Literal["off", "archive", "delete"] = Field("off", description="off, archive or delete")
    archive_dir: Folder | None = Field(None, description="a directory outside path, or null")
    csv_header: bool = Field(True, description="true or false")
    on_bad_record: OnBadRecord = Field("fail", description="fail or drop")

    @field_validator("clean_source", mode="before")
    @classmethod
    def _unquoted_off(cls, value: Any) -> Any:
        return "off" if value is False else value  # YAML reads an unquoted off as false

    @model_validator(mode="after")
    def _archive_dir_with_archive(self) -> FilesSourceSettings:
        if self.clean_source == "archive" and self.archive_dir is None:
            raise ValueError("clean_source is archive but archive_dir is null; set archive_dir to a directory")
        if self.clean_source != "archive" and self.archive_dir is not None:
            raise ValueError(
                f"archive_dir is set but clean_source is {self.clean_source}; set clean_source to archive,"
                " or archive_dir to null"
            )
        return self


class KafkaConnection(Section):
    """How the job reaches a Kafka cluster, as a source or as the sink: the address, the security, and
    client options beside the ones the fields build (secrets by the environment variable's name)."""

    bootstrap_servers: str = Field(
        "localhost:9092", pattern=r"^[^\s,]+(,[^\s,]+)*$", description="host:port[,host:port...]"
    )
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT", description="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"
    )
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = Field(
        None, description="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, or null"
    )
    sasl_username: str | None = Field(None, min_length=1, description="the SASL user name, or null")
    sasl_password_env: str | None = Field(
        None, pattern=ENV_VAR_NAME, description="the NAME of the environment variable holding the password"
    )
    options: dict[str, str] = Field(default_factory=dict, description="a mapping of extra Kafka client options")
    # Options whose values are secrets: option name -> NAME of the environment variable holding the value.
    secret_options: dict[str, Annotated[str, Field(pattern=ENV_VAR_NAME)]] = Field(
        default_factory=dict, description="a mapping of option names to environment variable NAMES"
    )

    # Spark options the fields build (lower case -> the field), which `options` may not set behind their back.
    MANAGED: ClassVar[dict[str, str]] = {
        "kafka.bootstrap.servers": "bootstrap_servers",
        "kafka.security.protocol": "security_protocol",
        "kafka.sasl.mechanism": "sasl_mechanism",
    }
    SECTION: ClassVar[str] = "kafka"

    @field_validator("options")
    @classmethod
    def _no_secrets_or_managed_options(cls, options: dict[str, str]) -> dict[str, str]:
        for key in options:
            lowered = key.lower()
            if any(word in lowered for word in ("password", "jaas", "secret")):
                raise ValueError(
                    f"{key} would put a secret in settings.yaml; move it to secret_options, which names"
                    " the environment variable holding the value"
                )
            if lowered in cls.MANAGED:
                raise ValueError(f"{key} is managed by {cls.SECTION}.{cls.MANAGED[lowered]}; set it there")
        return options

    @model_validator(mode="after")
    def _complete_sasl(self) -> Self:
        sasl = {
            "sasl_mechanism": self.sasl_mechanism,
            "sasl_username": self.sasl_username,
            "sasl_password_env": self.sasl_password_env,
        }
        if self.security_protocol.startswith("SASL_"):
            missing = [name for name, value in sasl.items() if value is None]
            if missing:
                raise ValueError(f"security_protocol {self.security_protocol} needs {', '.join(missing)}; set them")
        else:
            ignored = [name for name, value in sasl.items() if value is not None]
            if ignored:
                raise ValueError(
                    f"{', '.join(ignored)} would be ignored with security_protocol {self.security_protocol};"
                    " use SASL_SSL (or SASL_PLAINTEXT), or set them to null"
                )
        return self

    def secrets(self, section: str) -> dict[str, str]:
        """Setting -> the environment variable it names, for every secret this connection needs."""
        needed = {f"{section}.kafka.secret_options.{key}": name for key, name in self.secret_options.items()}
        if self.sasl_password_env is not None:
            needed[f"{section}.kafka.sasl_password_env"] = self.sasl_password_env
        return needed


class KafkaSourceSettings(KafkaConnection):
    topic: str | None = Field("events", min_length=1, description="a topic name (or several, comma separated)")
    topic_pattern: str | None = Field(None, min_length=1, description="a Java regular expression, or null")
    starting_offsets: Literal["earliest", "latest"] = Field("earliest", description="earliest or latest")
    max_offsets_per_trigger: int | None = Field(
        None, gt=0, le=JAVA_LONG, description="a whole number of records per micro-batch greater than zero, or null"
    )
    fail_on_data_loss: bool = Field(True, description="true or false")
    on_bad_record: OnBadRecord = Field("fail", description="fail or drop")

    MANAGED: ClassVar[dict[str, str]] = {
        **KafkaConnection.MANAGED,
        "subscribe": "topic",
        "subscribepattern": "topic_pattern",
        "startingoffsets": "starting_offsets",
        "maxoffsetspertrigger": "max_offsets_per_trigger",
        "failondataloss": "fail_on_data_loss",
    }
    SECTION: ClassVar[str] = "source.kafka"

    @model_validator(mode="after")
    def _one_subscription(self) -> KafkaSourceSettings:
        if (self.topic is None) == (self.topic_pattern is None):
            raise ValueError("set exactly one of topic and topic_pattern (the other to null)")
        return self


class KafkaSinkSettings(KafkaConnection):
    """The Kafka sink: each output row one record, its value the row as JSON, its key the key columns' JSON."""

    topic: str = Field("results", min_length=1, pattern=r"^[A-Za-z0-9._-]+$", description="one topic name")
    key_columns: list[str] = Field(
        default_factory=lambda: ["key"], min_length=1, description="a list of the output's column names"
    )

    MANAGED: ClassVar[dict[str, str]] = {**KafkaConnection.MANAGED, "topic": "topic"}
    SECTION: ClassVar[str] = "sink.kafka"


class SourceSettings(Section):
    type: Literal["rate", "files", "kafka"] = Field("rate", description="rate, files or kafka")
    rate: RateSourceSettings = Field(default_factory=RateSourceSettings)
    files: FilesSourceSettings = Field(default_factory=FilesSourceSettings)
    kafka: KafkaSourceSettings = Field(default_factory=KafkaSourceSettings)


class DeltaSinkSettings(Section):
    writer: Literal["delta-spark", "deltalake"] = Field("delta-spark", description="delta-spark or deltalake")
    # The Delta Lake (JVM) release fetched for delta-spark; it must be built for this Spark minor version.
    version: str = Field("4.4.0", pattern=r"^\d+\.\d+\.\d+$", description="a Delta Lake release such as 4.4.0")
    # Update mode: the output columns a batch's rows are MERGEd into the table by. Empty: the grouping
    # columns (and window) of the query's last aggregation, read from its plan (job/merge_key.py).
    key_columns: list[str] = Field(default_factory=list, description="a list of the output's column names")


class SinkSettings(Section):
    type: Literal["parquet", "delta", "console", "kafka"] = Field(description="parquet, delta, console or kafka")
    output_mode: Literal["append", "update"] = Field(
        "append", description="append or update (complete would keep every window's state forever)"
    )
    path: Folder = Field(f"output/{PACKAGE}", description="an output directory")
    console_rows: int = Field(20, gt=0, le=JAVA_INT, description="rows to print per batch, greater than zero")
    delta: DeltaSinkSettings = Field(default_factory=DeltaSinkSettings)
    kafka: KafkaSinkSettings = Field(default_factory=KafkaSinkSettings)

    @property
    def writes_files(self) -> bool:
        """Whether the output is files under sink.path (parquet, delta), which the job's checks read."""
        return self.type in ("parquet", "delta")

    @property
    def delta_writer(self) -> str | None:
        """delta-spark or deltalake when the sink is delta, otherwise None."""
        return self.delta.writer if self.type == "delta" else None

    @model_validator(mode="after")
    def _mode_fits_sink(self) -> SinkSettings:
        if self.type == "parquet" and self.output_mode != "append":
            raise ValueError(
                f"output_mode {self.output_mode} is not supported by the parquet sink, which only appends"
                " rows; use output_mode append (or the delta sink, which MERGEs updates by key)"
            )
        return self

    @property
    def merges(self) -> bool:
        """Whether each batch is MERGEd into a Delta table by the result's key (update mode into delta)."""
        return self.type == "delta" and self.output_mode == "update"


class JoinSettings(Section):
    type: Literal["inner", "left_outer"] = Field("inner", description="inner or left_outer")
    # A right (join_source) row matches a left row when its time is within this long after the left row's.
    range: Duration = Field("15 minutes", description="a Spark interval such as '15 minutes'")


class CustomStateSettings(Section):
    session_timeout: Duration = Field("30 minutes", description="a Spark interval such as '30 minutes'")
    recent_events: int = Field(5, gt=0, le=JAVA_INT, description="a whole number of event ids greater than zero")


class QuerySettings(Section):
    name: str = Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$", description="letters, digits, '_', '.', '-'")
    # Not read from settings.yaml: the loader fills it in from the query module's OPERATOR, a starter's
    # label (None without one). The stateful operators that run come from the query's plan.
    operator: OperatorName | None = Field(None, description=", ".join(NAMES[:-1]) + " or " + NAMES[-1])
    watermark: Delay = Field(description="a Spark interval such as '10 minutes', or '0 seconds'")
    # An event time more than this past the processing time is a bad record (the source's on_bad_record),
    # so that one wrong clock cannot move the watermark past every later event; null: no bound.
    max_event_time_ahead: Duration | None = Field("1 day", description="a Spark interval such as '1 day', or null")
    window: Duration = Field("1 minute", description="a Spark interval such as '1 minute'")
    join: JoinSettings = Field(default_factory=JoinSettings)
    custom_state: CustomStateSettings = Field(default_factory=CustomStateSettings)
    checkpoint_location: Folder = Field(description="a directory path or URI")
    trigger: str = Field(
        "10 seconds",
        description="an interval such as '10 seconds', available_now, or real_time (Spark 4.3; or real_time 30 seconds)",
    )
    # How long a stop (SIGTERM, --max-batches, --timeout) waits for the batch in flight to commit.
    stop_timeout: Duration = Field("2 minutes", description="a Spark interval such as '2 minutes'")
    # The query's own business parameters: a mapping here, an instance of the query module's Params
    # model once validated (stateful_query reads query.params.<name>).
    params: Any = Field(default_factory=dict, description="a mapping of the fields of Params in query.py")

    @field_validator("params")
    @classmethod
    def _user_params(cls, value: Any) -> Any:
        model = getattr(user_query(), "Params", None)
        if model is None:
            if value:
                raise ValueError(
                    f"{QUERY_MODULE} declares no Params model to check these against; add one, or remove them"
                )
            return value
        if isinstance(value, model):
            return value
        if isinstance(value, dict):  # an environment override arrives as text: a list or a number in JSON
            value = {key: _json_or_text(item, model.model_fields.get(key)) for key, item in value.items()}
        try:
            return model.model_validate(value or {})
        except ValidationError as error:
            raise ValueError("; ".join(_param_problem(problem) for problem in error.errors())) from None

    @field_validator("trigger")
    @classmethod
    def _trigger(cls, value: str) -> str:
        if value == AVAILABLE_NOW:
            return value
        return real_time.checked_trigger(value) if real_time.batch_duration(value) else _duration(value)

    @property
    def real_time(self) -> bool:
        """Whether the query runs in Spark's real-time mode (long-running batches, results as records arrive)."""
        return real_time.batch_duration(self.trigger) is not None

    @field_validator("max_event_time_ahead", mode="before")
    @classmethod
    def _no_bound(cls, value: Any) -> Any:
        """none or off (YAML reads an unquoted off as false) say no bound, as null does."""
        words = ("none", "off", "null")
        return None if value is False or (isinstance(value, str) and value.strip().lower() in words) else value

    @property
    def stop_timeout_seconds(self) -> float:
        return parse_duration(self.stop_timeout)

    @property
    def max_ahead_seconds(self) -> float | None:
        return None if self.max_event_time_ahead is None else parse_duration(self.max_event_time_ahead)

    def state_span(self) -> str | None:
        """The duration a state row lives on top of the watermark (the window, the join range, the
        session timeout: operators.py names the setting), or None."""
        setting = None if self.operator is None else OPERATORS[self.operator].lifetime_setting
        if setting is None:
            return None
        value: Any = self
        for part in setting.split("."):
            value = getattr(value, part)
        return str(value)


class OperatorCapacity(Section):
    """One stateful operator's own sizing inputs, where they differ from the query's."""

    # The operator this entry is for (the plan's name for it), checked against the plan; null: any.
    operator: str | None = Field(None, description="the operator's name, as `estimate` lists it, or null")
    input_rows_per_second: float | None = Field(
        None, gt=0, le=MAX_ROWS_PER_SECOND, description="rows per second greater than zero, or null"
    )
    key_cardinality: int | None = Field(
        None, gt=0, le=MAX_KEYS, description="a whole number of keys greater than zero, or null"
    )
    state_bytes_per_row: int | None = Field(None, gt=0, le=JAVA_INT, description="bytes greater than zero, or null")


def _json_or_text(value: Any, field: Any) -> Any:
    """A parameter given as text where its field is not text: read as JSON when it parses."""
    if not isinstance(value, str) or field is None or field.annotation is str:
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def _param_problem(problem: Any) -> str:
    """One bad parameter: its name, its value and what Params expects."""
    name = ".".join(str(part) for part in problem["loc"]) or "params"
    if problem["type"] == "missing":
        return f"{name} is missing (Params in {QUERY_MODULE} has no default for it)"
    if problem["type"] == "extra_forbidden":
        return f"{name} is not a field of Params in {QUERY_MODULE}"
    return f"{name} = {problem['input']!r}: {problem['msg']}"


class CapacitySettings(Section):
    input_rows_per_second: float = Field(gt=0, le=MAX_ROWS_PER_SECOND, description="rows per second greater than zero")
    # Distinct keys (windowed_aggregation, custom_state); null: unknown, every event may be a new key.
    key_cardinality: int | None = Field(
        None, gt=0, le=MAX_KEYS, description="a whole number of keys greater than zero, or null"
    )
    # stream_stream_join: the rate of join_source; null: the same as input_rows_per_second.
    join_input_rows_per_second: float | None = Field(
        None, gt=0, le=MAX_ROWS_PER_SECOND, description="rows per second greater than zero, or null"
    )
    state_bytes_per_row: int = Field(gt=0, le=JAVA_INT, description="bytes greater than zero")
    # The most cores the job will run on, for the shuffle-partition advice and the cores warning; null: not known.
    max_cores: int | None = Field(
        None, gt=0, le=JAVA_INT, description="a whole number of cores greater than zero, or null"
    )
    state_growth_factor: float = Field(1.0, ge=1, le=MAX_FACTOR, description="a number of 1 or more")
    # custom_state: the entries a key's map state holds (getMapState), each a state row; null: 1.
    map_entries_per_key: float | None = Field(
        None, gt=0, le=MAX_KEYS, description="a number of entries greater than zero, or null"
    )
    # applyInPandasWithState with a timeout: how long after its last event a key's state is removed
    # (the duration the function gives state.setTimeoutDuration); null: not known, kept.
    state_timeout: Duration | None = Field(None, description="a Spark interval such as '30 minutes', or null")
    # A state that nothing drops (dropDuplicates or an aggregation without the watermarked event time,
    # applyInPandasWithState without a timeout) has no steady state: sized as it is after this long.
    state_horizon: Duration = Field("1 day", description="a Spark interval such as '1 day'")
    # A query of several stateful operators: an entry per operator, in the order events reach them.
    operators: list[OperatorCapacity] = Field(
        default_factory=list, description="a list of one entry per stateful operator of the query"
    )


class MonitoringSettings(Section):
    # text: one line per batch; json: one JSON object per line (for log shippers).
    progress_format: Literal["text", "json"] = Field("text", description="text or json")
    # Spark's own streaming metrics (spark.sql.streaming.metricsEnabled), for Prometheus and other sinks.
    metrics_enabled: bool = Field(False, description="true or false")
    # Warn once when the measured state rows pass the estimate by this factor.
    state_warning_factor: float = Field(2.0, gt=1, le=MAX_FACTOR, description="a number greater than 1")
    # Warn loudly when HDFS-backed state per partition passes this share of the 1 GiB RocksDB threshold.
    hdfs_memory_warning_share: float = Field(0.8, gt=0, le=1, description="a share greater than 0 and at most 1")

    def remarks_to(self, progress_to: TextIO) -> TextIO:
        """Where the job's own remarks go: beside the progress lines, or to stderr when the progress
        is JSON lines, so that stdout carries the events only."""
        return sys.stderr if self.progress_format == "json" else progress_to


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid", case_sensitive=False
    )

    spark: SparkSettings = Field(default_factory=SparkSettings)
    state_store: StateStoreSettings
    source: SourceSettings = Field(default_factory=SourceSettings)
    # The second (right) input of stream_stream_join, such as payments beside orders; null otherwise.
    join_source: SourceSettings | None = None
    sink: SinkSettings
    query: QuerySettings
    capacity: CapacitySettings
    monitoring: MonitoringSettings = Field(default_factory=MonitoringSettings)

    @property
    def inputs(self) -> dict[str, SourceSettings]:
        """The sources the query reads, by settings section: source, and join_source for a join."""
        if self.join_source is None:
            return {"source": self.source}
        return {"source": self.source, "join_source": self.join_source}

    @property
    def kafka_endpoints(self) -> dict[str, KafkaSourceSettings | KafkaSinkSettings]:
        """Each section that is a Kafka endpoint (source, join_source, sink) -> its settings."""
        endpoints: dict[str, KafkaSourceSettings | KafkaSinkSettings] = {
            section: source.kafka for section, source in self.inputs.items() if source.type == "kafka"
        }
        if self.sink.type == "kafka":
            endpoints["sink"] = self.sink.kafka
        return endpoints

    @model_validator(mode="after")
    def _trigger_fits_source(self) -> Settings:
        for section, source in self.inputs.items():
            rate_by_clock = source.type == "rate" and source.rate.rows_per_batch is None
            if self.query.trigger == AVAILABLE_NOW and rate_by_clock:
                raise ValueError(
                    f"query.trigger available_now does not work with the clock-driven rate source of {section}"
                    f" (Spark runs one empty batch); set {section}.rate.rows_per_batch, or use an interval such"
                    " as '10 seconds'"
                )
        return self

    @model_validator(mode="after")
    def _inputs_apart(self) -> Settings:
        both = self.join_source
        if both and self.source.type == both.type == "files" and self.source.files.path == both.files.path:
            raise ValueError(
                f"join_source.files.path is {both.files.path!r}, the same directory as source.files.path;"
                " give each input its own landing directory"
            )
        return self

    def join_source_misfit(self) -> str:
        """The line for a join_source that does not fit what the query's code does (read from its plan,
        not the starter's label): null where stateful_query reads join_events, set where it leaves them
        unread. The job's query_plan finds which."""
        if self.join_source is None:
            return (
                "join_source is null but the query reads a second input (stateful_query's join_events); add a"
                " join_source section for it, with the same keys as source (type, and its files, kafka or rate"
                " settings)"
            )
        return (
            f"join_source is set (type {self.join_source.type}) but the query reads one input: stateful_query"
            " leaves join_events unread; set join_source to null"
        )

    def operator_problems(self, names: Sequence[str], join_types: Sequence[str | None] = ()) -> list[str]:
        """What the stateful operators `names` of the query's plan need of the store and the sink, one line
        each (job/query_plan.fit_problems holds join_source against the query). `join_types`: the stream-stream
        joins' types as Spark names them, where known."""
        known = [name for name in names if name in OPERATORS]
        ran = f"the query runs {chain(names)}"
        problems = []
        for name in known:
            op = OPERATORS[name]
            if op.rocksdb_only and self.state_store.provider != "rocksdb":
                problems.append(
                    f"{ran} but state_store.provider is hdfs: {op.rocksdb_only};"
                    " set state_store.provider to rocksdb (with a new checkpoint if one exists)"
                )
            if self.state_store.encoding_format == "avro" and not op.avro_encoding:
                problems.append(
                    f"{ran} but state_store.encoding_format is avro: Spark encodes only transformWithState's state"
                    f" in Avro and refuses {name} at start; set state_store.encoding_format to unsaferow"
                )
            updates = name == "stream_stream_join" and join_types and set(join_types) <= set(UPDATE_JOIN_TYPES)
            if op.append_only and self.sink.output_mode != "append" and not updates:
                problems.append(
                    f"{ran} but sink.output_mode is {self.sink.output_mode}: {name} emits each row once, final,"
                    " and Spark runs it in append mode only; set sink.output_mode to append"
                )
        return problems

    def plan_problems(self, plan: Sequence[PlanOperator]) -> list[str]:
        """The checks of operator_problems for the operators of the query's plan, and capacity.operators
        held against them: one entry per operator, in the order events reach them."""
        flow = flow_order(plan)
        kinds = [operator.kind for operator in flow]
        problems = self.operator_problems(kinds, [operator.join_type for operator in flow if operator.join_type])
        if self.query.real_time:
            problems += self.real_time_problems() + real_time.operator_problems(kinds, f"the query runs {chain(kinds)}")
        entries = self.capacity.operators
        if entries and len(entries) != len(flow):
            problems.append(
                f"capacity.operators has {len(entries)} entr{'y' if len(entries) == 1 else 'ies'} but the query's"
                f" plan holds {len(flow)} stateful operator{'' if len(flow) == 1 else 's'} ({chain(kinds)});"
                " give one entry per operator, in that order, or remove the list"
            )
        for index, (entry, kind) in enumerate(zip(entries, kinds, strict=False)):
            if entry.operator is not None and entry.operator != kind:
                problems.append(
                    f"capacity.operators[{index}].operator is {entry.operator} but operator {index + 1} of the query's"
                    f" plan is {kind} ({chain(kinds)}); put the entries in that order, or fix the name"
                )
        return problems

    def endless_run(self, plan: Sequence[PlanOperator]) -> str | None:
        """Why a run to the end of its input would never end: an available-now trigger over processing-time
        timers, for which Spark runs a batch after every batch (one may be due by the clock)."""
        clocked = [operator.kind for operator in flow_order(plan) if operator.timeout == "processing_time"]
        if not clocked or self.query.trigger != AVAILABLE_NOW:
            return None
        return (
            f"query.trigger is available_now but the query runs {clocked[0]} with processing-time timers (a"
            " ProcessingTimeTimeout, or timeMode ProcessingTime), for which Spark runs a batch after every batch:"
            " the run would never end; set query.trigger to an interval such as '1 minute', stop it with"
            " --max-batches, or time the state out by event time"
        )

    def real_time_problems(self) -> list[str]:
        """What a real-time trigger needs of the source, the sink and the store (none for another trigger)."""
        if not self.query.real_time:
            return []
        store = self.state_store
        return real_time.settings_problems(
            {section: source.type for section, source in self.inputs.items()},
            self.sink.type,
            self.sink.output_mode,
            store.provider,
            store.integrity.checkpoint_format_version,
        )

    def problems_before_run(self) -> list[str]:
        """What a run needs beyond valid settings: a source, sink and store that fit the trigger, landing
        directories that exist, secrets that are set, and a checkpoint and output location this process can
        write to."""
        problems = self.real_time_problems() + _remote_problems(self.spark)
        problems += [problem for section, source in self.inputs.items() for problem in _input_problems(section, source)]
        problems += unset_secrets(self.spark.secret_conf_variables)
        if self.spark.connect_url is None:  # through Spark Connect they are the server's folders, not this machine's
            problems += _write_problems("query.checkpoint_location", self.query.checkpoint_location)
            if self.sink.writes_files:
                problems += _write_problems("sink.path", self.sink.path)
        if self.sink.type == "kafka":
            problems += unset_secrets(self.sink.kafka.secrets("sink"))
        return problems

    def sizing(self, plan: Sequence[PlanOperator] | None = None, **overrides: Any) -> Estimate:
        """The capacity estimate for these settings: of each stateful operator of the query's plan,
        summed, or of the starter's OPERATOR without a plan. Overrides (keywords of capacity.estimate,
        such as state_bytes_per_row) replace what the settings say; a rate replaces the source's."""
        inputs: dict[str, Any] = {
            "input_rows_per_second": self.capacity.input_rows_per_second,
            "watermark": self.query.watermark,
            "state_bytes_per_row": self.capacity.state_bytes_per_row,
            "shuffle_partitions": self.spark.shuffle_partitions,
            "growth_factor": self.capacity.state_growth_factor,
            "operator": self.query.operator,
            "window": self.query.window,
            "key_cardinality": self.capacity.key_cardinality,
            "join_input_rows_per_second": self.capacity.join_input_rows_per_second,
            "join_range": self.query.join.range,
            "session_timeout": self.query.custom_state.session_timeout,
            "trigger": self.query.trigger,
            "state_timeout": self.capacity.state_timeout,
            "state_horizon": self.capacity.state_horizon,
            "map_entries_per_key": self.capacity.map_entries_per_key,
            "executors": self.spark.sizing_executors,
        }
        inputs.update(overrides)
        if plan is None:
            if inputs["operator"] is None:
                raise ValueError("the query module keeps no OPERATOR label: size the operators of its plan")
            return capacity.estimate(**inputs)
        flow = [operator for operator in flow_order(plan) if operator.known]
        place = {operator.operator_id: index for index, operator in enumerate(flow)}
        entries = self.capacity.operators
        own: list[dict[str, object]] = []
        for index, operator in enumerate(flow):
            entry = entries[index].model_dump(exclude_none=True, exclude={"operator"}) if index < len(entries) else {}
            # What the caller overrides (estimate's flags, a calibration) wins, but the source's rate.
            given = {key: value for key, value in overrides.items() if key != "input_rows_per_second"}
            own.append({**operator.sizing_inputs(), **entry, **given})
        return capacity.estimate_chain(
            [operator.kind for operator in flow],
            [None if op.upstream is None else place.get(op.upstream) for op in flow],
            own,
            **inputs,
        )


def nearest_existing_folder(location: str) -> Path | None:
    """The local folder that is location or its nearest existing parent; None for remote storage."""
    folder = local_checkpoint(location)
    if folder is None:
        return None
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def _write_problems(setting: str, location: str) -> list[str]:
    """Whether a file can be created where location is, or would be: found before Spark, not mid-batch.

    The probe is a temporary file in the location, or in its nearest existing parent, removed at
    once, so nothing is left behind (a refused run creates no directory).
    """
    folder = nearest_existing_folder(location)
    if folder is None:
        return []
    try:
        tempfile.NamedTemporaryFile(dir=folder, prefix=".write-probe-").close()
    except OSError as error:
        return [
            f"{setting} = {location!r}: cannot write in {folder} ({error.strerror}); choose a directory this"
            " user can write to, or fix its permissions"
        ]
    if folder != local_checkpoint(location):
        return []
    # The job also writes inside: a checkpoint's logs and state folders, a sink's log. A folder there
    # made read-only (or owned by another user) fails the batch, which reads like damage.
    inside = [folder] if setting == "query.checkpoint_location" else [folder / LOG_DIR, folder / DELTA_LOG]
    for top in (path for path in inside if path.is_dir()):
        for sub, _, _ in os.walk(top):
            if not os.access(sub, os.W_OK | os.X_OK):
                return [
                    f"{setting} = {location!r}: this user cannot write in {sub}, where the job writes; give it write"
                    f" access to the whole folder (chmod -R u+rwX {shlex.quote(str(folder))}, or chown -R it to this"
                    " user)"
                ]
    return []


def _input_problems(section: str, source: SourceSettings) -> list[str]:
    files = source.files
    if source.type == "files" and "://" not in files.path and not Path(files.path).is_dir():
        return [
            f"{section}.files.path = {files.path!r}: no such directory; create it (files landing there are"
            " read in order of arrival) or fix the path"
        ]
    if source.type != "kafka":
        return []
    return unset_secrets(source.kafka.secrets(section))


def unset_secrets(needed: dict[str, str]) -> list[str]:
    """Setting -> the environment variable it names: one line per variable that is not set."""
    return [
        f"{field} = {name!r}: the environment variable {name} is not set (or is empty);"
        " export it before starting the job"
        for field, name in needed.items()
        if not os.environ.get(name)
    ]
