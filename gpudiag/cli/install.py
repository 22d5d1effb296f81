"""`gpudiag install-service`: put the systemd units that ship inside the package onto this node.

The units in systemd/ name `/usr/local/bin/gpudiag`, which neither a venv nor pipx creates (and `systemd-analyze
verify` refuses a unit whose program is missing), so they are rendered with the path of the gpudiag that runs this
command. Written: /etc/systemd/system/{gpudiag-exporter.service, gpudiag-check.service, gpudiag-check.timer,
gpudiag.socket (socket activation, never enabled here: docs/monitoring.md), gpudiag-screen.service and
gpudiag-screen.timer (idle-time screening, opt-in, never enabled here: docs/screening.md)} and
/etc/sysusers.d/gpudiag.conf (the `gpudiag` system user both units run as; /etc, not /usr/lib, because this is a
local installation, not a distribution package: sysusers.d(5)). Then `systemd-sysusers` creates the user and
`systemctl daemon-reload` makes systemd read the units; `--enable` also starts the exporter and the textfile timer.

`--root DIR` writes under DIR instead (an image being built, a test; DIR must exist) and runs no systemctl; with `--enable`
it enables the exporter and the timer in the image as `systemctl --root DIR enable` does: a link per [Install]
WantedBy=/RequiredBy= target, `etc/systemd/system/<target>.wants/<unit>` pointing at the unit's absolute path as the
image names it (`/etc/systemd/system/<unit>`), so that the booted image starts them. `--dry-run` prints what would
be written and runs nothing. Under `--root` every path is resolved inside DIR, as the booted image will see it:
a symbolic link's absolute target starts at DIR, `..` stops at DIR (an image's `/etc/sysusers.d ->
/usr/lib/sysusers.d` is the image's /usr/lib, never the build host's).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

import typer

try:  # as in gpudiag/cli/app.py: typer 0.2x ships its own copy of click
    from typer._click.exceptions import UsageError
except ImportError:  # pragma: no cover - depends on the installed typer
    from click import UsageError

# The package's copy of the top-level systemd/ and monitoring/ directories (symbolic links in the source tree, which
# an editable install follows and a wheel build copies; pyproject.toml's package-data ships them).
SHIPPED = Path(__file__).resolve().parent.parent / "_shipped"
UNITS = ("gpudiag-exporter.service", "gpudiag-check.service", "gpudiag-check.timer", "gpudiag.socket",
         "gpudiag-screen.service", "gpudiag-screen.timer")
SYSUSERS = "gpudiag.sysusers"
PLACEHOLDER = "/usr/local/bin/gpudiag"  # what the shipped units name
UNIT_DIR, SYSUSERS_DIR = Path("etc/systemd/system"), Path("etc/sysusers.d")
ENABLE = ("gpudiag-exporter.service", "gpudiag-check.timer")
# Idle-time screening loads the GPUs: written, never enabled here (docs/screening.md).
OPT_IN = "systemctl enable --now gpudiag-screen.timer"
# The units set ProtectHome=yes: a gpudiag under these directories is invisible to the service.
HIDDEN_BY_PROTECT_HOME = ("/home/", "/root/", "/run/user/")
# ... and PrivateTmp=yes gives the service empty /tmp and /var/tmp of its own: a gpudiag there is not found.
HIDDEN_BY_PRIVATE_TMP = ("/tmp/", "/var/tmp/")
# Characters systemd would interpret in an ExecStart= program path (specifiers, variables, quoting).
_UNSAFE_PATH = re.compile(r"[\s%$\\\"';]")
_EXEC_LINE = re.compile(r"^(ExecStart[A-Za-z]*=[-@:+!]*)" + re.escape(PLACEHOLDER) + r"(?=\s|$)", re.MULTILINE)


class InstallError(Exception):
    """A reason not to install: one line for the user."""


def shipped_file(*parts: str) -> Path:
    path = SHIPPED.joinpath(*parts)
    if not path.is_file():
        raise InstallError(f"{path}: not in this installation of gpudiag (was it built without its package data?)")
    return path


def installed_command() -> list[str]:
    """How systemd should start this gpudiag: the console script that is running, the one beside this Python (a
    venv's bin/), the one on PATH, or this Python with `-m gpudiag`; absolute, never resolved through symlinks (a
    pipx link keeps working across pipx upgrades)."""
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    candidates = []
    if argv0 is not None and argv0.name == "gpudiag":
        candidates.append(Path(os.path.abspath(argv0)))
    candidates.append(Path(os.path.abspath(sys.executable)).parent / "gpudiag")
    on_path = shutil.which("gpudiag")
    if on_path:
        candidates.append(Path(os.path.abspath(on_path)))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return [str(candidate)]
    return [os.path.abspath(sys.executable), "-m", "gpudiag"]


MAX_LINKS = 40  # as the kernel's path walk (ELOOP)


def inside(root: Path, path: Path | str) -> Path:
    """`path` (absolute, as the image names it) resolved inside `root` as a chroot would: every symbolic link on the
    way, the last component included, is followed with an absolute target taken from `root` and `..` clamped at
    `root`. The result is `root` joined with a path that has no link in it (its tail may not exist yet)."""
    root = Path(os.path.abspath(root))
    pending = [part for part in Path(path).parts if part not in ("/", "")][::-1]
    done: list[str] = []
    links = 0
    while pending:
        part = pending.pop()
        if part == ".":
            continue
        if part == "..":
            if done:
                done.pop()
            continue
        candidate = root.joinpath(*done, part)
        if not candidate.is_symlink():
            done.append(part)
            continue
        links += 1
        if links > MAX_LINKS:
            raise InstallError(f"{path}: too many levels of symbolic links under {root}")
        target = os.readlink(candidate)
        if target.startswith("/"):
            done = []
        pending.extend(p for p in reversed(Path(target).parts) if p not in ("/", ""))
    return root.joinpath(*done)


def check_command(command: list[str], root: Path = Path("/")) -> None:
    """Refuse a program the service could not run. Under --root (an image being built) it may exist in the image
    only: ROOT/program counts."""
    program = command[0]
    if not os.path.isabs(program):
        raise InstallError(f"--gpudiag {program}: give an absolute path")
    if _UNSAFE_PATH.search(program):
        raise InstallError(f"{program}: the path has characters systemd would interpret (space, %, $, quotes, "
                           f"backslash); install gpudiag under a plain path such as /opt/gpudiag")
    candidates = (program,) if root == Path("/") else (program, inside(root, program))
    if not any(os.path.isfile(p) and os.access(p, os.X_OK) for p in candidates):
        raise InstallError(f"{program}: no such executable" + (f" (nor under {root})" if root != Path("/") else ""))
    if program.startswith(HIDDEN_BY_PROTECT_HOME):
        raise InstallError(f"{program} is under a home directory, which the units' ProtectHome=yes hides from the "
                           f"service: install gpudiag system-wide, e.g. python3 -m venv /opt/gpudiag && "
                           f"/opt/gpudiag/bin/pip install <gpudiag> && /opt/gpudiag/bin/gpudiag install-service")
    if program.startswith(HIDDEN_BY_PRIVATE_TMP):
        raise InstallError(f"{program} is under /tmp or /var/tmp, which the units' PrivateTmp=yes replaces with "
                           f"empty directories for the service: install gpudiag system-wide, e.g. under /opt/gpudiag")


def render_unit(text: str, command: list[str], version: str) -> str:
    """The unit with ExecStart= naming `command` instead of the placeholder, and a header saying where it came from."""
    rendered, count = _EXEC_LINE.subn(lambda m: m.group(1) + " ".join(command), text)
    if count == 0 and re.search(r"^ExecStart", text, re.MULTILINE):  # the timer has none
        raise InstallError(f"a shipped unit's ExecStart= does not start with {PLACEHOLDER}: cannot render it")
    header = (f"# Written by `gpudiag install-service` (gpudiag {version}) for {' '.join(command)}. Local changes "
              f"belong in a drop-in (systemctl edit UNIT): running install-service again replaces this file.\n")
    return header + rendered


def planned_files(root: Path, command: list[str], version: str) -> list[tuple[Path, str]]:
    """(destination, content) of everything the installer writes."""
    files = [(UNIT_DIR / unit, render_unit(shipped_file("systemd", unit).read_text(), command, version))
             for unit in UNITS]
    files.append((SYSUSERS_DIR / "gpudiag.conf", shipped_file("systemd", SYSUSERS).read_text()))
    if root == Path("/"):
        return [(root / path, text) for path, text in files]
    planned = [(inside(root, path), text) for path, text in files]
    top = os.path.realpath(root)
    for path, _ in planned:  # inside() keeps them there; this says so once more, before anything is written
        if os.path.commonpath([top, os.path.realpath(path)]) != top:
            raise InstallError(f"{path}: outside --root {root}: refusing to write it")
    return planned


def write_file(path: Path, text: str) -> str:
    """Write `path` atomically (mode 0644: systemd and the admin read units); 'unchanged' when it already says it."""
    from gpudiag.fileio import write_atomically

    try:
        if path.is_file() and path.read_text() == text:
            return "unchanged"
        existed = path.exists()
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, text, 0o644)
    except OSError as exc:
        raise InstallError(f"{path}: cannot write: {exc.strerror or exc}") from None
    return "replaced" if existed else "written"


# [Install] dependencies and the directory of links systemctl enable makes for each (systemd.unit(5)).
_INSTALL_LINKS = {"WantedBy": ".wants", "RequiredBy": ".requires"}


def enable_links(files: list[tuple[Path, str]], root: Path) -> list[tuple[Path, str]]:
    """(link, target) of each link `systemctl --root ROOT enable` makes for the units of ENABLE: in the unit
    directory, `<target>.wants/<unit>` (`.requires/` for RequiredBy=), pointing at `/etc/systemd/system/<unit>`, the
    absolute path the booted image reads the unit at (systemd 252's systemctl writes that target; compared in
    tests/cli/test_install_service.py)."""
    links = []
    for path, text in files:
        if path.name not in ENABLE:
            continue
        section = re.split(r"^\[Install\]\s*$", text, maxsplit=1, flags=re.MULTILINE)
        install_section = section[1].split("\n[", 1)[0] if len(section) == 2 else ""
        for key, suffix in _INSTALL_LINKS.items():
            for line in re.findall(rf"^{key}=(.*)$", install_section, re.MULTILINE):
                for target in line.split():
                    link = inside(root, UNIT_DIR / f"{target}{suffix}") / path.name  # the link itself: not followed
                    links.append((link, "/" + str(UNIT_DIR / path.name)))
    return links


def write_link(link: Path, target: str) -> str:
    """Make `link` point at `target`; 'unchanged' when it already does. Anything else at its place is refused, as
    systemctl enable refuses it (a unit masked or linked elsewhere by the image's builder)."""
    if link.is_symlink() and os.readlink(link) == target:
        return "unchanged"
    if link.is_symlink() or link.exists():
        raise InstallError(f"{link}: already exists and is not a link to {target}: remove it, or enable by hand")
    try:
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, link)
    except OSError as exc:
        raise InstallError(f"{link}: cannot link: {exc.strerror or exc}") from None
    return "linked"


