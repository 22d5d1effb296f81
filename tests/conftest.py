"""Suite-wide guard: a check that raises must fail the test that ran it.

`run_checks` turns an exception in a check into an `unknown` result (fault code GPUDIAG-INTERNAL-ERROR) so that one
bug does not take the checklist down. A test that expects `unknown` would then pass on a crash (a NameError in the
check reads as "the device did not answer"), so every test's run_checks output is watched here, and any internal
error fails the test unless it is marked `@pytest.mark.internal_error_expected` (the tests of that path itself).
"""

from __future__ import annotations

import pytest

from tests.support.internal_errors import InternalErrorWatch


def pytest_configure(config):
    config.addinivalue_line("markers", "internal_error_expected: the test injects a check that raises on purpose")
    config.addinivalue_line("markers", "slow: end to end (real Prometheus, Alertmanager, servers, subprocesses) or a "
                                       "second or more; `-m 'not slow'` is the inner loop (tests/README.md)")


@pytest.fixture(autouse=True)
def _no_internal_errors(request, monkeypatch):
    watch = InternalErrorWatch()
    watch.install(monkeypatch)
    yield watch
    if not request.node.get_closest_marker("internal_error_expected"):
        watch.assert_none()
