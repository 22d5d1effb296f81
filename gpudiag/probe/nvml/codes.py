"""NVML's return codes and the sets of them the NVIDIA probe reads alike, for call.py, links.py and the NVML-ahead
process (ahead.py), which imports neither the model nor pynvml before its first read.
"""

# NVML return codes (nvml.h `nvmlReturn_t`; the same numbers pynvml exposes as NVML_ERROR_*). Spelled out here so
# that they can be used without importing pynvml.
SUCCESS = 0
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
DRIVER_NOT_LOADED = 9
TIMEOUT = 10
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
RESET_REQUIRED = 16
LIB_RM_VERSION_MISMATCH = 18
ARGUMENT_VERSION_MISMATCH = 25  # the driver predates this struct version
UNKNOWN = 999
# Not an NVML code: pynvml itself failed (e.g. a corrupt string it cannot decode).
PYTHON_ERROR = -1

# The device or the installed driver lacks the feature: the value is absent, nothing went wrong.
ABSENT = frozenset({NOT_SUPPORTED, FUNCTION_NOT_FOUND})
# The device can no longer be used. NVML_ERROR_RESET_REQUIRED ("GPU requires restart") is counted here: like a lost
# GPU, nothing more can be read from it until it is reset (NVML API reference, nvmlReturn_t).
LOST = frozenset({GPU_IS_LOST, RESET_REQUIRED})
# A link index the device does not have. Which of these a real driver gives is not documented (docs/vendor-api.md §4,
# UNVERIFIED), so each ends the NVLink walk (links.py).
NO_SUCH_LINK = frozenset({NOT_SUPPORTED, INVALID_ARGUMENT, FUNCTION_NOT_FOUND})
