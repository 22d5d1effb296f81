"""The kernel log, read and parsed: the reader (live from /dev/kmsg, or a saved file: reader.py), the line formats a
log comes in (formats.py), the drivers' records turned into `KernelEvent`s (events.py, with NVIDIA's in nvidia.py,
amdgpu's in amdgpu.py, firmware-first PCIe errors in ghes.py, and what the parsers share in text.py), and the driver
events of earlier boots (boot_history.py).

Parsing only: what an event means is for gpudiag/checks/kernel_log/. This file imports nothing: import the module
you need.
"""
