"""The families' profile settings (the modules <family>_settings.py of gpudiag.expect), for __init__.py to
import by name: written by tools/gen_registry_index.py, checked current by tests/test_registry_index.py."""

# Written by tools/gen_registry_index.py from the package's modules: do not edit, run it again.
SETTINGS_MODULES = (
    'gpudiag.expect.network_settings',
    'gpudiag.expect.screen_settings',
    'gpudiag.expect.services_settings',
)
