"""The `check` request: the service judges and renders a level-1 `gpudiag check` on a client's behalf, so that the
client (gpudiag/cli/check/fastpath.py) imports neither typer nor the model nor the checks (docs/service.md "The fast
path").

What a client may send is only what needs nothing from its filesystem: the selection, the output format, --verbose,
colour, and a *shipped* profile's name with `-p KEY=VALUE` overrides. A profile named by a path is refused: the
service must never read a file a client names (it would be a file-read primitive as the service's user). The answer
is the rendered report and the exit code `gpudiag check` would give, made by the same function the direct path uses
(gpudiag/report/verdict.py) with the same `since` and `collected_by: "service"`.
"""

from __future__ import annotations

import json
import threading
from typing import Callable, Optional

from gpudiag.exitcodes import ExitCode
from gpudiag.service.protocol import MAX_AGE_SECONDS, ProtocolError

FORMATS = ("text", "json", "junit")
MAX_IDS = 64  # --only/--skip entries
MAX_PARAMS = 32
MAX_TEXT = 256  # one check ID, profile name or KEY=VALUE
MAX_RENDERED_BYTES = 16 << 20  # the answer's cap: a report for a large node is a few hundred kB


def _strings(request: dict, key: str, limit: int) -> list[str]:
    value = request.get(key) or []
    if not isinstance(value, list) or len(value) > limit or not all(
            isinstance(v, str) and 0 < len(v) <= MAX_TEXT and "\x00" not in v for v in value):
        raise ProtocolError(f"{key}: expected at most {limit} strings of at most {MAX_TEXT} characters")
    return value


def _flag(request: dict, key: str) -> bool:
    value = request.get(key, False)
    if not isinstance(value, bool):
        raise ProtocolError(f"{key}: expected true or false")
    return value


def parse_check(request: dict) -> dict:
    """The request's fields, validated (a ProtocolError goes back to the peer)."""
    from gpudiag.expect.profile import is_profile_path

    fmt = request.get("format", "text")
    if fmt not in FORMATS:
        raise ProtocolError(f"format: expected one of {', '.join(FORMATS)}")
    profile = request.get("profile")
    if profile is not None and (not isinstance(profile, str) or not 0 < len(profile) <= MAX_TEXT
                                or "\x00" in profile or is_profile_path(profile)):
        raise ProtocolError("profile: only a shipped profile's name (a profile file is read by the client)")
    return {"only": _strings(request, "only", MAX_IDS), "skip": _strings(request, "skip", MAX_IDS),
            "params": _strings(request, "params", MAX_PARAMS), "profile": profile, "format": fmt,
            "verbose": _flag(request, "verbose"), "color": _flag(request, "color")}


class Answers:
    """The answers made from the latest collection, by request: ten checks a second with the same options judge and
    render once per collection. Only answers that do not depend on the moment they are made are kept — JSON and
    JUnit, and a text checklist without a "failing since …, 6 h" line."""

    MAX_ENTRIES = 32  # distinct option sets per collection; more are answered, not kept
    MAX_BYTES = 32 << 20  # and in all: a few large reports, not 32 of the largest allowed

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._collection: object = None
        self._answers: dict[str, bytes] = {}

    def get(self, collection, key: str) -> Optional[bytes]:
        with self._lock:
            return self._answers.get(key) if self._collection is collection else None

    def put(self, collection, key: str, answer: bytes) -> None:
        with self._lock:
            if self._collection is not collection:  # held by reference: a newer collection may reuse a freed id
                self._collection, self._answers = collection, {}
            kept = sum(len(a) for a in self._answers.values())
            if len(self._answers) < self.MAX_ENTRIES and kept + len(answer) <= self.MAX_BYTES:
                self._answers[key] = answer


def answer_check(fields: dict, collections, wait: float, open_checks, answers: Optional[Answers] = None,
                 deadline: Callable[[], dict] = dict) -> bytes:
    """The answer line: {"ok": true, "exit": N, "stdout": ..., "stderr": ...}, or {"ok": false, "error": ...,
    "fallback": "failed" | "stale", and `deadline()`: the service's deadline and whether it is still collecting}
    when there is no fresh collection (the client then waits for the running one or probes directly, as
    `gpudiag check` does when the service's collection did not finish)."""
    from gpudiag.report.selection import select_checks
    from gpudiag.expect.profile import ProfileError, load_expectations

    try:
        select_checks(fields["only"], fields["skip"])
        expectations = None  # the defaults, as `gpudiag check` without a profile or -p
        if fields["profile"] is not None or fields["params"]:
            expectations = load_expectations(fields["profile"], fields["params"])
    except (ValueError, ProfileError) as exc:  # the same one line and exit 2 as gpudiag check's own
        return _line({"ok": True, "exit": ExitCode.USAGE, "stdout": "", "stderr": f"gpudiag: error: {exc}\n"})

    collection, problem = collections.get(MAX_AGE_SECONDS, wait)
    if collection is None or problem is not None:
        return _line({"ok": False, "error": problem or "no collection yet",
                      "fallback": "failed" if collection is None else "stale", **deadline()})
    open_now = open_checks()
    key = json.dumps([fields, open_now], sort_keys=True, default=str)
    cached = answers.get(collection, key) if answers is not None else None
    if cached is not None:
        return cached
    answer, timeless = _verdict(fields, collection.snapshot, expectations, open_now)
    if answers is not None and timeless:
        answers.put(collection, key, answer)
    return answer


def _verdict(fields: dict, snapshot, expectations, open_checks: list) -> tuple[bytes, bool]:
    """(the answer, whether it would be the same made later from the same collection)."""
    from gpudiag.report.verdict import NOTHING_PROBED, ending, judge_and_render

    results, text = judge_and_render(snapshot, expectations, fields["only"], fields["skip"], open_checks, "service",
                                     fields["format"], fields["verbose"], fields["color"])
    if len(text) > MAX_RENDERED_BYTES:
        return _line({"ok": False, "error": "report too large to answer"}), False
    code, warning = ending(snapshot, results)  # what gpudiag check itself would say (report/verdict.tell_ending)
    stderr = f"gpudiag: WARNING: {warning}\n" if warning else f"gpudiag: error: {NOTHING_PROBED}\n" if code == 3 else ""
    timeless = fields["format"] != "text" or not any(r.since for r in results)  # text: "since …, 6 h" ages
    return _line({"ok": True, "exit": code, "stdout": text, "stderr": stderr}), timeless


def _line(message: dict) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode("utf-8") + b"\n"
