from gpudiag.cli.fastpath import run

run()
