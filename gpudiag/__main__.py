"""`python -m gpudiag`: the console script's entry point (gpudiag/cli/fastpath.py)."""

from gpudiag.cli.fastpath import run

run()
