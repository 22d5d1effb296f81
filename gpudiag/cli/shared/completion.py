"""Completion of option values (`gpudiag --install-completion`): shipped profile names for --profile, check IDs and
families for --only/--skip (after a comma too: `--only pcie,ecc.` offers the ecc checks). Path options complete as
files through typer's own Path type. Imports happen when the shell asks, never at a command's start."""

from __future__ import annotations


def complete_profile(incomplete: str) -> list[str]:
    """The shipped profiles whose name starts with what is typed; nothing for a path (the shell completes files)."""
    if "/" in incomplete:
        return []
    from gpudiag.expect.profile import shipped_profiles

    return [name for name in shipped_profiles() if name.startswith(incomplete)]


def complete_checks(incomplete: str) -> list[str]:
    """Families and check IDs that complete the last comma-separated name, each with what was typed before it."""
    from gpudiag.checks import CHECK_IDS, FAMILIES

    done, _, last = incomplete.rpartition(",")
    prefix = done + "," if done else ""
    already = set(done.split(",")) if done else set()
    return [prefix + name for name in (*FAMILIES, *CHECK_IDS) if name.startswith(last) and name not in already]
