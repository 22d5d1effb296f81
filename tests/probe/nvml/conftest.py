"""The NVML probe's tests share one fake library at a time (tests/support/fakes/fake_nvml.py `installed`)."""

from __future__ import annotations

import threading

import pytest


@pytest.fixture(autouse=True)
def no_thread_left_behind():
    """Each test's prefetch threads end before the next test installs its fake library (a hung one is freed as the
    test's `installed` ends): a thread still probing would call into the next test's fake and be counted there."""
    yield
    for thread in threading.enumerate():
        if thread.name == "nvml-prefetch":
            thread.join(5)
            assert not thread.is_alive(), "a prefetch thread outlived its test"
