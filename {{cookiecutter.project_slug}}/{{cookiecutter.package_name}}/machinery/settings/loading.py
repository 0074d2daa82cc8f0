"""Loading settings: settings.yaml under environment overrides, paths made absolute, errors one line per field."""

from __future__ import annotations

import difflib
import itertools
import json
import os
import types
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_settings import BaseSettings, InitSettingsSource, PydanticBaseSettingsSource
from pydantic_settings import SettingsError as SourceError

from ..contract import QUERY_MODULE, operator_name
from .model import ENV_PREFIX, Settings, SettingsError, SourceSettings, nearest_existing_folder, unset_secrets

DEFAULT_SETTINGS_FILE = Path("settings.yaml")
# Aliases may repeat a value, but not expand the file past this many values (a "billion laughs" file
# of 9 aliases on each of 9 levels expands to 9^9 values: gigabytes, from a page of text).
MAX_ALIAS_VALUES = 10_000
# A bad value longer than this is shown cut, so that an error stays one readable line.
SHOWN_VALUE_CHARS = 120
__all__ = ["DEFAULT_SETTINGS_FILE", "load_settings", "nearest_existing_folder", "unset_secrets"]


def load_settings(path: Path | str = DEFAULT_SETTINGS_FILE, **overrides: Any) -> Settings:
    """Read, merge and validate the settings, with relative paths made absolute against the file."""
    path = Path(path)
    data = _read_yaml_mapping(path)
    misplaced = _operator_set_outside_code(data, path)
    query = data.get("query")
    if isinstance(query, dict) and operator_name() is not None:
        # The starter's label is the code's: the query module keeps it (the plan decides the rest).
        query.setdefault("operator", operator_name())

    class FromFile(Settings):
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            return init_settings, env_settings, InitSettingsSource(settings_cls, init_kwargs=data)

    unknown = misplaced + _unknown_environment_names()
    try:
        settings = FromFile(**overrides)
    except ValidationError as error:
        raise SettingsError(unknown + describe_errors(error, path)) from None
    except SourceError as error:  # an environment variable pydantic-settings cannot parse (not JSON)
        raise SettingsError(unknown + _unparsable_environment(str(error))) from None
    if unknown:
        raise SettingsError(unknown)
    return _resolve_paths(settings, path.resolve().parent)


def _operator_set_outside_code(data: dict[str, Any], path: Path) -> list[str]:
    """query.operator in the file or the environment: refused, since the query module decides it."""
    where = []
    if isinstance(data.get("query"), dict) and "operator" in data["query"]:
        where.append(f"{path.name} key query.operator")
    variable = f"{ENV_PREFIX}QUERY__OPERATOR"
    if any(name.upper() == variable for name in os.environ):
        where.append(f"environment variable {variable}")
    return [
        f"{place}: the query's stateful operators are set by the code ({QUERY_MODULE}), and read from its plan;"
        " remove it here (to run other operators, change the query and start a new checkpoint)"
        for place in where
    ]


def _unknown_environment_names() -> list[str]:
    """Overrides naming no section: pydantic-settings would ignore them, and a typo would go unseen."""
    sections = list(Settings.model_fields)
    lines = []
    for name in sorted(os.environ):
        if not name.upper().startswith(ENV_PREFIX):
            continue
        section = name[len(ENV_PREFIX) :].split("__")[0].lower()
        if section not in sections:
            close = difflib.get_close_matches(section, sections, n=1)
            hint = f" (did you mean {ENV_PREFIX}{close[0].upper()}__...?)" if close else ""
            lines.append(
                f"environment variable {name}: names no settings section{hint}; the sections are"
                f" {', '.join(sections)}; fix the name or unset it"
            )
    return lines


def _read_yaml_mapping(path: Path) -> dict[str, Any]:
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


