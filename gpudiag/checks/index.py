"""The modules of gpudiag.checks that declare a check family, for the registry (__init__.py) to import by
name: written by tools/gen_registry_index.py, checked current by tests/test_registry_index.py."""

# Written by tools/gen_registry_index.py from the package's modules: do not edit, run it again.
FAMILY_MODULES = (
    'gpudiag.checks.active.family',
    'gpudiag.checks.baseline',
    'gpudiag.checks.driver',
    'gpudiag.checks.ecc',
    'gpudiag.checks.firmware',
    'gpudiag.checks.host',
    'gpudiag.checks.inventory',
    'gpudiag.checks.kernel_log.family',
    'gpudiag.checks.network.family',
    'gpudiag.checks.pcie',
    'gpudiag.checks.power',
    'gpudiag.checks.ras.family',
    'gpudiag.checks.screen',
    'gpudiag.checks.services',
    'gpudiag.checks.thermal',
    'gpudiag.checks.topology',
    'gpudiag.checks.workload',
)
