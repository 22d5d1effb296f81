"""`gpudiag top`, the live view: its typer command and the dmon-style lines of a pipe (command.py), where its
samples come from, the service or a probe of its own (source.py), and the full-screen view of a terminal
(screen.py).

This file imports nothing: `gpudiag check` registers beside it and pays for none of it."""
