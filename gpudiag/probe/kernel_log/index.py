"""The kernel-log record kinds families add (gpudiag/probe/<part>/kernel_log.py), for events.py to
import by name: written by tools/gen_registry_index.py, checked current by
tests/test_registry_index.py."""

# Written by tools/gen_registry_index.py from the package's modules: do not edit, run it again.
RECORD_MODULES = (
    'gpudiag.probe.network.kernel_log',
)
