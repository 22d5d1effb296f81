"""`gpudiag screen`: its typer command (command.py), one tick of the policy and `--stop` without typer (tick.py), and
what a run prints and the process-list reader it watches with (view.py). docs/screening.md.

This file imports nothing: app.py imports the command."""
