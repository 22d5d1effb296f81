"""The habits a command-line tool is expected to have, kept out of the command modules:
`--version`/`-V`, `-h`, help for a bare `gpudiag`, refusing options that cannot apply, and a stdout that cannot
encode the checklist's symbols.

Nothing here may import more than gpudiag/cli/app.py already does: `gpudiag check` is timed against `nvidia-smi -q`.
"""

from __future__ import annotations

import codecs
import sys
from typing import Optional

import typer

from gpudiag.exitcodes import ExitCode

try:  # as in gpudiag/cli/app.py: typer 0.2x ships its own copy of click
    from typer._click.exceptions import UsageError
    from typer._click.globals import get_current_context
except ImportError:  # pragma: no cover - depends on the installed typer
    from click import UsageError, get_current_context

# `-h` as well as `--help`, on every command (click hands context settings down to subcommands).
CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}


def show_version(value: bool) -> None:
    """`gpudiag --version` / `-V`: the version on stdout, exit 0 (eager: before any other option is looked at)."""
    if value:
        from gpudiag import __version__

        print(f"gpudiag {__version__}")
        raise typer.Exit(ExitCode.OK)


VersionOption = typer.Option(False, "--version", "-V", is_eager=True, callback=show_version,
                             help="Print gpudiag's version and exit.")


def help_when_bare(ctx: typer.Context) -> None:
    """`gpudiag` alone asked for nothing wrong, only for nothing: the help goes to stdout and the exit is 0 (as
    `git` without arguments shows its usage; a usage *error* is exit 2 on stderr)."""
    if ctx.invoked_subcommand is None and not ctx.resilient_parsing:
        print(ctx.get_help())
        raise typer.Exit(ExitCode.OK)


def nothing_probed(snapshot) -> bool:
    """No usable GPU library and no GPU on the PCI bus: exit 3's condition."""
    from gpudiag.report.verdict import nothing_probed as probed_nothing  # the service judges with it too

    return probed_nothing(snapshot)


def nothing_probed_exit() -> typer.Exit:
    """Exit 3 says why, on one line (the output, if any, is written all the same: it shows what was tried)."""
    print("gpudiag: error: nothing could be probed: no usable GPU library and no GPU on the PCI bus", file=sys.stderr)
    return typer.Exit(ExitCode.NOTHING_PROBED)


# -- options a mode ignores ---------------------------------------------------------------------------------------

# What --replay judges is a recording: these read the live node and would be silently ignored.
LIVE_ONLY = {"root": "--root", "kernel_log": "--kernel-log", "timeout": "--timeout"}


def _given(name: str) -> bool:
    """True when the user typed the option (or set it through the environment), not when it has its default."""
    ctx = get_current_context(silent=True)
    if ctx is None:
        return False
    source = ctx.get_parameter_source(name)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def refuse_ignored_options(replay: object, as_json: bool = False, fmt: Optional[str] = None) -> None:
    """A usage error (exit 2, one line) for options that would be silently ignored: those that read the live node
    next to --replay, and `--json` next to another `--format`."""
    given = [flag for name, flag in LIVE_ONLY.items() if _given(name)] if replay is not None else []
    if given:
        one = len(given) == 1
        raise UsageError(f"{', '.join(given)} {'reads' if one else 'read'} the live node and --replay judges a "
                               f"recording: drop {'it' if one else 'them'}")
    if as_json and fmt is not None and fmt != "json" and _given("fmt"):
        raise UsageError(f"--json is short for --format json; it cannot be combined with --format {fmt}")


def refuse_stress_without_load_tests(level: int) -> None:
    """`--stress-seconds` sets how long the stress of `--level 2|3` runs: at level 1 nothing would read it."""
    if level < 2 and _given("stress_seconds"):
        raise UsageError("--stress-seconds sets the stress of --level 2|3 and --level 1 runs no load test: "
                         "add --level 2 or drop it")


# -- a stdout that cannot encode the checklist --------------------------------------------------------------------

# The checklist's typography and its plain stand-ins, for a terminal or pipe that is ASCII-only
# (PYTHONIOENCODING=ascii, LANG=C on Python < 3.7's rules, a serial console).
ASCII_STANDINS = {"·": "-", "—": "-", "–": "-", "→": "->", "←": "<-", "…": "...", "×": "x", "≥": ">=", "≤": "<=",
                  "│": "|", "▼": "v", "►": ">", "°": " deg", "µ": "u", "\u00a0": " "}
_ERROR_HANDLER = "gpudiag-ascii"


def _standin(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeEncodeError):
        raise error
    text = error.object[error.start:error.end]
    return "".join(ASCII_STANDINS.get(ch, "?") for ch in text), error.end


def degrade_unencodable_streams() -> None:
    """Where stdout or stderr cannot encode the checklist's symbols, write ASCII stand-ins instead of crashing with
    UnicodeEncodeError (exit 4): `·` becomes `-`, `→` becomes `->`, anything else unencodable `?`."""
    try:
        codecs.lookup_error(_ERROR_HANDLER)
    except LookupError:
        codecs.register_error(_ERROR_HANDLER, _standin)
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None)
        if not encoding or not hasattr(stream, "reconfigure"):
            continue
        try:
            "·—→…".encode(encoding)
        except UnicodeEncodeError:
            stream.reconfigure(errors=_ERROR_HANDLER)
        except LookupError:  # an encoding Python does not know: leave the stream as it is
            continue
