"""A custom_state processor's state schemas against the checkpoint's: unchanged, evolved, or refused.

Spark compares them while it plans the first batch after a restart, and refuses with a stack trace.
This says the same before a start, per state variable, by the rules Spark 4.2.1 was seen to apply
(docs/state.md, "Changing the state's schema", lists the changes tried):

- with the Avro encoding (state_store.encoding_format: avro) fields are matched by name: a nullable
  field may be added (null in the state already kept), a field removed (its values dropped) or the
  fields reordered, and a type widened the way Avro promotes it (int to bigint, ...). A narrowed or
  otherwise changed type, or a field that is not nullable, is refused. A renamed field is a removal
  and an addition: its values are not carried over.
- with the UnsafeRow encoding (Spark's default) fields are matched by position and names are
  ignored: the same number of fields of the same types, or Spark refuses.
- a state variable added starts empty; one no longer declared keeps its state in the checkpoint, unread.

The other operators' state schemas follow from the query's columns and Spark compares them the
UnsafeRow way; their state key is checked by state_fit.py, and Spark's own refusal of a value change
is explained when the first batch fails (docs/state.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from ...core.checkpoint.files import START_OVER, CheckpointRead, ColumnFamily, recorded_encoding
from ...core.plan_operators import PlanOperator
from ..plan.processor_state import PLAN_NODE, StateVariable, declared_state

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType, StructType

# Type changes Avro reads old values into (its promotion rules, by Spark's type names); Spark 4.2.1
# was seen to accept int to bigint and refuse bigint to int and bigint to string.
AVRO_WIDENING = {
    ("int", "bigint"),
    ("int", "float"),
    ("int", "double"),
    ("bigint", "float"),
    ("bigint", "double"),
    ("float", "double"),
}
# The field Spark stores beside a TTL'd state variable's value (its expiry, in epoch milliseconds).
TTL_FIELD = "ttlExpirationMs"


@dataclass(frozen=True)
class SchemaChange:
    # "custom_state (operator 0), state variable session"
    where: str
    what: str
    accepted: bool


class StateSchemaRefused(Exception):
    """The query's state schema changed in a way Spark refuses on this checkpoint."""


def schema_changes(
    held: CheckpointRead,
    plan: Sequence[PlanOperator],
    declared: Sequence[Sequence[StateVariable] | None],
    encoding: str,
) -> list[SchemaChange]:
    """The changes of each custom_state operator's state variables against the checkpoint's schemas;
    an operator whose processor could not be read here (None) is left to Spark."""
    processors = [operator for operator in plan if operator.node == PLAN_NODE]
    changes = []
    for operator, variables in zip(processors, declared, strict=False):
        schemas = held.schemas.get(operator.operator_id)
        if variables is None or schemas is None:
            continue
        where = f"{operator.kind} (operator {operator.operator_id})"
        changes += _variable_changes(where, variables, schemas, encoding)
    return changes


def _variable_changes(
    where: str, variables: Sequence[StateVariable], held: list[ColumnFamily], encoding: str
) -> list[SchemaChange]:
    from pyspark.sql.types import StructType

    # Spark's own column families (timers, TTL indexes) start with "$"; "default" is the store's.
    stored = {family.name: family for family in held if not family.name.startswith("$") and family.name != "default"}
    changes = []
    for variable in variables:
        place = f"{where}, state variable {variable.name}"
        family = stored.pop(variable.name, None)
        if family is None:
            changes.append(SchemaChange(place, "added (it starts empty)", True))
            continue
        if family.kind is not None and family.kind != variable.kind:
            what = f"changed from {family.kind} to {variable.kind} (Spark keeps a state variable's kind)"
            changes.append(SchemaChange(place, what, False))
            continue
        old, new = StructType.fromJson(family.value), variable.value
        compare = _by_name if encoding == "avro" else _by_position
        kept_ttl, has_ttl = _ttl_wrapped(old), variable.ttl_ms is not None
        if kept_ttl and has_ttl:  # both wrapped: compare the user's own fields, as the messages name them
            old = cast(StructType, old.fields[0].dataType)
        elif kept_ttl or has_ttl:  # Spark compares the stored forms: the wrapper against the bare value
            place += f", time to live {'added' if has_ttl else 'removed'}"
            new = with_ttl(new) if has_ttl else new
        changes += [SchemaChange(place, what, accepted) for what, accepted in compare("", old, new)]
    for name in stored:
        changes.append(
            SchemaChange(f"{where}, state variable {name}", "no longer declared (its state stays unread)", True)
        )
    return changes


def with_ttl(value: StructType) -> StructType:
    """A state variable's value as Spark stores it when the variable has a time to live: the value
    wrapped beside its expiry (transformWithState's schema for a TTL'd value, list or map state)."""
    from pyspark.sql.types import LongType, StructField, StructType

    return StructType([StructField("value", value), StructField(TTL_FIELD, LongType())])


def _ttl_wrapped(stored: StructType) -> bool:
    from pyspark.sql.types import StructType

    names = [field.name for field in stored.fields]
    return names == ["value", TTL_FIELD] and isinstance(stored.fields[0].dataType, StructType)


