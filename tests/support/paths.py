"""Where things are, for a test module wherever it sits under tests/: the repository and the tests' data folders."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
FIXTURES = TESTS / "fixtures"
GOLDEN = TESTS / "golden"
SCHEMAS = TESTS / "schemas"
