"""Watches `gpudiag.checks.run_checks` for results of checks that raised (see tests/conftest.py)."""

from __future__ import annotations

import threading

import pytest

import gpudiag.checks as checks
from gpudiag.checks.verdicts import is_internal_error
from gpudiag.model import CheckResult


class InternalErrorWatch:
    def __init__(self) -> None:
        self.seen: list[CheckResult] = []
        self._lock = threading.Lock()  # the exporter runs its checks on a worker thread

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        # run_checks looks `_run_one` up in the module on every call, so the wrapper sees every check of every
        # in-process caller (cli, exporter, tests/support/snapshots.run).
        original = checks._run_one

        def watched(check, snapshot, expectations):
            results = original(check, snapshot, expectations)
            crashed = [r for r in results if is_internal_error(r)]
            if crashed:
                with self._lock:
                    self.seen.extend(crashed)
            return results

        monkeypatch.setattr(checks, "_run_one", watched)

    def assert_none(self) -> None:
        if self.seen:
            lines = "\n".join(f"  {r.check}: {r.message}" for r in self.seen)
            pytest.fail(f"{len(self.seen)} check(s) raised (internal error, not a device unknown); the traceback is "
                        f"in the captured log:\n{lines}", pytrace=False)