def _resolve_paths(settings: Settings, base: Path) -> Settings:
    def absolute(location: str) -> str:
        if "://" in location:
            return location
        location = os.path.expanduser(location)  # ~ and ~user, as a shell would
        if Path(location).is_absolute():
            return location
        return str((base / location).resolve())

    checkpoint = absolute(settings.query.checkpoint_location)
    if "://" not in checkpoint and Path(checkpoint).exists() and not Path(checkpoint).is_dir():
        raise SettingsError(
            [
                f"query.checkpoint_location = {checkpoint!r}: is a file, not a directory;"
                " point it at a directory (a new one starts a new query)"
            ]
        )
    query = settings.query.model_copy(update={"checkpoint_location": checkpoint})
    sink = settings.sink.model_copy(update={"path": absolute(settings.sink.path)})
    inputs = {section: _resolve_input(section, source, absolute) for section, source in settings.inputs.items()}
    resolved = settings.model_copy(update={"query": query, "sink": sink, **inputs})
    overlaps = _overlapping_folders(resolved)
    if overlaps:
        raise SettingsError(overlaps)
    return resolved


def _overlapping_folders(settings: Settings) -> list[str]:
    """The checkpoint, the output and each landing folder, two by two: one folder inside (or equal to)
    another mixes their files, and Spark says nothing (a landing folder that is the output: every file
    landing there is ignored, since Spark reads a folder holding a sink's _spark_metadata log as that output)."""
    places = {"query.checkpoint_location": settings.query.checkpoint_location}
    if settings.sink.type != "console":
        places["sink.path"] = settings.sink.path
    for section, source in settings.inputs.items():
        if source.type == "files":
            places[f"{section}.files.path"] = source.files.path
    local = {setting: folder for setting, location in places.items() if (folder := _local_folder(location))}
    lines = []
    for (one, one_folder), (other, other_folder) in itertools.combinations(local.items(), 2):
        if one.endswith(".files.path") and other.endswith(".files.path"):
            continue  # two landing folders: the model refuses the same one twice
        if one_folder.is_relative_to(other_folder) and one_folder != other_folder:
            inner, outer = one, other
        elif other_folder.is_relative_to(one_folder):
            inner, outer = other, one
        else:
            continue
        same = one_folder == other_folder
        pair = {inner, outer}
        if same and "sink.path" in pair and pair != {"sink.path", "query.checkpoint_location"}:
            harm = (
                "every file landing there would be ignored for good (Spark reads a folder holding a sink's log as"
                " that sink's output, and nothing else)"
            )
        elif pair == {"sink.path", "query.checkpoint_location"}:
            harm = (
                "the output's files and the checkpoint's would mix, and removing or restoring the checkpoint would"
                " take the output with it"
            )
        elif outer.endswith(".files.path"):
            harm = f"the source would read the files of {inner} as input"
        else:
            harm = f"the input files would mix with those of {outer}"
        lines.append(
            f"{inner} = {places[inner]!r}: {'is the same directory as' if same else 'is inside'} {outer}"
            f" {places[outer]!r}: {harm}; give each its own"
            " directory, side by side"
        )
    return lines


def _local_folder(location: str) -> Path | None:
    """A local path as the file system resolves it (symbolic links, ..), None for remote storage."""
    if "://" in location and not location.startswith("file:"):
        return None
    return Path(location.removeprefix("file://").removeprefix("file:")).resolve()


def _resolve_input(section: str, source: SourceSettings, absolute) -> SourceSettings:
    files = source.files
    archive = None if files.archive_dir is None else absolute(files.archive_dir)
    files = files.model_copy(update={"path": absolute(files.path), "archive_dir": archive})
    if archive and "://" not in archive and Path(archive).is_relative_to(files.path):
        raise SettingsError(
            [
                f"{section}.files.archive_dir = {archive!r}: is inside {section}.files.path {files.path!r}, where"
                " the source would read its own archive; choose a directory outside it"
            ]
        )
    return source.model_copy(update={"files": files})


