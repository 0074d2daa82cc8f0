"""The top-level Settings: every section of settings.yaml, the checks across sections, and the sizing
of the query they describe.

Sources in order of precedence: keyword arguments > environment (<PACKAGE>_ prefix, `__` between
nested keys) > settings.yaml. Unknown keys are errors. Each section is a module of its own;
loading.py reads the file.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from .. import real_time
from ..checkpoint.object_store import store_problems
from ..durations import AVAILABLE_NOW
from ..operators import OPERATORS, UPDATE_JOIN_TYPES
from ..plan_operators import PlanOperator, chain, flow_order
from ..sizing import capacity
from ..sizing.estimate import Estimate
from .capacity import CapacitySettings
from .local_checks import unset_secrets, write_problems
from .monitoring import MonitoringSettings
from .query import QuerySettings
from .section import ENV_PREFIX
from .sink import KafkaSinkSettings, SinkSettings
from .sources import KafkaSourceSettings, SourceSettings, input_problems
from .spark import SparkSettings, remote_problems
from .state_store import StateStoreSettings


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
    def locations(self) -> dict[str, str]:
        """The folders the job reads and writes, by setting: the checkpoint, the output, each landing folder."""
        places = {"query.checkpoint_location": self.query.checkpoint_location}
        if self.sink.writes_files:
            places["sink.path"] = self.sink.path
        places.update(
            {
                f"{section}.files.path": source.files.path
                for section, source in self.inputs.items()
                if source.type == "files"
            }
        )
        return places

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
    def _heartbeats_fit(self) -> Settings:
        """query.quiet_input_after's heartbeats come from a Python source whose beats the driver writes to a file
        on its own machine (job/endpoints/heartbeats.py)."""
        after = self.query.quiet_input_after
        if after is None:
            return self
        if self.query.real_time:
            raise ValueError(
                f"query.quiet_input_after is {after!r} but query.trigger is {self.query.trigger}: real-time mode reads"
                " no Python source, which the heartbeats come from; set query.quiet_input_after to null, or use an"
                " interval trigger such as '10 seconds'"
            )
        if self.spark.connect_url is not None:
            raise ValueError(
                f"query.quiet_input_after is {after!r} but the job runs through Spark Connect"
                f" ({self.spark.connect_url_shown}): the heartbeats are timed by a file on the driver's machine,"
                " which the server does not share; set query.quiet_input_after to null, or run on spark.master"
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
        each (job/plan/query_plan.fit_problems holds join_source against the query). `join_types`: the stream-stream
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
        problems = self.real_time_problems() + remote_problems(self.spark)
        problems += [problem for section, source in self.inputs.items() for problem in input_problems(section, source)]
        problems += unset_secrets(self.spark.secret_conf_variables)
        if self.spark.connect_url is None:  # through Spark Connect they are the server's folders, not this machine's
            problems += write_problems("query.checkpoint_location", self.query.checkpoint_location)
            if self.sink.writes_files:
                problems += write_problems("sink.path", self.sink.path)
        if self.sink.type == "kafka":
            problems += unset_secrets(self.sink.kafka.secrets("sink"))
        return problems + store_problems(self.locations)

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
