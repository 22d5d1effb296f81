"""`gpudiag check` in a few milliseconds: ask the running service to judge and render the check (docs/service.md
"The fast path"), importing nothing but os, sys, socket, json and time: no typer, no model, no checks, no vendor
library.

`main()` handles only `check` with the simple options whose answer needs nothing from this machine's filesystem:
--format/-f, --json, --only, --skip, --verbose/-v, --color/--no-color, --profile with a shipped profile's NAME,
-p/--param, --socket, --root, --timeout, --level 1, --direct. Anything else (a profile file, --baseline, --replay,
--kernel-log, --level 2|3, -h, an option it does not know, GPUDIAG_DEBUG) returns None: not handled, and the entry
point runs the full CLI (gpudiag.cli.app), which then behaves exactly as before. So does a service that accepts the
connection but does not answer, is busy, or is of an older version. With --direct, with nobody listening on the
socket, and when the service's collection failed or did not finish (the same warning as `gpudiag check`), this
process probes the node itself through gpudiag/cli/check/direct.py: still without typer.
"""

import os
import sys
import time

from gpudiag import DEFAULT_DEADLINE_SECONDS, more_wait
from gpudiag.exitcodes import ExitCode

DEFAULT_SOCKET = "/run/gpudiag/gpudiag.sock"  # gpudiag/service/__init__.py; a test keeps the two equal
MAX_REQUEST_BYTES = 4096  # gpudiag/service/protocol.py
MAX_ANSWER_BYTES = (16 << 20) + (
    1 << 20
)  # the service's cap on a report (gpudiag/service/check_answers.py) and the JSON
CONNECT_TIMEOUT_SECONDS = 0.25  # gpudiag/service/client.py
FORMATS = ("text", "json", "junit")
# option -> the request field it sets; a value option takes the next argument or `--opt=value`
VALUE_OPTIONS = {"--format": "format", "-f": "format", "--only": "only", "--skip": "skip", "--profile": "profile",
                 "--param": "params", "-p": "params", "--socket": "socket", "--root": "root", "--timeout": "timeout",
                 "--level": "level"}
FLAGS = {
    "--json": ("json", True),
    "--direct": ("direct", True),
    "--verbose": ("verbose", True),
    "-v": ("verbose", True),
    "--color": ("color", True),
    "--no-color": ("color", False),
}
# `check`'s options this module leaves to the full CLI (they need this machine's files, typer's help, or a load test).
# With VALUE_OPTIONS and FLAGS they are every option of gpudiag/cli/check/command.py: tests/cli/check/test_options.py
# says so.
# -i/--gpu too: a GPU this node may not have is refused naming those it has, which the full CLI reads from the
# service's snapshot (still through the service: no vendor library opened here).
HANDED_ON = ("--replay", "--baseline", "--kernel-log", "--stress-seconds", "--gpu", "-i", "--state-dir", "-h",
             "--help")


def parse(argv: list) -> "dict | None":
    """The options of a `check` this module can hand to the service, or None."""
    if not argv or argv[0] != "check":
        return None
    opts = {"only": [], "skip": [], "params": []}
    args = iter(argv[1:])
    for arg in args:
        if arg in FLAGS:
            key, value = FLAGS[arg]
            opts[key] = value
            continue
        name, eq, value = arg.partition("=")
        if name not in VALUE_OPTIONS or (eq and not name.startswith("--")):
            return None
        if not eq:
            value = next(args, None)
            if value is None:
                return None
        key = VALUE_OPTIONS[name]
        if not value and key in ("socket", "root", "profile"):
            return None  # `--socket ''` is the current directory to the full CLI: its corner, not ours
        if key in ("only", "skip", "params"):
            opts[key].append(value)
        else:
            opts[key] = value
    return _request(opts)


def _request(opts: dict) -> "dict | None":
    fmt = opts.get("format")
    if opts.get("json"):
        if fmt not in (None, "json"):
            return None  # a usage error: gpudiag.cli.app says so
        fmt = "json"
    profile = opts.get("profile")
    if fmt not in (None, *FORMATS) or opts.get("level", "1") != "1":
        return None
    if profile is not None and ("/" in profile or profile.endswith(".toml")):
        return None  # a profile file: read here, by the full CLI, never by the service
    timeout = None
    if "timeout" in opts:
        try:
            timeout = float(opts["timeout"])
        except ValueError:
            return None
        if not 0.1 <= timeout < float("inf"):
            return None  # typer's own message for what it refuses (min=0.1)
    wait = DEFAULT_DEADLINE_SECONDS if timeout is None else min(timeout, DEFAULT_DEADLINE_SECONDS)
    split = [[part.strip() for v in opts[key] for part in v.split(",") if part.strip()] for key in ("only", "skip")]
    if opts["only"] and not split[0]:
        return None  # `--only ''`: a usage error, which the full CLI words
    color = opts.get("color")
    if color is None:
        color = sys.stdout.isatty() and "NO_COLOR" not in os.environ
    # As `gpudiag check` through the service waits: the default deadline and a second more (then the service's own,
    # should it say its collection is still running: main()).
    return {"op": "check", "format": fmt or "text", "only": split[0], "skip": split[1], "params": opts["params"],
            "profile": profile, "verbose": bool(opts.get("verbose")), "color": color, "wait": wait + 1.0,
            "_socket": opts.get("socket") or _under_root(opts.get("root")), "_root": opts.get("root") or "/",
            "_timeout": timeout, "_direct": bool(opts.get("direct"))}


def _under_root(root: "str | None") -> str:
    if root is None or os.path.normpath(root) == "/":
        return DEFAULT_SOCKET
    return os.path.join(root, DEFAULT_SOCKET.lstrip("/"))


