"""Settings: settings.yaml, overridden by environment variables, validated before Spark starts."""

from .kafka import KafkaConnection
from .loading import DEFAULT_SETTINGS_FILE, load_settings
from .local_checks import nearest_existing_folder, unset_secrets
from .model import Settings
from .query import QuerySettings
from .section import ENV_PREFIX, SettingsError
from .sink import KafkaSinkSettings, SinkSettings
from .sources import FilesSourceSettings, KafkaSourceSettings, RateSourceSettings, SourceSettings
from .spark import connect_url, masked_url
from .state_store import StateStoreSettings

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
