"""The `gpudiag` command: the typer app, its commands in their --help order, and the entry point that turns every
ending into an exit code (gpudiag/exitcodes.py's ExitCode, part of the contract: docs/architecture.md).

The command modules (gpudiag/cli/check/command.py …) define plain functions and never import this module: it registers
them, in the order of COMMANDS, so that --help lists them in that order whatever is imported first."""

from __future__ import annotations

import logging
import os
import sys
from typing import Optional

import typer

from gpudiag.cli.baseline import baseline
from gpudiag.cli.check.command import check
from gpudiag.cli.fleet import fleet
from gpudiag.cli.history import history
from gpudiag.cli.install import install_service
from gpudiag.cli.profiles import profiles
from gpudiag.cli.root_facts import root_facts
from gpudiag.cli.screen.command import screen
from gpudiag.cli.serve.command import serve
from gpudiag.cli.shared import habits
from gpudiag.cli.shared.node_collect import error_line, exit_for_failure, start_logging
from gpudiag.cli.snapshot import snapshot
from gpudiag.cli.textfile import textfile
from gpudiag.cli.top.command import top
from gpudiag import stdout
from gpudiag.exitcodes import ExitCode

try:  # typer 0.2x ships its own copy of click; older typer uses click itself
    from typer import _click as click
except ImportError:  # pragma: no cover - depends on the installed typer
    import click

app = typer.Typer(
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings=habits.CONTEXT_SETTINGS,  # -h too
    help="GPU node health and diagnostics for AMD and NVIDIA nodes.",
)
log = logging.getLogger("gpudiag")


@app.callback(invoke_without_command=True)
def _gpudiag(ctx: typer.Context, version: bool = habits.VersionOption) -> None:
    habits.help_when_bare(ctx)  # bare `gpudiag`: the help on stdout, exit 0


def version() -> None:
    """Print gpudiag's version."""
    from gpudiag import __version__

    stdout.write(f"{__version__}\n", "the version")


# --help lists the commands in this order (pinned by tests/cli/test_habits.py).
COMMANDS = (("check", check), ("top", top), ("snapshot", snapshot), ("baseline", baseline), ("serve", serve),
            ("textfile", textfile), ("version", version), ("install-service", install_service),
            ("root-facts", root_facts), ("fleet", fleet), ("history", history), ("profiles", profiles),
            ("screen", screen))
for _name, _command in COMMANDS:
    app.command(_name)(_command)

# -- entry point ------------------------------------------------------------------------------------------------


def main(argv: Optional[list[str]] = None) -> int:
    debug = bool(os.environ.get("GPUDIAG_DEBUG"))
    habits.degrade_unencodable_streams()  # PYTHONIOENCODING=ascii: "->" for "→", not a UnicodeEncodeError
    start_logging(debug)
    try:
        # With standalone_mode=False click returns the code of a typer.Exit instead of exiting.
        code = app(args=argv, prog_name="gpudiag", standalone_mode=False) or ExitCode.OK
    except typer.Exit as exc:
        code = exc.exit_code
    except click.exceptions.UsageError as exc:
        print(f"gpudiag: error: {error_line(exc.format_message())}", file=sys.stderr)
        return ExitCode.USAGE
    except typer.Abort:
        print("gpudiag: aborted", file=sys.stderr)
        return ExitCode.ABORTED
    except Exception as exc:  # noqa: BLE001 - the contract promises exit 4, not a traceback
        return exit_for_failure(exc, debug)
    try:
        stdout.finish()  # what print() left buffered, and the close where a filesystem reports a failed write
    except Exception as exc:  # noqa: BLE001 - Unwritable: exit 4; a broken pipe: exit 0
        return exit_for_failure(exc, debug)
    return code


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