class NotListening(Exception):
    """No service to ask: no socket, nobody listening on it, or no permission to connect (gpudiag check then
    probes directly, without a word, as gpudiag/service/client.py's ask has it)."""


def ask(path: str, request: dict, timeout: float) -> "dict | None":
    """The service's answer, or None when none comes (too slow, too large, not JSON); NotListening when there is
    nobody to ask."""
    import json  # here: a command this module does not handle should not pay for them (~4 ms)
    import socket

    line = json.dumps(request, separators=(",", ":")).encode("utf-8") + b"\n"
    if len(line) > MAX_REQUEST_BYTES:
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(CONNECT_TIMEOUT_SECONDS)
        try:
            sock.connect(path)
        except OSError as exc:
            raise NotListening(str(exc)) from None
        until = time.monotonic() + timeout  # the whole answer is due by then, however it trickles
        sock.settimeout(timeout)
        sock.sendall(line)
        chunks, size = [], 0
        while True:
            left = until - time.monotonic()
            if left <= 0:
                return None
            sock.settimeout(left)
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            size += len(chunk)
            if size > MAX_ANSWER_BYTES:
                return None
            chunks.append(chunk)
        answer = json.loads(b"".join(chunks))
    except (OSError, ValueError):
        return None
    finally:
        sock.close()
    return answer if isinstance(answer, dict) else None


def _encodable() -> bool:
    """A stdout that cannot encode the checklist's symbols needs gpudiag.cli.shared.habits' stand-ins: the full CLI."""
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None)
        try:
            if encoding:  # none: a text buffer (a test's capture), which takes any character
                "·—→…×≥≤µ°".encode(encoding)
        except (UnicodeEncodeError, LookupError):
            return False
    return True


def main(argv: "list | None" = None) -> "int | None":
    """The exit code of a check the service judged, or None: not handled here (run gpudiag.cli.app)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if os.environ.get("GPUDIAG_DEBUG") or not _encodable():
        return None
    request = parse(argv)
    if request is None:
        return None
    path, root, timeout = request.pop("_socket"), request.pop("_root"), request.pop("_timeout")
    if request.pop("_direct"):
        return _direct(request, root, timeout)
    try:
        answer = ask(path, request, timeout=request["wait"] + 5.0)
        more = more_wait(answer, timeout) if answer is not None and answer.get("fallback") == "stale" else None
        if more is not None:  # its collection is still running: wait for that one, as long as the service says
            answer = ask(path, {**request, "wait": more}, timeout=more + 5.0)
    except NotListening:
        return _direct(request, root, timeout)
    if answer is None:
        return None
    if not answer.get("ok"):
        why = answer.get("fallback")
        if why not in ("failed", "stale"):
            return None  # busy, refused, an older service: the full CLI asks again and says why
        sys.stderr.write(f"gpudiag: WARNING: the service at {path} could not collect ({answer.get('error')}): "
                         f"probing directly\n" if why == "failed" else
                         f"gpudiag: WARNING: the service's collection did not finish ({answer.get('error')}): "
                         f"probing directly\n")
        return _direct(request, root, timeout)
    stdout, stderr, code = answer.get("stdout"), answer.get("stderr"), answer.get("exit")
    if (
        not isinstance(stdout, str)
        or not isinstance(stderr, str)
        or code not in (ExitCode.OK, ExitCode.FAILED, ExitCode.USAGE, ExitCode.NOTHING_PROBED)
    ):
        return None
    from gpudiag import stdout as out

    try:
        out.write(stdout, "the report")
    except out.ReaderLeft:
        return ExitCode.OK
    except out.Unwritable as exc:
        return unwritable(exc)
    sys.stderr.write(stderr)
    return code


def unwritable(exc: Exception) -> int:
    """The report could not be written whole (a full disk under the hook's TMPDIR): exit 4, never the verdict's 0 or
    1 — a caller that took exit 1 for "a check failed" drained healthy nodes (issue 24, item 16)."""
    try:
        sys.stderr.write(f"gpudiag: error: {exc}\n")
        sys.stderr.flush()
    except OSError:
        pass
    return ExitCode.INTERNAL


def _direct(request: dict, root: str, timeout: "float | None") -> int:
    from gpudiag.cli.check.direct import check

    return check(request, root, timeout)


def run() -> None:
    """The `gpudiag` console script and `python -m gpudiag`: the fast path, else the full CLI."""
    code = main()
    if code is None:
        from gpudiag.cli.app import run as full_cli

        full_cli()
    leave(code)


def leave(code: int) -> None:
    """End the process once the fast path has answered, without the interpreter's teardown.

    Tearing down what a direct check imports (the model, the checks, pynvml with the library still open from
    gpudiag/probe/nvml/early.py) took 29 ms of a 259 ms cold `check --direct` on the lab H200 (medians of 30
    interleaved runs, tests/fixtures/h200/recorded/direct-check-exit-ab.txt). Nothing is skipped that matters: the
    output is flushed here, the collector has shut its NVML session down, the fast path writes no file and leaves
    no atexit work but logging's flush of stderr (done here), and the kernel closes the process's descriptors as
    at any exit. A reader that left early (`gpudiag check | head -1`) is exit 0, as in gpudiag/cli/app.py; output
    that could not be written whole is exit 4 (gpudiag/stdout.py)."""
    from gpudiag import stdout

    try:
        stdout.finish()
    except stdout.ReaderLeft:
        code = ExitCode.OK
    except stdout.Unwritable as exc:
        code = unwritable(exc)
    try:
        sys.stderr.flush()
    except OSError:
        pass
    os._exit(code)
