"""The query section: its name, watermark, window, join and custom state, trigger, checkpoint and stop,
and the user's Params, checked against the query module's model."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, ValidationError, field_validator

from .. import real_time
from ..contract import QUERY_MODULE, user_query
from ..durations import AVAILABLE_NOW, parse_duration
from ..operators import NAMES, OPERATORS
from ..sizing.limits import JAVA_INT
from .section import Delay, Duration, Folder, Section, checked_duration

if TYPE_CHECKING:
    OperatorName = str  # mypy makes no Literal of a tuple built at run time
else:
    OperatorName = Literal[NAMES]  # pydantic does: one of the operators' names


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
    # An event time more than this past its record's arrival is a bad record (the source's on_bad_record),
    # so that one wrong clock cannot move the watermark past every later event; null: no bound.
    max_event_time_ahead: Duration | None = Field("1 day", description="a Spark interval such as '1 day', or null")
    # After an input has brought no rows for this long, the job feeds it heartbeats whose event time is the wall
    # clock less this, so that its watermark follows the clock (job/endpoints/heartbeats.py); null: never.
    quiet_input_after: Duration | None = Field(None, description="a Spark interval such as '10 minutes', or null")
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
    # A checkpoint on s3a:// is leased to one driver at a time (another machine's too): renewed every third of
    # this while the job runs; a driver that stops renewing (killed) frees the checkpoint this long after.
    lease: Duration = Field("1 minute", description="a Spark interval such as '1 minute'")
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
        return real_time.checked_trigger(value) if real_time.batch_duration(value) else checked_duration(value)

    @property
    def real_time(self) -> bool:
        """Whether the query runs in Spark's real-time mode (long-running batches, results as records arrive)."""
        return real_time.batch_duration(self.trigger) is not None

    @field_validator("max_event_time_ahead", "quiet_input_after", mode="before")
    @classmethod
    def _no_bound(cls, value: Any) -> Any:
        """none or off (YAML reads an unquoted off as false) say none, as null does."""
        words = ("none", "off", "null")
        return None if value is False or (isinstance(value, str) and value.strip().lower() in words) else value

    @property
    def stop_timeout_seconds(self) -> float:
        return parse_duration(self.stop_timeout)

    @property
    def lease_seconds(self) -> float:
        return parse_duration(self.lease)

    @property
    def max_ahead_seconds(self) -> float | None:
        return None if self.max_event_time_ahead is None else parse_duration(self.max_event_time_ahead)

    @property
    def quiet_input_seconds(self) -> float | None:
        return None if self.quiet_input_after is None else parse_duration(self.quiet_input_after)

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
