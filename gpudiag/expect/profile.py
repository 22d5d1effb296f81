"""Node profiles: what a node must be, as a TOML file of Expectations settings, plus `-p KEY=VALUE` overrides.

A profile is flat: each key is an Expectations field (gpudiag/expect/__init__.py says what each means) or a field
of a family's own settings (gpudiag/expect/<family>_settings.py), typed as the field is; `name` and `description`
are free text. Nothing else is allowed, so a typo is an error, not a setting silently ignored. `--profile` takes the
name of a profile shipped in gpudiag/profiles/ ("h200-8x"), or a file: a path with a slash or a .toml suffix ("./site",
"site.toml"), read as gpudiag.fileio reads any input (a regular file, at most CONFIG_MAX_BYTES, UTF-8, nested no deeper
than MAX_NESTING).

Every problem becomes a ProfileError whose message is one line naming the file (or `-p`), the key and the problem.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Optional

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser as a package (pyproject: tomli; python_version < 3.11)
    import tomli as tomllib  # type: ignore[no-redef]

from gpudiag.expect import DEFAULT_EXPECTATIONS, FAMILY_SETTINGS, ExpectationError, Expectations, with_settings
from gpudiag.fileio import CONFIG_MAX_BYTES, DocumentError, parse_bounded, read_text
from gpudiag.model.vocabulary import AMDGPU_EVENT_KINDS, MODULES_OF_INTEREST

METADATA_KEYS = ("name", "description")
# `--baseline FILE` sets the baseline; family_settings holds the families' keys, each settable by its own name.
NOT_SETTABLE = ("baseline", "family_settings")
# Accepted for kernel_log_window_seconds: judge every event since boot.
SINCE_BOOT = "boot"
_NONE_WORDS = ("none", "null")
_BOOL_WORDS = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}


class ProfileError(ValueError):
    """A profile or override that cannot be used; str() is one line naming where, the key and the problem."""


def settings() -> dict[str, Any]:
    """Settable key → its type hint: the fields of Expectations, then those of every family's SETTINGS."""
    known = {}
    for kind in (Expectations, *FAMILY_SETTINGS):
        hints = typing.get_type_hints(kind)
        known.update({f.name: hints[f.name] for f in dataclasses.fields(kind) if f.name not in NOT_SETTABLE})
    return known


def shipped_profiles() -> list[str]:
    return sorted(entry.name[:-5] for entry in resources.files("gpudiag.profiles").iterdir()
                  if entry.name.endswith(".toml"))


# -- types ------------------------------------------------------------------------------------------------------


def _shape(hint: Any) -> tuple[Any, bool, Optional[Any]]:
    """(base type, optional, item type for tuples)."""
    optional = False
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        (hint,) = [a for a in typing.get_args(hint) if a is not type(None)]
        optional = True
    if typing.get_origin(hint) is tuple:
        return tuple, optional, typing.get_args(hint)[0]
    return hint, optional, None


_TYPE_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def _type_name(hint: Any) -> str:
    base, _, item = _shape(hint)
    return f"a list of {item.__name__}s" if base is tuple else _TYPE_NAMES[base]


def _is(value: Any, base: Any) -> bool:
    if base is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if base is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, base)


