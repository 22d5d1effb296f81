"""`gpudiag check`: its typer command (command.py), and the paths that answer it without typer, the console script's
entry point that asks the running service (fastpath.py) and the probe of the node itself (direct.py), and the full
command's own way through the service (through_service.py).

This file imports nothing: the console script's fast path starts below it."""
