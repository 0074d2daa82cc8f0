"""Loading settings: settings.yaml under environment overrides, paths made absolute, errors one line per field."""

from __future__ import annotations

import difflib
import json
import os
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_settings import BaseSettings, InitSettingsSource, PydanticBaseSettingsSource
from pydantic_settings import SettingsError as SourceError

from ..contract import QUERY_MODULE, operator_name
from .folders import overlapping_folders
from .model import Settings
from .section import ENV_PREFIX, SettingsError
from .sources import SourceSettings
from .spark import masked_url
from .yaml_file import read_yaml_mapping

DEFAULT_SETTINGS_FILE = Path("settings.yaml")
# A bad value longer than this is shown cut, so that an error stays one readable line.
SHOWN_VALUE_CHARS = 120


def load_settings(path: Path | str = DEFAULT_SETTINGS_FILE, **overrides: Any) -> Settings:
    """Read, merge and validate the settings, with relative paths made absolute against the file."""
    path = Path(path)
    data = read_yaml_mapping(path)
    misplaced = _operator_set_outside_code(data, path)
    if misplaced:  # validated with another operator, the rest would only list its consequences
        raise SettingsError(misplaced + _unknown_environment_names())
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

    unknown = _unknown_environment_names()
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
    overlaps = overlapping_folders(resolved)
    if overlaps:
        raise SettingsError(overlaps)
    return resolved


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
    text = repr(masked_url(value) if isinstance(value, str) else value)  # a bad spark.remote's token stays hidden
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
