"""The effective configuration: what a run would use, after environment overrides, before Spark.

Secrets are shown as the environment variable they are read from, never as their values; a Spark Connect
URL's token as hidden.
"""

from __future__ import annotations

from typing import Any

from ..core.settings import Settings, masked_url
from ..job.endpoints.kafka import kafka_options, kafka_sink_options
from ..job.endpoints.sources import files_options
from ..job.spark.session import secret_confs, spark_confs, static_confs


class _SecretNames(dict):
    """An environment stand-in: each variable reads as a placeholder naming it."""

    def __missing__(self, name: str) -> str:
        return f"<secret from ${name}>"


def effective_configuration(settings: Settings, submitted: bool = False) -> dict[str, Any]:
    secrets = _SecretNames()
    confs = {**spark_confs(settings), **static_confs(settings, submitted)}
    confs.update(secret_confs(settings, secrets))
    options = {}
    for section, source in settings.inputs.items():
        if source.type == "files":
            options[section] = files_options(source.files)
        elif source.type == "kafka":
            options[section] = kafka_options(source.kafka, secrets)
    sink = kafka_sink_options(settings.sink.kafka, secrets) if settings.sink.type == "kafka" else {}
    shown = settings.model_dump(mode="json")
    if settings.spark.remote is not None:
        shown["spark"]["remote"] = masked_url(settings.spark.remote)
    return {
        "settings": shown,
        "spark_confs": dict(sorted(confs.items())),
        "source_options": options,
        "sink_options": sink,
    }
