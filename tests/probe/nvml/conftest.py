"""The NVML probe's tests share one fake library at a time (tests/support/fakes/fake_nvml.py `installed`)."""

from __future__ import annotations

import threading

import pytest


@pytest.fixture(autouse=True)
def no_thread_left_behind():
    """Each test's NVML answers end before the next test installs its fake library: the thread that reads them ends
    once its NVML process has ended (tests/probe/nvml/test_prefetch.py ends each one it forks), so that no answer of
    one test is read in the next."""
    yield
    for thread in threading.enumerate():
        if thread.name == "nvml-answers":
            thread.join(5)
            assert not thread.is_alive(), "an NVML process's answers outlived its test"
