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
    "load_settings",
    "nearest_existing_folder",
    "unset_secrets",
]
