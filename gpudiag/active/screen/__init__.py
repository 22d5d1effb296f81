"""Idle-time screening (docs/screening.md): the verified load tests run on GPUs nobody uses, by policy, and give the
GPU back within seconds when a job comes.

    policy.py      which GPUs to screen now (pure: a clock the caller gives, the state, what the GPUs show)
    footprint.py   how much GPU memory a screen may hold, and the test sizes that fit in it
    worker.py      the process that loads one GPU (`python -m gpudiag.active.screen.worker`): it exits to give the
                   GPU back, so that nothing of the screen outlives it on the GPU
    supervisor.py  starts the workers, watches the GPUs' process lists every 100 ms, stops a worker when a job
                   appears (or `gpudiag screen --stop` asks), and turns what each worker found into a ScreenRun
    outcome.py     what a worker's results mean: verified, failed (wrong results), error

The state file, the journal and the command are the CLI's (gpudiag/cli/screen/): this package never writes the
state directory.
"""
