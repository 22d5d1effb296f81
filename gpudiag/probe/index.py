"""The probe parts families add (a sub-package of gpudiag.probe with a module part.py), for the collector
(collector.py) to import by name: written by tools/gen_registry_index.py, checked current by
tests/test_registry_index.py."""

# Written by tools/gen_registry_index.py from the package's modules: do not edit, run it again.
FAMILY_PARTS = {
    'network': 'gpudiag.probe.network.part',
    'ras': 'gpudiag.probe.ras.part',
    'screening': 'gpudiag.probe.screening.part',
    'services': 'gpudiag.probe.services.part',
}
