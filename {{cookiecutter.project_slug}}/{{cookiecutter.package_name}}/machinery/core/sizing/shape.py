"""An operator's own sizing inputs (its shape): their defaults, what an unset one means, and the
setting each comes from.

Standard library only: the bake sizes through it.
"""

from __future__ import annotations

DEFAULT_TRIGGER = "10 seconds"  # settings.yaml's default
# The operator-specific inputs, their defaults, and the setting each comes from.
SHAPE_DEFAULTS = {
    "window": "1 minute",
    "key_cardinality": None,  # unknown: every event may be a new key (the upper bound)
    "join_input_rows_per_second": None,  # unknown: the same as the input rate
    "join_range": "15 minutes",
    "join_type": "Inner",
    "session_timeout": "30 minutes",
    "trigger": DEFAULT_TRIGGER,
    "slide": None,  # a tumbling window: it slides by its length
    "gap": "5 minutes",
    "timeout": "none",
    "state_timeout": None,  # not known: a key is taken as kept until the function removes it
    "state_horizon": "1 day",
    "state_variables": None,  # not read from a processor: the template's, one value state per key
    "map_entries_per_key": None,  # not known: one entry per key in each map state
    "evicts": False,  # dropDuplicates and an aggregation without a window keep every key, unless the plan says
}
UNSET_MEANS = {
    "key_cardinality": "unknown, so every event is taken as a new key (the upper bound; set it for a tighter figure)",
    "join_input_rows_per_second": "not set, so the input rate is used",
    "slide": "none, a tumbling window",
    "state_timeout": "not set, so no key is taken as removed",
    "state_variables": "not read from the processor, so one value state per key (the template's processor)",
    "map_entries_per_key": "not set, so each map state is taken to hold 1 entry per key (set it to what a key's map holds)",
}
SHAPE_SETTINGS = {
    "window": "query.window",
    "key_cardinality": "capacity.key_cardinality",
    "join_input_rows_per_second": "capacity.join_input_rows_per_second",
    "join_range": "query.join.range",
    "join_type": "the query's plan",
    "session_timeout": "query.custom_state.session_timeout",
    "trigger": "query.trigger",
    "slide": "the query's plan",
    "gap": "the query's plan",
    "timeout": "the query's plan",
    "state_timeout": "capacity.state_timeout",
    "state_horizon": "capacity.state_horizon",
    "state_variables": "the processor's init, read from the query's plan",
    "map_entries_per_key": "capacity.map_entries_per_key",
    "evicts": "the query's plan: whether the watermarked event time is one of its keys",
}
