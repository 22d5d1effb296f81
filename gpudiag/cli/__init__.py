"""The application: the `gpudiag` command (app.py registers one module per command), the fast path that answers a
simple `check` through the service before typer is imported (fastpath.py), the direct path that probes without
typer (direct.py), and `serve`'s assembly (serving.py). Nothing below this package imports it.

This file imports nothing: the console script's fast path (gpudiag.cli.fastpath) starts below it."""