def describe_errors(error: ValidationError, path: Path) -> list[str]:
    """One line per bad field: where it came from, the value, what is wrong and what is expected."""
    lines = []
    for item in error.errors():
        field = ".".join(str(part) for part in item["loc"]) or "settings"
        origin = _origin(item["loc"], path)
        if isinstance(item["input"], dict) and item["type"] == "value_error":
            # A check across the keys of a section: its message names the keys and values.
            lines.append(f"{field}: {item['msg'].removeprefix('Value error, ')} ({origin})")
        elif item["type"] == "extra_forbidden":
            lines.append(f"{field}: unknown key{_did_you_mean(item['loc'])} ({origin}); remove it")
        elif item["type"] == "missing":
            expected = _expected(item["loc"]) or "see the settings.yaml the project was generated with"
            lines.append(f"{field}: missing ({origin}); add it: {expected}")
        else:
            message = item["msg"].removeprefix("Value error, ")
            expected = _expected(item["loc"])
            hint = f"; expected {expected}" if expected else ""
            lines.append(f"{field} = {_shown(item['input'])}: {message} ({origin}){hint}")
    return lines


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN_VALUE_CHARS else f"{text[: SHOWN_VALUE_CHARS - 5]} ...{text[-1]}"


def _origin(loc: tuple[Any, ...], path: Path) -> str:
    """The environment variable(s) that set this field or a key inside it, or the one whose JSON value
    holds it (STREAM_JOB_SPARK__CONF='{"name": ...}'), else the settings file."""
    variable = _variable(loc)
    names = sorted(name for name in os.environ if name.upper() == variable or name.upper().startswith(f"{variable}__"))
    if names:
        return f"from environment variable {', '.join(names)}"
    for depth in range(len(loc) - 1, 0, -1):
        outer = _variable(loc[:depth])
        for name in (name for name in os.environ if name.upper() == outer):
            if _holds(os.environ[name], loc[depth:]):
                return f"from environment variable {name}"
    return f"in {path}"


def _variable(loc: tuple[Any, ...]) -> str:
    return ENV_PREFIX + "__".join(str(part) for part in loc).upper()


def _holds(text: str, keys: tuple[Any, ...]) -> bool:
    """Whether a JSON mapping holds the first of the keys (the rest of a location may name a union's member)."""
    try:
        value = json.loads(text)
    except ValueError:
        return False
    return isinstance(value, dict) and str(keys[0]) in value


def _unparsable_environment(message: str) -> list[str]:
    """The variables whose value pydantic-settings must read as JSON (a section, a mapping, a list) and
    cannot: it names only the section."""
    lines = []
    for name in sorted(os.environ):
        if not name.upper().startswith(ENV_PREFIX):
            continue
        loc = tuple(name[len(ENV_PREFIX) :].lower().split("__"))
        field = _field_at(loc)
        kind = None if field is None else _json_kind(field.annotation)
        if kind is None:
            continue
        try:
            json.loads(os.environ[name])
        except ValueError:
            example = "'[...]'" if kind == "list" else """'{"name": "value"}'"""
            what = field.description or "a settings section"
            shown = _shown(os.environ[name])
            lines.append(
                f"environment variable {name} = {shown}: not JSON, and {'.'.join(loc)} is {what}; give JSON"
                f" such as {example}" + ("" if kind == "list" else f", or set one key as {name}__<KEY>")
            )
    return lines or [f"environment: {message}; check the {ENV_PREFIX}... variables"]


def _json_kind(annotation: Any) -> str | None:
    """list, mapping or None: how pydantic-settings reads an environment value for this annotation."""
    members = typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, types.UnionType) else ()
    for member in members or (annotation,):
        origin = typing.get_origin(member) or member
        if origin is list:
            return "list"
        if origin is dict or (isinstance(origin, type) and issubclass(origin, BaseModel)):
            return "mapping"
    return None


def _field_at(loc: tuple[Any, ...]):
    model: Any = Settings
    field = None
    for part in loc:
        fields = getattr(model, "model_fields", None)
        if not fields or part not in fields:
            return None
        field = fields[part]
        model = field.annotation
    return field


def _expected(loc: tuple[Any, ...]) -> str:
    field = _field_at(loc)
    return (field.description or "") if field else ""


def _did_you_mean(loc: tuple[Any, ...]) -> str:
    parent = _field_at(loc[:-1]) if len(loc) > 1 else None
    model = parent.annotation if parent else Settings
    names = list(getattr(model, "model_fields", {}))
    close = difflib.get_close_matches(str(loc[-1]), names, n=1)
    return f" (did you mean {close[0]}?)" if close else ""
