"""Typed, validated configuration: dataclasses built from TOML/YAML/JSON files and CLI overrides.

The machinery here is generic: any (possibly nested) dataclass can be validated from a plain mapping with
:func:`build`, loaded from a file with :func:`load_config`, overridden from the command line with
``section.key=value`` strings (:func:`parse_overrides`) and written back, fully resolved, next to the
outputs it produced (:func:`save_config`). Every problem raises :class:`~securefgl.errors.ConfigError`
naming the dotted key, the bad value and the valid choices; unknown keys are rejected, never ignored.

Supported field types: ``bool``, ``int`` (never a bool or a float), ``float`` (an int is accepted),
``str``, :class:`pathlib.Path`, ``Literal[...]``, ``X | None``, unions of the above, ``tuple[X, ...]``,
fixed-length ``tuple[X, Y]``, ``list[X]``, ``dict[str, X]`` (``dict[str, Any]`` keeps values as given),
``Any`` and nested dataclasses. TOML has no null: optional fields must default to ``None`` so that a
resolved config round-trips (``None`` values are left out of the TOML file); the strings ``"none"`` and
``"null"`` are read as ``None`` for optional fields.

The sections themselves live next to this module: :mod:`securefgl.config.data` (dataset and partition),
:mod:`securefgl.config.train` (optimisation) and :mod:`securefgl.config.run` (a whole run). This module
imports nothing of securefgl but :mod:`securefgl.errors`, so every layer may build its own option
dataclasses with it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import tomllib
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, Union

from securefgl.errors import ConfigError

__all__ = [
    "build",
    "to_dict",
    "replace",
    "load_mapping",
    "load_config",
    "parse_overrides",
    "merge",
    "dumps_toml",
    "save_config",
]

T = TypeVar("T")
_NONE_STRINGS = ("none", "null")


def _key(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _describe(tp: Any) -> str:
    """A short human-readable name of a type annotation, for error messages."""
    origin = typing.get_origin(tp)
    if tp is type(None):
        return "none"
    if tp is Any:
        return "any value"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(tp))
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return f"a list of {_describe(args[0])}"
        return f"a list of {len(args)} values ({', '.join(_describe(a) for a in args)})"
    if origin is list:
        return f"a list of {_describe(typing.get_args(tp)[0])}"
    if origin is dict:
        return "a table (mapping)"
    if dataclasses.is_dataclass(tp):
        return f"a table with keys {', '.join(f.name for f in dataclasses.fields(tp))}"
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Validate (and lightly convert) ``value`` against annotation ``tp``; raise ConfigError naming ``key``."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if tp is type(None):
        if value is None or (isinstance(value, str) and value.lower() in _NONE_STRINGS):
            return None
        raise ConfigError(f"{key}: expected none, got {value!r}")
    if origin is Literal:
        choices = typing.get_args(tp)
        if value in choices and type(value) in {type(c) for c in choices}:
            return value
        raise ConfigError(
            f"{key}: invalid value {value!r}; valid choices: {', '.join(repr(c) for c in choices)}"
        )
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if type(None) in args and (
            value is None or (isinstance(value, str) and value.lower() in _NONE_STRINGS and str not in args)
        ):
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key)
            except ConfigError:
                continue
        raise ConfigError(f"{key}: invalid value {value!r}; expected {_describe(tp)}")
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected a boolean (true or false), got {value!r}")
    if tp is int:
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return int(value)
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            out = float(value)
            if math.isnan(out):
                raise ConfigError(f"{key}: expected a number, got NaN")
            return out
        raise ConfigError(f"{key}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{key}: expected a string, got {value!r}")
    if tp is Path:
        if isinstance(value, str | Path):
            return Path(value)
        raise ConfigError(f"{key}: expected a path string, got {value!r}")
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{key}: expected {_describe(tp)}, got {value!r}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(v, args[0], f"{key}[{i}]") for i, v in enumerate(value))
        if len(value) != len(args):
            raise ConfigError(f"{key}: expected {_describe(tp)}, got {len(value)} values: {value!r}")
        return tuple(_coerce(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args, strict=True)))
    if origin is list:
        (arg,) = typing.get_args(tp)
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{key}: expected {_describe(tp)}, got {value!r}")
        return [_coerce(v, arg, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        kt, vt = typing.get_args(tp)
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a table (mapping), got {value!r}")
        out = {}
        for k, v in value.items():
            if kt is str and not isinstance(k, str):
                raise ConfigError(f"{key}: keys must be strings, got {k!r}")
            out[k] = v if vt is Any else _coerce(v, vt, _key(key, str(k)))
        return out
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if isinstance(value, tp):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected {_describe(tp)}, got {value!r}")
        return build(tp, value, where=key)
    if isinstance(tp, type):
        if isinstance(value, tp):
            return value
        raise ConfigError(f"{key}: expected {_describe(tp)}, got {value!r}")
    raise ConfigError(f"{key}: unsupported annotation {tp!r} in the config schema")


def build(cls: type[T], mapping: Mapping[str, Any] | None = None, *, where: str = "") -> T:
    """Validate a (nested) dataclass from a plain mapping.

    Args:
        cls: The dataclass type to build.
        mapping: Keys are field names; values are validated against the field annotations. Missing keys take
            the field defaults. (default: ``None``, all defaults)
        where: Dotted prefix used in error messages, e.g. ``"partition.params"``. (default: ``""``)

    Returns:
        An instance of ``cls``. Its ``__post_init__`` runs, so class-level checks apply as well.

    Raises:
        ConfigError: An unknown key (the message lists the valid keys), a value of the wrong type or outside
            its ``Literal`` choices, or a missing required key.
    """
    if not (dataclasses.is_dataclass(cls) and isinstance(cls, type)):
        raise TypeError(f"build() needs a dataclass type, got {cls!r}")
    mapping = {} if mapping is None else mapping
    if not isinstance(mapping, Mapping):
        raise ConfigError(f"{where or cls.__name__}: expected a table (mapping), got {mapping!r}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = [k for k in mapping if k not in fields]
    if unknown:
        raise ConfigError(
            f"unknown key {_key(where, str(unknown[0]))!r}; valid keys"
            f"{' in ' + repr(where) if where else ''}: {', '.join(fields)}"
        )
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for name, f in fields.items():
        if name in mapping:
            kwargs[name] = _coerce(mapping[name], hints[name], _key(where, name))
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"missing required key {_key(where, name)!r} ({_describe(hints[name])})")
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        head = str(exc).split(":")[0]
        if where and where.split(".")[-1].split(" ")[0] not in head:
            raise ConfigError(f"{where}: {exc}") from exc
        raise


def to_dict(obj: Any) -> Any:
    """Convert a (nested) config dataclass to plain Python values (tuples become lists, paths strings)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): to_dict(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_dict(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


def merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge two mappings: tables merge recursively, any other value in ``override`` wins."""
    out = dict(base)
    for k, v in override.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = merge(out[k], v)
        else:
            out[k] = v
    return out


def replace(obj: T, overrides: Mapping[str, Any] | Sequence[str] | None = None, **changes: Any) -> T:
    """A re-validated copy of a config dataclass with (nested) values changed.

    Args:
        obj: The config instance.
        overrides: A nested mapping, or ``key.sub=value`` strings as accepted by :func:`parse_overrides`.
        **changes: Top-level field changes.
    """
    values = to_dict(obj)
    if overrides:
        if isinstance(overrides, Mapping):
            values = merge(values, overrides)
        else:
            values = merge(values, parse_overrides(overrides))
    values = merge(values, changes)
    return build(type(obj), values)


def load_mapping(path: str | Path) -> dict[str, Any]:
    """Read a TOML (``.toml``), YAML (``.yaml``/``.yml``, needs PyYAML) or JSON (``.json``) file into a dict.

    Raises:
        ConfigError: Missing file, unknown suffix, a syntax error, or YAML without PyYAML installed.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    suffix = path.suffix.lower()
    text = path.read_text(encoding="utf-8")
    try:
        if suffix == ".toml":
            data = tomllib.loads(text)
        elif suffix == ".json":
            data = json.loads(text)
        elif suffix in (".yaml", ".yml"):
            try:
                import yaml  # type: ignore[import-untyped]
            except ImportError as exc:
                raise ConfigError(
                    f"config file {str(path)!r} is YAML but PyYAML is not installed; use TOML or `pip install pyyaml`"
                ) from exc
            data = yaml.safe_load(text) or {}
        else:
            raise ConfigError(
                f"config file {str(path)!r}: unknown format {suffix!r}; valid: .toml, .yaml, .yml, .json"
            )
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"config file {str(path)!r} is not valid {suffix[1:].upper()}: {exc}") from exc
    except ConfigError:
        raise
    except Exception as exc:  # yaml.YAMLError without importing yaml at module level
        raise ConfigError(f"config file {str(path)!r} could not be parsed: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(path)!r} must contain a table at top level")
    return data


def _parse_value(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        low = text.strip().lower()
        if low in ("true", "false"):
            return low == "true"
        return text


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """Turn ``["partition.clients=20", "dataset.name=Cora"]`` into a nested mapping.

    Values are parsed as TOML literals (``20`` is an int, ``0.5`` a float, ``[0.2, 0.4, 0.4]`` a list, ``true``
    a bool); anything that is not a TOML literal stays a string (``Cora``).

    Raises:
        ConfigError: An item without ``=`` or with an empty key.
    """
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key.sub=value")
        key, _, raw = item.partition("=")
        parts = [p.strip() for p in key.strip().split(".")]
        if not all(parts):
            raise ConfigError(f"override {item!r} has an empty key")
        node = out
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r} conflicts with an earlier override of {p!r}")
        node[parts[-1]] = _parse_value(raw.strip())
    return out


def load_config(
    cls: type[T],
    path: str | Path | None = None,
    overrides: Mapping[str, Any] | Sequence[str] | None = None,
    *,
    section: str | None = None,
) -> T:
    """Load a config dataclass from a file (optional), apply overrides, validate.

    Args:
        cls: The dataclass type.
        path: TOML/YAML/JSON file; ``None`` starts from the defaults.
        overrides: A nested mapping or ``key.sub=value`` strings; they win over the file.
        section: Read only this top-level table of the file (e.g. ``"partition"``); a missing section means
            defaults.

    Raises:
        ConfigError: See :func:`build` and :func:`load_mapping`.
    """
    values: dict[str, Any] = load_mapping(path) if path is not None else {}
    if section is not None:
        sub = values.get(section, {})
        if not isinstance(sub, Mapping):
            raise ConfigError(f"{section}: expected a table, got {sub!r}")
        values = dict(sub)
    if overrides:
        values = merge(values, overrides if isinstance(overrides, Mapping) else parse_overrides(overrides))
    return build(cls, values, where=section or "")


def _toml_scalar(value: Any, key: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        v = float(value)
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        if math.isnan(v):
            return "nan"
        return repr(v)
    if isinstance(value, str | Path):
        return json.dumps(str(value), ensure_ascii=False)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_scalar(v, key) for v in value if v is not None) + "]"
    if isinstance(value, Mapping):
        inner = ", ".join(
            f"{_toml_key(k)} = {_toml_scalar(v, key)}" for k, v in value.items() if v is not None
        )
        return "{" + inner + "}" if inner else "{}"
    raise ConfigError(f"{key}: value {value!r} of type {type(value).__name__} cannot be written to TOML")


def _toml_key(key: Any) -> str:
    key = str(key)
    if key and all(c.isalnum() or c in "-_" for c in key):
        return key
    return json.dumps(key)


def dumps_toml(mapping: Mapping[str, Any]) -> str:
    """Serialise a nested mapping of plain values as TOML (``None`` values are left out).

    Nested mappings become ``[tables]``; lists of scalars and inline tables inside lists are supported.
    """
    lines: list[str] = []

    def emit(table: Mapping[str, Any], prefix: str) -> None:
        scalars = [(k, v) for k, v in table.items() if not isinstance(v, Mapping) and v is not None]
        tables = [(k, v) for k, v in table.items() if isinstance(v, Mapping)]
        if prefix and (scalars or not tables):
            lines.append(f"[{prefix}]")
        for k, v in scalars:
            lines.append(f"{_toml_key(k)} = {_toml_scalar(v, _key(prefix, str(k)))}")
        if prefix and (scalars or not tables):
            lines.append("")
        for k, v in tables:
            emit(v, _key(prefix, _toml_key(k)))

    top_scalars = {k: v for k, v in mapping.items() if not isinstance(v, Mapping)}
    if top_scalars:
        emit(top_scalars, "")
        lines.append("")
    emit({k: v for k, v in mapping.items() if isinstance(v, Mapping)}, "")
    return "\n".join(lines).rstrip() + "\n"


def save_config(
    config: Any, path: str | Path, *, fmt: Literal["toml", "json"] | None = None, name: str = "config"
) -> Path:
    """Write a resolved config next to the outputs it produced.

    Args:
        config: A config dataclass, or a mapping of section name -> dataclass/mapping.
        path: A file path (format from its suffix) or an existing directory (``<dir>/<name>.<fmt>``).
        fmt: ``"toml"`` or ``"json"``; defaults to the suffix of ``path`` or TOML.
        name: File stem used when ``path`` is a directory. (default: ``"config"``)

    Returns:
        The path written.
    """
    path = Path(path)
    if path.is_dir():
        path = path / f"{name}.{fmt or 'toml'}"
    if fmt is None:
        fmt = "json" if path.suffix.lower() == ".json" else "toml"
    if fmt not in ("toml", "json"):
        raise ConfigError(f"config format {fmt!r} is not valid; valid choices: 'toml', 'json'")
    values = to_dict(config)
    if not isinstance(values, dict):
        raise ConfigError(f"save_config needs a dataclass or a mapping, got {type(config).__name__}")
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(values, indent=2, sort_keys=False) + "\n" if fmt == "json" else dumps_toml(values)
    path.write_text(text, encoding="utf-8")
    return path