def say(text: str) -> None:
    """A line of what install-service did or would do, on stdout: whole, or exit 4 (gpudiag/stdout.py)."""
    from gpudiag import stdout

    stdout.write(text if text.endswith("\n") else text + "\n", "the installation's account")


def run_step(argv: list[str]) -> None:
    """Run one systemd tool; a failure is one line naming the command (its own message follows on stderr)."""
    if shutil.which(argv[0]) is None:
        raise InstallError(f"{argv[0]} not found: is this a systemd node? (--root DIR writes the files without it)")
    say("+ " + " ".join(argv))
    try:
        done = subprocess.run(argv, timeout=120, check=False)
    except subprocess.TimeoutExpired:
        raise InstallError(f"`{' '.join(argv)}` did not finish within 120 s") from None
    if done.returncode != 0:
        raise InstallError(f"`{' '.join(argv)}` failed with exit status {done.returncode}")


def install(root: Path, command: list[str], *, dry_run: bool, reload: bool, enable: bool, live: bool) -> None:
    """Write the files under `root`; on the `live` node (root /) also run the systemd tools."""
    from gpudiag import __version__

    check_command(command, root)
    if not root.is_dir():  # an image's root is made by whoever builds the image, never by a typo here
        raise InstallError(f"--root {root}: {'not a directory' if root.exists() else 'no such directory'}")
    files = planned_files(root, command, __version__)
    steps: list[list[str]] = []
    if live and reload:
        steps = [["systemd-sysusers", str(root / SYSUSERS_DIR / "gpudiag.conf")], ["systemctl", "daemon-reload"]]
        if enable:
            steps.append(["systemctl", "enable", "--now", *ENABLE])
    links = enable_links(files, root) if enable and not live else []
    if dry_run:
        for path, text in files:
            say(f"--- would write {path} (mode 0644)")
            say(text)
        for link, target in links:
            say(f"--- would link {link} -> {target}")
        for argv in steps:
            say("--- would run " + " ".join(argv))
        return
    for path, text in files:
        say(f"{write_file(path, text):9} {path}")
    for link, target in links:
        say(f"{write_link(link, target):9} {link} -> {target}")
    for argv in steps:
        run_step(argv)
    if not enable:
        hint = "systemctl enable --now " + " ".join(ENABLE)
        say(f"Next: {hint}" if live and reload else f"On the node: systemd-sysusers, systemctl daemon-reload, {hint}")
    elif not live:
        say(f"Next: systemd-sysusers --root {root} (the gpudiag user the units run as); the image starts the exporter "
            f"and the timer at boot")
    # in an image, opting in is a link in the image (nothing runs there to start)
    opt_in = OPT_IN if live else f"systemctl --root {root} enable gpudiag-screen.timer"
    say(f"Idle-time screening of the GPUs (opt-in, docs/screening.md): {opt_in}")


def install_service(
    root: Path = typer.Option(Path("/"), "--root", help="Install under this directory (an image, a test) and run no systemctl."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the files it would write and the commands it would run; change nothing."),
    reload: bool = typer.Option(True, "--reload/--no-reload", help="Run systemd-sysusers and systemctl daemon-reload (default; never with --root)."),
    enable: bool = typer.Option(False, "--enable", help="Also `systemctl enable --now` the exporter and the textfile timer (under --root: enable them in the image, as `systemctl --root DIR enable`)."),
    gpudiag: Optional[Path] = typer.Option(None, "--gpudiag", help="The gpudiag executable the units run (default: this one)."),
) -> None:
    """Install the systemd units (exporter, textfile timer) and the gpudiag system user, for this gpudiag."""
    command = [str(gpudiag)] if gpudiag is not None else installed_command()
    if enable and root == Path("/") and not reload:
        raise UsageError("--enable starts the units on this node, which needs systemctl daemon-reload: it cannot go "
                         "with --no-reload")
    try:
        install(root, command, dry_run=dry_run, reload=reload, enable=enable, live=root == Path("/"))
    except InstallError as exc:
        raise UsageError(str(exc)) from None
