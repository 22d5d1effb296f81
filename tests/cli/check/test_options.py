"""`check`'s options are declared twice: typer's (gpudiag/cli/check/command.py) and the fast path's table
(gpudiag/cli/check/fastpath.py), which answers a simple check before typer is imported. Nothing else keeps them
equal."""

from __future__ import annotations

import typer.main

from gpudiag.cli.app import app
from gpudiag.cli.check import fastpath


def _check_options() -> dict[str, bool]:
    """Every spelling of the check command's options → whether it is a flag (takes no value)."""
    command = typer.main.get_command(app).commands["check"]
    spellings = {}
    for param in command.params:
        for name in [*param.opts, *getattr(param, "secondary_opts", [])]:
            spellings[name] = bool(getattr(param, "is_flag", False))
    return spellings


def test_the_fast_path_knows_every_option_of_check_and_no_other():
    typer_options = _check_options()
    fast = {**{name: False for name in fastpath.VALUE_OPTIONS}, **{name: True for name in fastpath.FLAGS}}
    assert set(fast).isdisjoint(fastpath.HANDED_ON)
    assert set(typer_options) == set(fast) | set(fastpath.HANDED_ON) - {"-h", "--help"}


def test_a_flag_is_a_flag_on_both_sides():
    typer_options = _check_options()
    assert {name: typer_options[name] for name in fastpath.VALUE_OPTIONS} == dict.fromkeys(
        fastpath.VALUE_OPTIONS, False
    )
    assert {name: typer_options[name] for name in fastpath.FLAGS} == dict.fromkeys(fastpath.FLAGS, True)


def test_the_fast_path_hands_on_what_it_does_not_handle():
    for option in fastpath.HANDED_ON:
        assert fastpath.parse(["check", option, "x"]) is None
