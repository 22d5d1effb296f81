"""The AMD backend: AMD Instinct GPUs through the `amdsmi` Python wrapper over ROCm's libamd_smi.so. backend.py opens
the library and groups partitions into GPUs, every call going through calls.py; one GPU is read by device.py, with its
RAS state (ras.py) and throttle counters and clocks (throttle.py); GPU pairs by peers.py.

Named for the library it reads, like gpudiag/probe/nvml/: an `import amdsmi` in these modules is still the vendor's
package, imports being absolute. This file imports nothing.
"""
