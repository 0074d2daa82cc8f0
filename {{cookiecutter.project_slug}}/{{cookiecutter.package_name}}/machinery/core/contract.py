"""The seam between the machinery and your query: what the machinery needs from `<package>/query.py`.

The query module defines:

    EVENT_SCHEMA: StructType
        the events every source is parsed into (files, Kafka JSON values)
    stateful_query(events: DataFrame, query: QuerySettings, join_events: DataFrame | None) -> DataFrame
        events in, output rows out: on a stream in the job, on batch data in tests; join_events is
        the second input (join_source) when the settings have one, None otherwise. Any number of
        stateful operators, chained as Spark allows: the machinery reads them from the plan of the
        DataFrame it returns (job/plan/query_plan.py) to size, guard and inspect the state.

and may define:

    OPERATOR: str
        a starter's label, one of operators.NAMES: what the project was generated with. It shapes
        the sample input; where the plan holds other operators, the plan wins and the job says so
    events_from_rate(rate: DataFrame, keys: int) -> DataFrame
        Spark's rate source rows (timestamp, value) as events over `keys` distinct keys (demo, bench)
    sample_event(number: int, key: str, event_time: datetime, side: str) -> dict[str, str] | None
        one synthetic event as JSON values, for sample-input and calibration; side is "left", or
        "right" for the second input of a join (None: this number has no such event)
    Params: type[pydantic.BaseModel]
        the query's own business parameters (a threshold, a list of codes): settings.yaml's
        query.params is checked against it like every setting, and stateful_query reads the result
        as query.params

Nothing else of the query module is read, and the machinery never names its columns.
"""

from __future__ import annotations

import functools
import importlib
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from .operators import NAMES
from .text import first_line

PACKAGE = __name__.split(".")[0]
QUERY_MODULE = f"{PACKAGE}.query"
REQUIRED = ("EVENT_SCHEMA", "stateful_query")


class ContractError(Exception):
    """The query module does not offer what the machinery needs; the message names what and where."""


class QueryCodeError(Exception):
    """The project's own code raised while the job imported or called it (not Spark refusing the query);
    the message names the file and line."""


# The project's package (its query module and the modules it imports), without the machinery.
PACKAGE_DIR = Path(__file__).resolve().parents[2]
MACHINERY_DIR = PACKAGE_DIR / "machinery"


@contextmanager
def project_code() -> Iterator[None]:
    """Around an import or call of the project's code: an error raised in a file of the project's own
    becomes a QueryCodeError in one line (Spark's refusals and the machinery's own errors pass)."""
    try:
        yield
    except Exception as error:
        where = None if type(error).__module__.startswith(("pyspark", "py4j")) else _project_line(error)
        if where is None:
            raise
        raise QueryCodeError(
            f"{where}: {type(error).__name__}: {first_line(str(error))}; fix the code (nothing ran)"
        ) from error


def _project_line(error: Exception) -> str | None:
    """file:line of the innermost frame in the project's own files (for a SyntaxError, the line it names)."""
    places = [(frame.filename, frame.lineno) for frame in traceback.extract_tb(error.__traceback__)]
    if isinstance(error, SyntaxError) and error.filename:
        places.append((error.filename, error.lineno))
    for filename, line in reversed(places):
        path = Path(filename).resolve()
        if path.is_relative_to(PACKAGE_DIR) and not path.is_relative_to(MACHINERY_DIR):
            return f"{path.relative_to(PACKAGE_DIR.parent)}:{line}"
    return None


@functools.cache
def user_query() -> ModuleType:
    """The project's query module, checked against the contract once per process."""
    with project_code():
        module = importlib.import_module(QUERY_MODULE)
    missing = [name for name in REQUIRED if not hasattr(module, name)]
    if missing:
        raise ContractError(
            f"{QUERY_MODULE} lacks {', '.join(missing)}: the machinery needs each of {', '.join(REQUIRED)}"
            f" (see {__name__})"
        )
    label = getattr(module, "OPERATOR", None)
    if label is not None and label not in NAMES:
        raise ContractError(f"{QUERY_MODULE}.OPERATOR is {label!r}; use one of {', '.join(NAMES)}, or remove it")
    return module


def operator_name() -> str | None:
    """The starter's label, OPERATOR, if the query module keeps one."""
    label = getattr(user_query(), "OPERATOR", None)
    return None if label is None else str(label)
