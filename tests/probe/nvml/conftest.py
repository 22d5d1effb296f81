"""The NVML probe's tests share one fake library at a time (tests/support/fakes/fake_nvml.py `installed`)."""

from __future__ import annotations

import threading

import pytest


@pytest.fixture(autouse=True)
def no_thread_left_behind():
    """Each test's NVML-ahead threads (test_ahead.py) end before the next test installs its fake library (a hung one
    is freed as the test's `installed` ends): a thread still reading would call into the next test's fake and be
    counted there."""
    yield
    for thread in threading.enumerate():
        if thread.name == "nvml-ahead":
            thread.join(5)
            assert not thread.is_alive(), f"a thread {thread.name} outlived its test"
