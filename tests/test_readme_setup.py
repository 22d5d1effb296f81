"""The README's set-up, replayed (issue 12): its install command under Debian's own python3 (PEP 668: no bare `pip
install`) in a clean HOME, from a copy of this checkout, then the installed `gpudiag --version`; and CI runs the
README's test command.

Offline: the venv is the README's, made by Debian's python3; pip then installs with --no-index --no-build-isolation,
finding gpudiag's dependencies (already installed for this test run) through a .pth file and building with Debian's
setuptools and wheel. Everything else (the venv, the build from the source tree into a wheel, the console script,
the package data) is what a user gets.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.support.paths import REPO

README = (REPO / "README.md").read_text()
DEBIAN_PYTHON = Path("/usr/bin/python3")
DEBIAN_DIST_PACKAGES = Path("/usr/lib/python3/dist-packages")


def setup_commands() -> list[str]:
    """The ```sh blocks of the README's "Set-up" section: install and run, then the tests."""
    section = README.split("\n## Set-up\n", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", section, re.DOTALL)]


def test_the_readme_sets_up_in_two_commands_and_ci_runs_the_second():
    install, tests, *service = setup_commands()
    assert install.endswith("gpudiag check") and "venv" in install and "\n" not in install
    assert tests.startswith("apt-get install") and tests.endswith("pytest -q") and "\n" not in tests
    # .ci/run installs the apt packages only when missing, then runs the rest of the README's command word for word
    after_apt = tests.split(" && ", 1)[1]
    ci = (REPO / ".ci" / "run").read_text()
    assert after_apt in ci.splitlines()
    for package in tests.split(" && ", 1)[0].split()[3:]:
        assert package in ci, f".ci/run does not install {package}"
    assert service and "install-service" in service[0]
    # the linter runs before the tests (issue 34, item 5e), over what pyproject.toml's [tool.ruff] configures
    assert after_apt.index(".venv/bin/ruff check ") < after_apt.index("-m pytest")
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(requirement.startswith("ruff") for requirement in extras["test"])


def _python_minor(python: Path) -> str:
    return subprocess.run([str(python), "-c", "import sys; print(sys.version_info[:2])"], capture_output=True,
                          text=True, timeout=30).stdout.strip()


def _dependency_dir(tmp_path: Path) -> Path:
    """This test run's installed packages, less gpudiag itself and the packaging tools the venv brings, plus Debian's
    `wheel` (setuptools < 70.1 builds wheels with it)."""
    farm = tmp_path / "deps"
    farm.mkdir()
    skip = ("gpudiag", "__editable__", "pip", "setuptools", "_distutils_hack", "pkg_resources", "distutils-precedence",
            "wheel", "__pycache__")
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith(skip) and entry.suffix != ".pth":
            (farm / entry.name).symlink_to(entry)
    for entry in DEBIAN_DIST_PACKAGES.glob("wheel*"):
        (farm / entry.name).symlink_to(entry)
    return farm


def _checkout_copy(tmp_path: Path) -> Path:
    """What a clone has: the working tree without build leftovers (gpudiag/_shipped stays a set of links)."""
    copy = tmp_path / "gpudiag-src"
    shutil.copytree(REPO, copy, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".gl"))
    return copy


@pytest.mark.skipif(not (DEBIAN_PYTHON.exists() and (DEBIAN_DIST_PACKAGES / "wheel").is_dir()),
                    reason="needs Debian's python3 with python3-venv and python3-wheel")
@pytest.mark.slow
def test_the_readme_install_command_works_under_debians_python(tmp_path):
    if _python_minor(DEBIAN_PYTHON) != str(sys.version_info[:2]):
        pytest.skip("Debian's python3 is another minor version than this test run's (no shared dependencies)")
    install = setup_commands()[0]
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
           "PIP_NO_INPUT": "1", "PIP_CONFIG_FILE": os.devnull}
    venv_cmd, pip_cmd, run_cmd = install.split(" && ")
    assert venv_cmd == "python3 -m venv ~/.venvs/gpudiag"

    # 1. the README's venv, made by Debian's python3
    done = subprocess.run(["bash", "-c", venv_cmd.replace("python3", str(DEBIAN_PYTHON), 1)], env=env, timeout=120,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    venv = home / ".venvs" / "gpudiag"
    (site,) = venv.glob("lib/python3*/site-packages")
    (site / "gpudiag-test-deps.pth").write_text(f"{_dependency_dir(tmp_path)}\n")

    # 2. the README's pip install ., offline, from a copy of the checkout
    source = _checkout_copy(tmp_path)
    offline = pip_cmd.replace(" install .", " install --no-index --no-build-isolation .")
    assert offline != pip_cmd
    done = subprocess.run(["bash", "-c", offline], cwd=source, env=env, timeout=180, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr

    # 3. the installed gpudiag, from outside the checkout (no PYTHONPATH, no source tree on sys.path)
    gpudiag = venv / "bin" / "gpudiag"
    assert run_cmd.split()[0] == "~/.venvs/gpudiag/bin/gpudiag"
    from gpudiag import __version__

    done = subprocess.run([str(gpudiag), "--version"], cwd=home, env=env, timeout=60, capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"gpudiag {__version__}\n", "")

    # the wheel carried the units and monitoring files as files, and the installer names this venv's gpudiag
    installed = subprocess.run([str(venv / "bin" / "python"), "-c", "import gpudiag; print(gpudiag.__file__)"],
                               cwd=home, env=env, timeout=60, capture_output=True, text=True).stdout.strip()
    shipped = Path(installed).parent / "_shipped"
    assert str(venv) in installed
    for name in ("systemd/gpudiag-exporter.service", "systemd/gpudiag.sysusers",
                 "monitoring/grafana/gpudiag-dashboard.json", "monitoring/prometheus/gpudiag-alerts.yml"):
        assert (shipped / name).is_file() and not (shipped / name).is_symlink(), name
    # and the wheel itself lists them (what a wheel built elsewhere and copied to a node carries)
    done = subprocess.run([str(venv / "bin" / "pip"), "wheel", "--no-deps", "--no-index", "--no-build-isolation",
                           "-w", str(tmp_path / "dist"), "."], cwd=source, env=env, timeout=180, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = (tmp_path / "dist").glob("gpudiag-*.whl")
    listed = set(zipfile.ZipFile(wheel).namelist())
    for unit in ("gpudiag-exporter.service", "gpudiag-check.service", "gpudiag-check.timer", "gpudiag.socket",
                 "gpudiag.sysusers"):
        assert f"gpudiag/_shipped/systemd/{unit}" in listed
    assert {
        "gpudiag/_shipped/monitoring/grafana/gpudiag-dashboard.json",
        "gpudiag/_shipped/monitoring/prometheus/gpudiag-alerts.yml",
        "gpudiag/_shipped/monitoring/alertmanager/gpudiag-alertmanager.yml",
        "gpudiag/profiles/h200-8x.toml",
    } <= listed
    assert not any(name.startswith(("tests/", "systemd/")) for name in listed)

    # this venv is under /tmp, which the units' PrivateTmp=yes hides from the service: refused, naming it
    image = tmp_path / "image"
    image.mkdir()
    done = subprocess.run([str(gpudiag), "install-service", "--root", str(image), "--dry-run"],
                          cwd=home, env=env, timeout=60, capture_output=True, text=True)
    assert done.returncode == 2 and str(gpudiag) in done.stderr and "PrivateTmp=yes" in done.stderr, done.stderr
    # the image's own gpudiag (as the README installs it, under /opt/gpudiag) is what the rendered units name
    in_image = image / "opt/gpudiag/bin/gpudiag"
    in_image.parent.mkdir(parents=True)
    in_image.write_text("#!/bin/sh\n")
    in_image.chmod(0o755)
    done = subprocess.run([str(gpudiag), "install-service", "--root", str(image), "--dry-run", "--gpudiag",
                           "/opt/gpudiag/bin/gpudiag"], cwd=home, env=env, timeout=60, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "ExecStart=/opt/gpudiag/bin/gpudiag serve --socket" in done.stdout
    assert "ExecStart=/opt/gpudiag/bin/gpudiag textfile --output" in done.stdout
