"""Settings: settings.yaml, overridden by environment variables, validated before Spark starts."""

from .loading import DEFAULT_SETTINGS_FILE, load_settings, nearest_existing_folder, unset_secrets
from .model import (
    ENV_PREFIX,
    FilesSourceSettings,
    KafkaConnection,
    KafkaSinkSettings,
    KafkaSourceSettings,
    QuerySettings,
    RateSourceSettings,
    Settings,
    SettingsError,
    SinkSettings,
    SourceSettings,
    StateStoreSettings,
    connect_url,
    masked_url,
)

__all__ = [
    "DEFAULT_SETTINGS_FILE",
    "ENV_PREFIX",
    "FilesSourceSettings",
    "KafkaConnection",
    "KafkaSinkSettings",
    "KafkaSourceSettings",
    "QuerySettings",
    "RateSourceSettings",
    "Settings",
    "SettingsError",
    "SinkSettings",
    "SourceSettings",
    "StateStoreSettings",
    "connect_url",
    "load_settings",
    "masked_url",
    "nearest_existing_folder",
    "unset_secrets",
]
