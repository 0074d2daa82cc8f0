"""The state schemas a checkpoint holds, read from Spark's schema files without starting Spark.

Spark writes each stateful operator's key and value schemas when a query first plans it:
transformWithState in `state/<op>/_stateSchema/<store>/<batch>_<uuid>` (format v3, one entry per
state variable and internal column family; the newest `state/<op>/_metadata/v2/<batch>` names the
file in force), the other operators in `state/<op>/<partition 0>[/<store>]/_metadata/schema` (format
v2). Both are Java DataOutputStream records: a UTF string is a 2-byte length and its bytes, a JSON
schema a 4-byte count of such strings, joined.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

from ..confs import ENCODING_CONF
from .files import RESTORE_OR_RESTART, CheckpointUnreadable, newest_state_metadata_v2

# What Spark uses when a checkpoint's offsets record no encoding (checkpoints of Spark before 4.0).
DEFAULT_ENCODING = "unsaferow"


@dataclass(frozen=True)
class ColumnFamily:
    """One store's (or one state variable's) key and value schema, as Spark's JSON of a StructType;
    for a state variable, its kind as the operator metadata records it (ValueState, ListState, MapState)."""

    name: str
    key: dict
    value: dict
    kind: str | None = None


class _Reader:
    def __init__(self, path: Path) -> None:
        self.path, self.data, self.at = path, path.read_bytes(), 0

    def take(self, size: int) -> bytes:
        if self.at + size > len(self.data):
            raise CheckpointUnreadable(f"{self.path}: a state schema file cut short; {RESTORE_OR_RESTART}")
        chunk = self.data[self.at : self.at + size]
        self.at += size
        return chunk

    def number(self, size: int) -> int:
        return int(struct.unpack(">h" if size == 2 else ">i", self.take(size))[0])

    def text(self) -> str:
        return self.take(self.number(2)).decode("utf-8")

    def schema(self) -> dict:
        joined = "".join(self.text() for _ in range(self.number(4)))
        try:
            return dict(json.loads(joined))
        except (TypeError, ValueError):
            raise CheckpointUnreadable(f"{self.path}: not a Spark state schema file; {RESTORE_OR_RESTART}") from None


def read_schema_file(path: Path) -> list[ColumnFamily]:
    """The column families of one schema file (format v2 or v3); CheckpointUnreadable for another."""
    reader = _Reader(path)
    version = reader.text()
    if version == "v2":
        return [ColumnFamily("default", reader.schema(), reader.schema())]
    if version != "v3":
        raise CheckpointUnreadable(f"{path}: state schema format {version!r}, which this check does not read")
    families = []
    for _ in range(reader.number(4)):
        name = reader.text()
        reader.number(2)  # the key schema's id
        key = reader.schema()
        reader.number(2)  # the value schema's id
        families.append(ColumnFamily(name, key, reader.schema()))
        reader.schema()  # the key encoder's spec
        reader.schema()  # the user key encoder's schema (map state)
    return families


def operator_schemas(checkpoint: Path, operator_id: int) -> list[ColumnFamily] | None:
    """The schemas in force for one operator: its newest v3 file, else its v2 files; None without any."""
    folder = checkpoint / "state" / str(operator_id)
    found = newest_state_metadata_v2(checkpoint, operator_id)
    if found is not None:
        newest, metadata = found
        stores = metadata["stateStoreInfo"]
        try:
            properties = json.loads(metadata.get("operatorPropertiesJson") or "{}")
        except ValueError:
            raise CheckpointUnreadable(f"{newest}: not a Spark state metadata file; {RESTORE_OR_RESTART}") from None
        kinds = {v["stateName"]: v["stateVariableType"] for v in properties.get("stateVariables", [])}
        # The file names, found under this checkpoint: it may have been moved since Spark wrote the paths.
        files = [
            folder / "_stateSchema" / store["storeName"] / Path(path).name
            for store in stores
            for path in store.get("stateSchemaFilePaths", [])
        ]
        if files:
            return [
                ColumnFamily(family.name, family.key, family.value, kinds.get(family.name))
                for path in files
                if path.is_file()
                for family in read_schema_file(path)
            ]
    v2_files = sorted((folder / "0").glob("**/_metadata/schema"))
    if not v2_files:
        return None
    families = []
    for path in v2_files:
        store = path.parent.parent.name
        families += [ColumnFamily(store if store != "0" else "default", f.key, f.value) for f in read_schema_file(path)]
    return families


def recorded_encoding(pinned: dict[str, str]) -> str:
    """The state encoding a checkpoint's offsets pin (Spark keeps it for the checkpoint's life)."""
    return pinned.get(ENCODING_CONF, DEFAULT_ENCODING)
