"""Reading a configuration: TOML files, ``section.key=value`` overrides, saved dictionaries, and the field list
of ``--help-config``. An unknown key or a value of the wrong type is a ValueError naming it."""

from __future__ import annotations

import ast
import dataclasses
import math
import sys
import typing
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from ace_hybrid.config.root import Config

__all__ = ["ADDED", "RENAMED", "config_from_dict", "describe_fields", "load_config", "parse_override", "read_toml",
           "renamed_keys", "without_added_defaults"]

RENAMED = {"replay.llm_capacity": "replay.validated_capacity"}
"""Configuration keys that were renamed, old -> new. A file or an override with an old key is refused with a ValueError
naming the new one; a configuration saved under an old key (a checkpoint's) is read under the new one."""

ADDED = {"env.start_spread": 0, "sac.max_alpha": math.inf, "sac.critic_layer_norm": False, "env.deploy_shortlist": 0,
         "env.deploy_among": 0, "ace.do_nothing_first": False, "env.data": "",
         "train.init_policy": "", "train.tutor_data": "", "ace.exam": "", "ace.exam_size": 160,
         "ace.label_candidates": False, "sac.anchor_weight": 0.0, "train.eval_at_start": False,
         "env.deploy_sure": 0.0, "env.mask_no_ops": False, "sac.policy_average": 0.0,
         "env.deploy_threshold": 0.0}
"""Configuration keys added after runs were saved, with the value that does what was done before them. At that value
:func:`without_added_defaults` leaves them out, so that runs and experiment cells saved before them stay valid."""


def _coerce(value: Any, annotation: Any, name: str) -> Any:
    """``value`` as the field's declared type, or ValueError naming the key."""
    origin = typing.get_origin(annotation)
    if annotation is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
            return value.lower() in ("true", "1")
    elif annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str):
            try:
                return int(value.replace("_", ""))
            except ValueError:
                pass
    elif annotation is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
    elif annotation is str:
        if isinstance(value, str):
            return value
    elif origin in (list, tuple):
        if isinstance(value, str):
            try:
                value = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                raise ValueError(f"{name} = {value!r} is not a list literal") from None
        if isinstance(value, (list, tuple)):
            args = typing.get_args(annotation)
            inner = args[0] if args else Any
            items = [v if inner is Any or typing.get_origin(inner) is not None else _coerce(v, inner, name)
                     for v in value]
            return tuple(items) if origin is tuple else items
    raise ValueError(f"{name} = {value!r} is not a valid {getattr(annotation, '__name__', annotation)}")


def _apply(obj: Any, values: dict[str, Any], prefix: str) -> None:
    hints = typing.get_type_hints(type(obj))
    names = {f.name for f in dataclasses.fields(obj)}
    for key, value in values.items():
        full = f"{prefix}{key}"
        if key not in names:
            if full in RENAMED:
                raise ValueError(f"configuration key {full!r} was renamed: use {RENAMED[full]!r}")
            raise ValueError(f"unknown configuration key {full!r}; valid keys here: {', '.join(sorted(names))}")
        current = getattr(obj, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise ValueError(f"{full} is a section: give a table, not {value!r}")
            _apply(current, value, f"{full}.")
        else:
            setattr(obj, key, _coerce(value, hints[key], full))


def parse_override(text: str) -> dict[str, Any]:
    """``"sac.lr_actor=1e-4"`` -> ``{"sac": {"lr_actor": "1e-4"}}`` (values are coerced by field type later)."""
    if "=" not in text:
        raise ValueError(f"override {text!r} must look like section.key=value")
    key, value = text.split("=", 1)
    out: dict[str, Any] = {}
    node = out
    parts = key.strip().split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value.strip()
    return out


def read_toml(path: str | Path, what: str) -> dict[str, Any]:
    """The tables of a TOML file; FileNotFoundError or ValueError naming the file (``what`` says what it is)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{what} {p} does not exist")
    with p.open("rb") as f:
        try:
            return tomllib.load(f)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{p}: {exc}") from None


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """The defaults, then the TOML file, then each ``key=value`` override; validated."""
    cfg = Config()
    if path is not None:
        _apply(cfg, read_toml(path, "configuration file"), "")
    for text in overrides or []:
        _apply(cfg, parse_override(text), "")
    return cfg.validate()


def config_from_dict(data: dict[str, Any]) -> Config:
    """Rebuild a :class:`Config` saved with :meth:`Config.to_dict` (checkpoints); keys saved under an old name
    (:data:`RENAMED`) are read under the new one."""
    cfg = Config()
    _apply(cfg, renamed_keys(data), "")
    return cfg.validate()


def _sections_copy(data: dict[str, Any]) -> dict[str, Any]:
    """A copy of a configuration dictionary deep enough to edit its sections' keys."""
    return {section: dict(values) if isinstance(values, dict) else values for section, values in data.items()}


def renamed_keys(data: dict[str, Any], *, first_names: bool = False) -> dict[str, Any]:
    """A copy of a configuration dictionary (:meth:`Config.to_dict`) with the keys of :data:`RENAMED` under their new
    names, or with ``first_names`` under their old ones (what a fingerprint hashes, so that a rename leaves finished
    experiment cells valid)."""
    pairs = [(new, old) for old, new in RENAMED.items()] if first_names else list(RENAMED.items())
    out = _sections_copy(data)
    for before, after in pairs:
        (b_section, b_key), (a_section, a_key) = before.split("."), after.split(".")
        values = out.get(b_section)
        if isinstance(values, dict) and b_key in values:
            out.setdefault(a_section, {}).setdefault(a_key, values.pop(b_key))
    return out


def without_added_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """A copy of a configuration dictionary without the keys of :data:`ADDED` that hold their default."""
    out = _sections_copy(data)
    for name, default in ADDED.items():
        section, key = name.split(".")
        values = out.get(section)
        if isinstance(values, dict) and values.get(key, default) == default:
            values.pop(key, None)
    return out


def describe_fields(obj: Any = None, prefix: str = "") -> list[str]:
    """``key = default  # doc`` lines for every field (``ace-hybrid train --help-config``)."""
    import inspect

    obj = Config() if obj is None else obj
    try:
        source = inspect.getsource(type(obj))
    except (OSError, TypeError):
        source = ""
    lines: list[str] = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            lines.append(f"[{prefix}{f.name}]")
            lines += describe_fields(value, f"{prefix}{f.name}.")
            continue
        doc = _field_doc(source, f.name)
        lines.append(f"  {prefix}{f.name} = {value!r}" + (f"  # {doc}" if doc else ""))
    return lines


def _field_doc(source: str, name: str) -> str:
    """The string literal right after ``name: ... = ...`` in a class body."""
    lines = source.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith(f"{name}:") and i + 1 < len(lines):
            nxt = lines[i + 1].strip()
            if nxt.startswith('"""'):
                doc = nxt.strip('"')
                j = i + 2
                while not nxt.endswith('"""') or nxt == '"""':
                    if j >= len(lines):
                        break
                    nxt = lines[j].strip()
                    doc += " " + nxt.strip('"')
                    j += 1
                return " ".join(doc.split())
    return ""
