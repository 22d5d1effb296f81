"""The NVIDIA backend: NVML through nvidia-ml-py (`pynvml`). backend.py opens the library and probes the GPUs, every
call going through call.py; one GPU is read by device.py, with its sensors (sensors.py), NVLinks and pairs
(links.py), the driver's own health verdicts (health.py), the batched field values (fields.py) and the board
constants read once (constants.py); a collector that probes again and again also gets the mean power since the
previous probe from the driver's power samples (power_samples.py). events.py follows NVML's Xid events for the
exporter, and early.py starts NVML's initialisation while `gpudiag check --direct` imports the rest.

This file imports nothing: `import pynvml` happens where a module needs it.
"""
