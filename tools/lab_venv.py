"""Install gpudiag on an offline lab node as the README installs it: a virtual environment of its own
(`python3 -m venv DIR && DIR/bin/pip install .`), so that a benchmark times the console script an operator runs and
not the lab's own Python environment (the lab's torch venv runs `.pth` start-up hooks: its `python -c pass` took
48 ms on the lab H100, a venv's 11 ms on the lab H200).

The lab has no network: each dependency gpudiag declares (and theirs in turn, markers evaluated) is installed by
copying the files of its installed distribution from this interpreter's environment (what a wheel install would
have written: its RECORD), and gpudiag itself by `pip install --no-deps --no-index --no-build-isolation` from this
tree, setuptools (and wheel, where installed) copied the
same way for the build.

    python3 tools/lab_venv.py /tmp/v        # then /tmp/v/bin/gpudiag check --direct
"""

from __future__ import annotations

import importlib.metadata as metadata
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _marker_holds(marker: str) -> bool:
    if "extra" in marker:
        return False  # an optional extra's requirement
    from pip._vendor.packaging.markers import Marker

    return Marker(marker).evaluate()


def closure(names: list[str]) -> dict[str, metadata.Distribution]:
    """The installed distributions of `names` and everything they require, by normalised name."""
    found: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = re.split(r"[\s;<>=!~\[(]", todo.pop(), maxsplit=1)[0]
        key = name.lower().replace("_", "-")
        if key in found:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            print(f"{name}: not installed here, left out")  # e.g. bcrypt, which only --web-config imports
            continue
        found[key] = dist
        for requirement in dist.requires or []:
            requirement, _, marker = requirement.partition(";")
            if not marker.strip() or _marker_holds(marker.strip()):
                todo.append(requirement.strip())
    return found


def _installed(name: str) -> bool:
    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def copy_distribution(dist: metadata.Distribution, site: Path) -> int:
    copied = 0
    for file in dist.files or []:
        source = Path(dist.locate_file(file)).resolve()
        if file.parts[0] == ".." or not source.is_file():
            continue  # a console script in bin/ or a file outside site-packages: not needed to import it
        target = site / file
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
        copied += 1
    return copied


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    venv = Path(sys.argv[1])
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    import tomllib

    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    wanted = [r for r in declared if ";" not in r or _marker_holds(r.partition(";")[2].strip())]
    build = ["setuptools"] + (["wheel"] if _installed("wheel") else [])  # setuptools < 70.1 builds with wheel's
    dists = closure([*wanted, *build])
    for key, dist in sorted(dists.items()):
        print(f"{key} {dist.version}: {copy_distribution(dist, site)} files")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--no-build-isolation",
                    str(REPO)], check=True)
    shutil.rmtree(REPO / "build", ignore_errors=True)
    print(f"installed: {venv}/bin/gpudiag")
    return 0


if __name__ == "__main__":
    sys.exit(main())
