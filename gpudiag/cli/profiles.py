"""`gpudiag profiles`: the node profiles shipped with gpudiag (gpudiag/profiles/*.toml) and what each expects, so
that `check --profile NAME` can be chosen without reading the TOML."""

from __future__ import annotations

import json
from enum import Enum

import typer

from gpudiag import stdout
from gpudiag.exitcodes import ExitCode

# What an operator picks a profile by, in this order; every setting is in --format json.
KEY_SETTINGS = ("expected_gpu_count", "expected_gpu_model", "expected_pcie_generation", "expected_pcie_width",
                "expected_links_per_gpu", "expected_power_limit_watts", "expected_ecc_enabled",
                "expected_mig_enabled", "expected_compute_partition", "expected_memory_partition")


class ProfilesFormat(str, Enum):
    text = "text"
    json = "json"


def _plain(value):
    """A setting as JSON holds it (tuples and sets as lists, anything else unknown as its text)."""
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def shipped() -> list[dict]:
    """Each shipped profile: its name, description and every setting it makes."""
    from gpudiag.expect.profile import load_profile, read_profile, shipped_profiles, tomllib

    found = []
    for name in shipped_profiles():
        _, text = read_profile(name)
        description = tomllib.loads(text).get("description", "")
        settings = {key: _plain(value) for key, value in load_profile(name).items()}
        found.append({"name": name, "description": description, "settings": settings})
    return found


def _as_param(value) -> str:
    """A value as `-p KEY=VALUE` takes it: true/false, a list comma-separated, a number or text as it is."""
    if isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, list):
        return ",".join(_as_param(v) for v in value)
    return str(value)


def render_text(found: list[dict]) -> str:
    width = max((len(p["name"]) for p in found), default=0)
    lines = []
    for profile in found:
        lines.append(f"{profile['name']:<{width}}  {profile['description']}")
        settings = profile["settings"]
        # each key and value as -p takes it, so that one can be copied to override it (issue 36, item 7)
        keys = [f"{key}={_as_param(settings[key])}" for key in KEY_SETTINGS if key in settings]
        others = len(settings) - len(keys)
        lines.append(f"{'':<{width}}  expects {', '.join(keys)}" + (f" (+{others} more)" if others else ""))
    lines.append("Use: gpudiag check --profile NAME [-p KEY=VALUE to override one setting]; every setting: "
                 "gpudiag profiles --format json.")
    return "\n".join(lines) + "\n"


def profiles(
    fmt: ProfilesFormat = typer.Option(ProfilesFormat.text, "--format", "-f", help="Output format."),
) -> None:
    """List the shipped node profiles (check --profile NAME) and what each expects: GPU, count, PCIe, links, power."""
    found = shipped()
    if fmt is ProfilesFormat.json:
        text = json.dumps({"schema_version": 1, "profiles": found}, indent=2) + "\n"
    else:
        text = render_text(found)
    stdout.write(text, "the profiles")
    raise typer.Exit(ExitCode.OK)
