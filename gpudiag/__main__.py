from gpudiag.fastpath import run

run()
