"""The DaemonSet's image (issue 12): contrib/kubernetes/Containerfile builds what the manifest runs. No container
engine runs here, so the file is checked against the repository and the manifest; the install step inside it is the
README's `pip install .`, which test_readme_setup.py replays."""

from __future__ import annotations

import fnmatch
import json
import re
import shlex

import pytest

from tests.support.paths import REPO

CONTAINERFILE = REPO / "contrib" / "kubernetes" / "Containerfile"
MANIFEST = REPO / "contrib" / "kubernetes" / "gpudiag-exporter.yaml"


def instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n\s*", " ", CONTAINERFILE.read_text())
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def container() -> dict:
    yaml = pytest.importorskip("yaml")
    daemonset = list(yaml.safe_load_all(MANIFEST.read_text()))[1]
    (spec,) = daemonset["spec"]["template"]["spec"]["containers"]
    return spec


def in_build_context(path: str) -> bool:
    """Whether .dockerignore (an ignore-everything list with exceptions) lets `path` into the build context."""
    patterns = [p for p in (REPO / ".dockerignore").read_text().splitlines() if p and not p.startswith("#")]
    included = True
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        if fnmatch.fnmatch(path, pattern) or path.startswith(pattern + "/"):
            included = negate
    return included


def test_every_copied_source_exists_and_is_in_the_build_context():
    copies = [shlex.split(args) for op, args in instructions() if op == "COPY" and not args.startswith("--from")]
    sources = [src for args in copies for src in args[:-1]]
    assert {"pyproject.toml", "gpudiag", "systemd", "monitoring"} <= set(sources)
    for src in sources:
        assert (REPO / src).exists(), src
        assert in_build_context(src), f".dockerignore keeps {src} out of the build context"
    # what the package links to must be copied with it, or the wheel misses the units
    for link in (REPO / "gpudiag" / "_shipped").iterdir():
        assert link.resolve().relative_to(REPO).parts[0] in sources
    assert not in_build_context(".git") and not in_build_context(".venv")


def test_the_image_runs_what_the_manifest_asks_for():
    ops = dict(instructions())  # the last of each kind: the final stage's
    assert json.loads(ops["ENTRYPOINT"]) == ["gpudiag"]
    spec = container()
    assert json.loads(ops["CMD"]) == spec["args"][:3]
    assert int(ops["EXPOSE"]) == spec["ports"][0]["containerPort"]


def test_the_manifest_names_the_image_the_documented_build_makes():
    image = container()["image"]
    build = re.search(r"docker build -f contrib/kubernetes/Containerfile -t (\S+) \.", CONTAINERFILE.read_text())
    assert build and build.group(1) == image
    assert f"-t {image} ." in MANIFEST.read_text()
    assert image.startswith("registry.example.com/")  # a placeholder nobody can pull by mistake


def test_the_image_finds_amdsmi_where_the_manifest_mounts_rocm():
    env = dict(part.split("=", 1) for op, args in instructions() if op == "ENV" for part in shlex.split(args))
    commented = MANIFEST.read_text()
    mount = re.search(r"#\s+- name: rocm\n\s+#\s+mountPath: (\S+)", commented).group(1)
    host = re.search(r"#\s+hostPath:\n\s+#\s+path: (\S+)", commented).group(1)
    assert env["ROCM_PATH"] == mount == host == "/opt/rocm"
    assert env["PYTHONPATH"] == f"{mount}/share/amd_smi"  # ROCm's amdsmi wrapper (the README's pip install path)
    assert env["PATH"].startswith("/opt/gpudiag/bin:")
