"""What every section of settings.yaml shares: the base model, the field types that check a duration
or a folder, the bounds Spark reads a number within, the environment prefix, and SettingsError."""

from __future__ import annotations

from typing import Annotated, Any, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationInfo, field_validator
from pydantic.fields import FieldInfo

from ..durations import parse_duration
from ..sizing.limits import MAXIMA

# The package this machinery belongs to names the environment prefix and the default paths.
PACKAGE = __name__.split(".")[0]
ENV_PREFIX = f"{PACKAGE.upper()}_"
ENV_VAR_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


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


def checked_duration(value: str) -> str:
    parse_duration(value)  # raises DurationError, a ValueError pydantic reports per field
    return value


Duration = Annotated[str, AfterValidator(checked_duration)]


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