def _by_name(prefix: str, old: StructType, new: StructType) -> list[tuple[str, bool]]:
    """Avro's resolution: fields by name, every field nullable, types equal or promoted."""
    from pyspark.sql.types import StructType

    before = {field.name: field for field in old.fields}
    found: list[tuple[str, bool]] = []
    for field in new.fields:
        name = prefix + field.name
        if not field.nullable:
            found.append(
                (f"field {name} is NOT NULL: with the Avro encoding every state field must be nullable", False)
            )
        kept = before.pop(field.name, None)
        if kept is None:
            found.append((f"field {name} {field.dataType.simpleString()} added (null in the state already kept)", True))
        elif isinstance(kept.dataType, StructType) and isinstance(field.dataType, StructType):
            found += _by_name(name + ".", kept.dataType, field.dataType)
        elif kept.dataType != field.dataType:
            found.append(_type_change(name, kept.dataType, field.dataType))
    found += [(f"field {prefix}{name} removed (its values are dropped)", True) for name in before]
    if not found and [f.name for f in old.fields] != [f.name for f in new.fields]:
        found.append((f"fields {prefix or ''}reordered (Avro matches them by name)", True))
    return found


def _type_change(name: str, old: DataType, new: DataType) -> tuple[str, bool]:
    was, now = old.simpleString(), new.simpleString()
    if (was, now) in AVRO_WIDENING:
        return f"field {name} widened from {was} to {now}", True
    return (
        f"field {name} changed from {was} to {now} (Avro widens int to bigint, float or double, never narrows)",
        False,
    )


def _by_position(prefix: str, old: StructType, new: StructType) -> list[tuple[str, bool]]:
    """UnsafeRow's check: the same number of fields, the same types in the same places, names ignored."""
    if len(old.fields) != len(new.fields):
        names = {field.name for field in old.fields}
        added = [field.name for field in new.fields if field.name not in names]
        removed = [field.name for field in old.fields if field.name not in {f.name for f in new.fields}]
        what = ", ".join([f"field {name} added" for name in added] + [f"field {name} removed" for name in removed])
        return [
            (
                f"{what or 'the number of fields changed'}: with the UnsafeRow encoding (unsaferow) Spark keeps a"
                " state's fields as they were; only a checkpoint started with state_store.encoding_format avro"
                " takes added or removed fields",
                False,
            )
        ]
    found = []
    for kept, field in zip(old.fields, new.fields, strict=True):
        if kept.dataType.simpleString() != field.dataType.simpleString() or (kept.nullable and not field.nullable):
            found.append(
                (
                    f"field {field.name} is {_typed(field)} where the state holds {_typed(kept)}: with the UnsafeRow"
                    " encoding (unsaferow) every field keeps its type and place",
                    False,
                )
            )
        elif kept.name != field.name:
            found.append(
                (
                    f"field {kept.name} renamed {field.name} (UnsafeRow matches fields by place: its values carry over)",
                    True,
                )
            )
    return found


def _typed(field) -> str:
    return f"{field.dataType.simpleString()}{'' if field.nullable else ' NOT NULL'}"


def refusal(changes: Sequence[SchemaChange], checkpoint: str, encoding: str) -> str | None:
    """One line naming each change Spark refuses and the way on, None when it refuses none."""
    refused = [change for change in changes if not change.accepted]
    if not refused:
        return None
    what = "; ".join(f"{change.where}: {change.what}" for change in refused)
    return (
        f"the state's schema changed in a way Spark refuses: {what} (the checkpoint {checkpoint} is encoded"
        f" {encoding}, fixed when it started). Either change the processor's state schema back, or {START_OVER}."
    )


def evolutions(changes: Sequence[SchemaChange]) -> list[str]:
    """One line per change Spark accepts, for check and the start's log."""
    return [f"{change.where}: {change.what}; Spark accepts it" for change in changes if change.accepted]


def state_schema_drift(
    result: DataFrame, plan: Sequence[PlanOperator], held: CheckpointRead | None, location: str
) -> tuple[str | None, list[str]]:
    """(the refusal line, or None; the accepted evolutions) of the query's custom_state schemas against
    the checkpoint's at location. Nothing to compare without a local checkpoint that logged a batch, or
    without a custom_state operator."""
    if held is None or held.last_batch is None or not any(operator.node == PLAN_NODE for operator in plan):
        return None, []
    encoding = recorded_encoding(held.pinned)
    changes = schema_changes(held, plan, declared_state(result), encoding)
    return refusal(changes, location, encoding), evolutions(changes)


# Spark's refusals of a changed state schema, found while it plans the first batch after a restart.
SPARK_SCHEMA_REFUSALS = (
    "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE",
    "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE",
    "STATE_STORE_INVALID_VALUE_SCHEMA_EVOLUTION",
    "STATE_STORE_INVALID_VARIABLE_TYPE_CHANGE",
    "TRANSFORM_WITH_STATE_SCHEMA_MUST_BE_NULLABLE",
)


def schema_refusal_advice(message: str) -> list[str]:
    """The way on when Spark refused the query's state schema (an aggregation, deduplication or join
    whose columns changed: their schemas are known only to Spark's planning)."""
    found = next((condition for condition in SPARK_SCHEMA_REFUSALS if condition in message), None)
    if found is None:
        return []
    return [
        f"checkpoint: the query's state schema no longer fits the one in the checkpoint (Spark's {found}; no batch"
        f" ran on the changed query). Either change the query back, or {START_OVER} (docs/state.md, Changing the"
        " state's schema)."
    ]
