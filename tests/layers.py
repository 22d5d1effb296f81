"""The one table of which gpudiag package may import which: tests/test_layering.py enforces it on every import,
tools/gen_docs.py writes it into docs/architecture.md. Plain data, so that the tool needs no pytest."""

# What each package (or root module) may import from gpudiag, lowest first: the one table of allowed imports.
# docs/architecture.md's layer table is generated from it (tools/gen_docs.py). "__init__" is gpudiag/__init__.py
# (`__version__`); the leaves (exitcodes, stdout, fileio) import nothing of gpudiag but each other and anyone may use
# them.
LAYERS = {
    "__init__": set(),
    "exitcodes": set(),
    "stdout": set(),
    "fileio": {"stdout"},
    "profiles": set(),
    "model": {"fileio"},
    "probe": {"__init__", "model", "fileio"},
    "active": {"model", "probe"},
    "expect": {"model", "fileio"},
    "checks": {"model", "expect"},
    "report": {"model", "checks", "expect", "exitcodes", "stdout"},
    "daemon": {"model", "probe"},
    "exporter": {"__init__", "model", "probe", "checks", "report", "daemon", "fileio"},
    "service": {"__init__", "model", "expect", "checks", "report", "daemon", "fileio", "exitcodes"},
    "fleet": {"model", "checks", "report", "fileio"},
    "cli": {"__init__", "model", "probe", "active", "expect", "checks", "report", "daemon", "exporter", "service",
            "fleet", "fileio", "exitcodes", "stdout"},
    "__main__": {"cli"},
}