def _finite(key: str, value: Any) -> Any:
    """A number to judge by: nan compares false with every threshold and inf passes or fails everything (a nan
    window hid an Xid 48: issue 33, item 6), so neither is taken, from a profile or from -p."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ExpectationError(key, f"{value} is not a finite number")
    return value


def _from_toml(key: str, hint: Any, value: Any) -> Any:
    if key == "kernel_log_window_seconds" and value == SINCE_BOOT:
        return None
    base, _, item = _shape(hint)
    if base is tuple and isinstance(value, list) and all(_is(v, item) for v in value):
        return tuple(_finite(key, v) for v in value)
    if base is not tuple and _is(value, base):
        return _finite(key, float(value)) if base is float else value
    raise ExpectationError(key, f"expected {_type_name(hint)}, got {type(value).__name__} {value!r}")


def _parse_word(key: str, base: Any, text: str) -> Any:
    try:
        if base is bool:
            return _BOOL_WORDS[text.lower()]
        value = base(text)
    except (KeyError, ValueError):
        raise ExpectationError(key, f"{text!r} is not {_type_name(base)}") from None
    return _finite(key, value)


def _from_text(key: str, hint: Any, text: str) -> Any:
    text = text.strip()
    base, optional, item = _shape(hint)
    if key == "kernel_log_window_seconds" and text == SINCE_BOOT:
        return None
    if optional and text.lower() in _NONE_WORDS:
        return None
    if base is tuple:
        return tuple(_parse_word(key, item, part.strip()) for part in text.split(",") if part.strip())
    return _parse_word(key, base, text)


# -- keys -------------------------------------------------------------------------------------------------------


def _unknown_key(key: str, known: Iterable[str]) -> ExpectationError:
    close = difflib.get_close_matches(key, list(known), n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(close)}?" if close else "the settings are the fields of gpudiag/expect/ " \
                                                             "(docs/reference/checks.md names them)"
    return ExpectationError(key, f"unknown setting; {hint}")


def _check_vocabulary(values: dict[str, Any]) -> None:
    """Names that only mean something to another layer: amdgpu event kinds, the kernel modules the probe reads."""
    for key in ("amdgpu_fail_kinds", "amdgpu_warn_kinds", "amdgpu_ignore_kinds"):
        for kind in values.get(key, ()):
            if kind not in AMDGPU_EVENT_KINDS:
                raise ExpectationError(key, f"{kind!r} is not an amdgpu event kind ({', '.join(AMDGPU_EVENT_KINDS)})")
    for module in values.get("required_kernel_modules", ()):
        if module not in MODULES_OF_INTEREST:
            raise ExpectationError("required_kernel_modules", f"gpudiag does not probe module {module!r} (it reads "
                                                              f"{', '.join(MODULES_OF_INTEREST)})")
    for key in ("xid_fail_codes", "xid_warn_codes", "xid_ignore_codes"):
        for code in values.get(key, ()):
            if code <= 0:
                raise ExpectationError(key, f"{code} is not an Xid code")


def values_from_toml(data: dict[str, Any]) -> dict[str, Any]:
    known = settings()
    values = {}
    for key, value in data.items():
        if key in METADATA_KEYS:
            if not isinstance(value, str):
                raise ExpectationError(key, f"expected a string, got {type(value).__name__}")
            continue
        if isinstance(value, dict):
            raise ExpectationError(key, "is a table; profile settings are flat keys (no [sections])")
        if key not in known:
            raise _unknown_key(key, known)
        values[key] = _from_toml(key, known[key], value)
    _check_vocabulary(values)
    return values


def values_from_params(params: Iterable[str]) -> dict[str, Any]:
    known = settings()
    values = {}
    for param in params:
        key, sep, text = param.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ProfileError(f"-p {param}: expected KEY=VALUE")
        try:
            if key not in known:
                raise _unknown_key(key, known)
            values[key] = _from_text(key, known[key], text)
            _check_vocabulary({key: values[key]})
        except ExpectationError as exc:
            raise ProfileError(f"-p {exc.key}: {exc.problem}") from None
    return values


# -- loading ----------------------------------------------------------------------------------------------------


def is_profile_path(ref: str) -> bool:
    """A path has a slash or ends in .toml; anything else names a shipped profile. Never both: a file `h200-8x` in
    the current directory must not silently replace the shipped h200-8x (write `./h200-8x` to mean the file)."""
    return "/" in ref or ref.endswith(".toml")


def read_profile(ref: str) -> tuple[str, str]:
    """(where, TOML text) of a profile file or a shipped profile's name."""
    shipped = shipped_profiles()
    if not is_profile_path(ref):
        if ref in shipped:
            return f"{ref} (shipped)", resources.files("gpudiag.profiles").joinpath(f"{ref}.toml").read_text("utf-8")
        raise ProfileError(f"profile {ref}: not a shipped profile ({', '.join(shipped)}); a profile file is named "
                           f"by a path with a slash or a .toml suffix (./{ref})")
    try:
        return ref, read_text(ref, CONFIG_MAX_BYTES)
    except DocumentError as exc:
        if not Path(ref).exists() and not Path(ref).is_symlink():
            raise ProfileError(f"profile {ref}: no such file, and not a shipped profile ({', '.join(shipped)})") \
                from None
        raise ProfileError(f"profile {ref}: {exc}") from None


def _build(values: dict[str, Any]) -> Expectations:
    return with_settings(DEFAULT_EXPECTATIONS, **values)


def load_profile(ref: str) -> dict[str, Any]:
    """The settings of a profile, validated on their own (so that an error names the profile, not an override)."""
    where, text = read_profile(ref)
    try:
        data = parse_bounded(tomllib.loads, text)
    except DocumentError as exc:
        raise ProfileError(f"profile {where}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"profile {where}: TOML syntax error: {exc}") from None
    try:
        values = values_from_toml(data)
        _build(values)
    except ExpectationError as exc:
        raise ProfileError(f"profile {where}: {exc.key}: {exc.problem}") from None
    return values


def load_expectations(profile: Optional[str] = None, params: Iterable[str] = ()) -> Expectations:
    """The defaults, then the profile's settings, then the `-p` overrides."""
    values = load_profile(profile) if profile else {}
    overrides = values_from_params(params)
    try:
        return _build({**values, **overrides})
    except ExpectationError as exc:
        where = f"-p {exc.key}" if exc.key in overrides else f"-p (with {exc.key} from the profile or the default)"
        raise ProfileError(f"{where}: {exc.problem}") from None
