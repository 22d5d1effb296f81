"""`python -m gpudiag`: the console script's entry point (gpudiag/cli/check/fastpath.py)."""

from gpudiag.cli.check.fastpath import run

run()
