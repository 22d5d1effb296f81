"""gpudiag: GPU node health and diagnostics for AMD and NVIDIA nodes."""

__version__ = "0.1.0"
