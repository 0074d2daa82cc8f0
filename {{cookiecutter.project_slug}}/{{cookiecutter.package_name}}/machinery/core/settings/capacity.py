"""The capacity section: what the state sizing reads of the job's load (rates, keys, bytes per row,
growth, cores, lifetimes), for the whole query or per stateful operator."""

from __future__ import annotations

from pydantic import Field

from ..sizing.limits import JAVA_INT
from ..sizing.requests import DEFAULT_PRICES
from .section import MAX_FACTOR, MAX_KEYS, MAX_ROWS_PER_SECOND, Duration, Section


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


class RequestPrices(Section):
    """An object store's price per 1,000 requests, in its two classes (S3 Standard's, US East, by default)."""

    write_per_1000: float = Field(DEFAULT_PRICES["write_per_1000"], ge=0, le=1000, description="dollars, 0 or more")
    read_per_1000: float = Field(DEFAULT_PRICES["read_per_1000"], ge=0, le=1000, description="dollars, 0 or more")


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
    # A checkpoint on object storage: the price of its requests, per 1,000 (PUT and LIST; GET and HEAD).
    request_prices: RequestPrices = Field(default_factory=RequestPrices)
    # A query of several stateful operators: an entry per operator, in the order events reach them.
    operators: list[OperatorCapacity] = Field(
        default_factory=list, description="a list of one entry per stateful operator of the query"
    )
