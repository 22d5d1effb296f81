"""The application: the `gpudiag` command (app.py registers one module per command; `check` and `serve`, which have
more to them, are sub-packages: check/command.py, serve/command.py), the fast path that answers a simple `check`
through the service before typer is imported (check/fastpath.py), the direct path that probes without typer
(check/direct.py), `serve`'s assembly and its log (serve/serving.py, serve/changes.py, serve/log_format.py), and
what several commands share (shared/: options, completion, habits, probing the node). Nothing below this package
imports it.

This file imports nothing: the console script's fast path (gpudiag.cli.check.fastpath) starts below it."""
