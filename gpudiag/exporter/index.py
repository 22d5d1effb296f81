"""The families' metric modules (metrics_<family>.py of gpudiag.exporter), for metric_modules.py to
import by name: written by tools/gen_registry_index.py, checked current by
tests/test_registry_index.py."""

# Written by tools/gen_registry_index.py from the package's modules: do not edit, run it again.
METRIC_MODULES = (
    'gpudiag.exporter.metrics_network',
    'gpudiag.exporter.metrics_screen',
    'gpudiag.exporter.metrics_services',
)
