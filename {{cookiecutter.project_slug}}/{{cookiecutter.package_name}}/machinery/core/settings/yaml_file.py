"""settings.yaml read as YAML, refusing what PyYAML takes without a word: a key given twice (the last
would win) and aliases that expand far past the file (a "billion laughs")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .section import SettingsError

# Aliases may repeat a value, but not expand the file past this many values (a "billion laughs" file
# of 9 aliases on each of 9 levels expands to 9^9 values: gigabytes, from a page of text).
MAX_ALIAS_VALUES = 10_000


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise SettingsError([f"settings file {path}: not found (or not a file); pass --settings PATH"])
    try:
        data = _load_yaml(path.read_text(encoding="utf-8"))
    except _Refused as error:
        raise SettingsError([f"settings file {path}: {error}"]) from None
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        line = f" at line {where.line + 1}" if where else ""
        problem = getattr(error, "problem", None) or "invalid YAML"
        raise SettingsError([f"settings file {path}: not valid YAML{line}: {problem}"]) from None
    except UnicodeDecodeError:
        raise SettingsError([f"settings file {path}: not UTF-8 text"]) from None
    if data is None:
        raise SettingsError([f"settings file {path}: empty; copy the settings.yaml the project was generated with"])
    if not isinstance(data, dict):
        raise SettingsError([f"settings file {path}: expected a mapping of sections, got {type(data).__name__}"])
    return data


class _Refused(Exception):
    """YAML that parses but is refused: a key given twice, aliases that expand too far."""


class _SettingsLoader(yaml.SafeLoader):
    """PyYAML's safe loader, counting what its aliases expand to while it composes the file."""

    def __init__(self, text: str):
        super().__init__(text)
        self.alias_values = 0
        self.open_anchors: set[str] = set()
        self.sizes: dict[int, int] = {}

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            line = event.start_mark.line + 1
            if event.anchor in self.open_anchors:
                raise _Refused(f"the alias *{event.anchor} at line {line} is inside the value it repeats; write it out")
            if event.anchor in self.anchors:
                self.alias_values += _values_in(self.anchors[event.anchor], self.sizes)
                if self.alias_values > MAX_ALIAS_VALUES:
                    raise _Refused(
                        f"its aliases expand to more than {MAX_ALIAS_VALUES:,} values (at *{event.anchor}, line"
                        f" {line}); write the values out, or repeat fewer"
                    )
        return super().compose_node(parent, index)

    # (Any: PyYAML's stubs type the anchor as a dict, the code passes its name.)
    def compose_sequence_node(self, anchor: Any) -> Any:
        return self._composing(anchor, super().compose_sequence_node)

    def compose_mapping_node(self, anchor: Any) -> Any:
        return self._composing(anchor, super().compose_mapping_node)

    def _composing(self, anchor: str | None, compose: Any) -> Any:
        if anchor is not None:
            self.open_anchors.add(anchor)
        try:
            return compose(anchor)
        finally:
            self.open_anchors.discard(anchor)


def _values_in(node: yaml.Node, sizes: dict[int, int]) -> int:
    """The values a node stands for once its aliases are expanded (each shared node counted once per use)."""
    if id(node) not in sizes:
        children = node.value if isinstance(node, yaml.SequenceNode) else []
        if isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        sizes[id(node)] = 1 + sum(min(_values_in(child, sizes), MAX_ALIAS_VALUES + 1) for child in children)
    return sizes[id(node)]


def _load_yaml(text: str) -> Any:
    """yaml.safe_load, refusing a key given twice in one mapping and aliases that expand too far."""
    loader = _SettingsLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _refuse_duplicate_keys(node, "", set())
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _refuse_duplicate_keys(node: yaml.Node, where: str, seen: set[int]) -> None:
    """PyYAML keeps the last of two equal keys without a word; a second `spark:` section would reset
    the first's other keys. Each node is visited once (aliases share them)."""
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _refuse_duplicate_keys(item, f"{where}[{index}]", seen)
        return
    if not isinstance(node, yaml.MappingNode):
        return
    first_line: dict[tuple[str, str], int] = {}
    for key, value in node.value:
        name = f"{where}.{key.value}" if where else str(key.value)
        if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
            line = key.start_mark.line + 1
            earlier = first_line.setdefault((key.tag, key.value), line)
            if earlier != line:
                what = (
                    "the second section would silently replace the whole first one; merge them into one"
                    if isinstance(value, yaml.MappingNode)
                    else "the second would silently win; keep one"
                )
                raise _Refused(f"key {name} appears twice, at lines {earlier} and {line}: {what}")
        _refuse_duplicate_keys(value, name, seen)
