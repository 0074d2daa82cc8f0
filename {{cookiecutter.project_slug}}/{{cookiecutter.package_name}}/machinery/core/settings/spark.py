"""The spark section: the application, the master or Spark Connect server, the confs (their secrets by
the environment variable's name), the connector, and the driver's heap; how a Connect URL is shown."""

from __future__ import annotations

import os
import re
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator

from ..confs import MANAGED_CONFS, MANAGED_PREFIXES
from ..sizing.memory import parse_memory
from ..sizing.partitions import SPARK_MAX_PARTITIONS
from .section import ENV_VAR_NAME, PACKAGE, Section

# Conf names whose values are credentials: Spark's own redaction pattern, plus the account and
# private keys of Azure and Google Cloud storage.
SECRET_CONF = re.compile(r"(?i)secret|password|token|access[.]?key|account[.]key|private[.]key")


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


def remote_problems(spark: SparkSettings) -> list[str]:
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
