"""The error a profile value raises, apart from Expectations so that a family's <family>_settings.py can import it
without importing the package that finds that module by name (issue 34, item 2: no import runs back up)."""

from __future__ import annotations


class ExpectationError(ValueError):
    """An expectation has a value it cannot have; `key` names the field at fault."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem
