"""`gpudiag top` on a terminal: a full-screen view redrawn at every sample, with plain ANSI sequences (no curses:
nothing to link, and the few sequences used are those every terminal since the VT100 and xterm's alternate screen
know).

The terminal is put in cbreak mode (keys arrive one by one, not echoed; Ctrl-C still interrupts) on the alternate
screen with the cursor hidden, and restored however the view ends: q (exit 0), Ctrl-C, SIGTERM or SIGHUP (exit 130,
as every interrupted gpudiag command), an error, or the last of `-c` samples, whose frame is then printed on the
normal screen so that it stays readable. Samples are read on a thread of their own, so that q answers at once even
while a collection waits on a hung GPU. Warnings logged meanwhile are shown on the view's last line and written to
stderr once the terminal is restored."""

from __future__ import annotations

import logging
import os
import queue
import select
import signal
import sys
import termios
import threading
import time
import tty
from typing import Optional

from gpudiag.exitcodes import ExitCode
from gpudiag.report.live_text import COLUMNS, header_lines, row_line, verdict_text

ENTER = "\x1b[?1049h\x1b[?25l"  # the alternate screen; the cursor hidden
LEAVE = "\x1b[?25h\x1b[?1049l"  # the cursor back; the normal screen, as it was
HOME, CLEAR_LINE, CLEAR_BELOW = "\x1b[H", "\x1b[K", "\x1b[J"
RED, YELLOW, GREEN, BOLD, RESET = "\x1b[31m", "\x1b[33m", "\x1b[32m", "\x1b[1m", "\x1b[0m"
COLUMNS_NO_VERDICT = COLUMNS[:-1]
MIN_HEAD = 17  # the GPU's index and bus ID: what the verdict is about stays on the line


def watch(sampler, first, delay: float, count: Optional[int]) -> int:
    """The view until q (0), the last of `count` samples (0) or an interrupt (KeyboardInterrupt, after the
    terminal is restored)."""
    color = "NO_COLOR" not in os.environ
    screen = _Terminal(sys.stdin.fileno(), sys.stdout.fileno())
    kept = _KeptWarnings()
    worker = _Worker(sampler, delay, None if count is None else count - 1)
    latest, shown, quit_by_key = first, 1, False
    try:
        with kept, screen:
            worker.start()
            screen.draw(frame(latest, delay, screen.size(), color, kept.last))
            while count is None or shown < count:
                event = screen.wait(worker.wake_fd)
                if event == "quit":
                    quit_by_key = True
                    break
                for sample in worker.take():
                    latest, shown = sample, shown + 1
                worker.raise_error()
                screen.draw(frame(latest, delay, screen.size(), color, kept.last))
    finally:
        worker.stop()
        kept.replay()
    if not quit_by_key:  # the -c samples are done: their last frame stays on the normal screen
        sys.stdout.write("\n".join(frame(latest, delay, (screen.size()[0], 10_000), color, None)) + "\n")
        sys.stdout.flush()
    return ExitCode.OK


def frame(sample, delay: float, size: tuple[int, int], color: bool, warning: Optional[str]) -> list[str]:
    """The view's lines for a terminal of `size` (columns, lines): a title, the node's verdict, the table, and
    the latest warning; rows beyond the height are counted instead of shown. On a narrow terminal the columns
    before the verdict give way (the throttle reasons first), never the verdict."""
    width, height = size
    clock = time.strftime("%H:%M:%S", time.localtime(sample.taken_at))
    gpus = sum(1 for row in sample.rows if not row.get("gone"))
    title = (f"gpudiag top · {sample.hostname or '?'} · {gpus} GPU{'' if gpus == 1 else 's'} · "
             f"collected by {sample.source} at {clock} · every {delay:g} s · q quits")
    node = verdict_text({"verdict": sample.node})
    lines = [_paint(title, BOLD, color, width), "node: "[:width] + _paint(node, _hue(node), color, width - 6), ""]
    room = max(1, height - len(lines) - 4)
    rows = sample.rows if len(sample.rows) <= room else sample.rows[:room - 1]
    heads = [" " + line[1:] for line in header_lines(COLUMNS_NO_VERDICT)] + [
        row_line(row, COLUMNS_NO_VERDICT) for row in rows]
    verdicts = [COLUMNS[-1].name, COLUMNS[-1].unit] + [verdict_text(row) for row in rows]
    keep = max(min(max(map(len, heads)), width - max(map(len, verdicts)) - 1), MIN_HEAD)
    for position, (head, verdict) in enumerate(zip(heads, verdicts)):
        head = head.ljust(keep) if len(head) <= keep else head[:keep - 1] + "…"
        hue = _hue(verdict) if position >= 2 else None
        lines.append(head[:width] + " "[:max(0, width - keep)] + _paint(verdict, hue, color, width - keep - 1))
    if len(rows) < len(sample.rows):
        lines.append(f" … {len(sample.rows) - len(rows)} more GPUs: a taller terminal shows them"[:width])
    if warning:
        lines += ["", _paint(warning, YELLOW, color, width)]
    return lines


def _hue(verdict: str) -> str:
    if verdict == "ok":
        return GREEN
    return YELLOW if verdict.startswith("warn:") else RED


def _paint(text: str, hue: Optional[str], color: bool, width: int) -> str:
    text = text[:max(0, width)]
    return f"{hue}{text}{RESET}" if hue and color and text else text


class _Terminal:
    """cbreak mode on the alternate screen, restored on leaving whatever ends the view. Frames are written to a
    duplicate of the terminal's descriptor: a direct collection points descriptor 1 at stderr while vendor
    libraries run (cli/shared/node_collect.stdout_to_stderr), which must not take the view with it."""

    def __init__(self, in_fd: int, out_fd: int):
        self.in_fd, self.out_fd, self._terminal_fd = in_fd, out_fd, out_fd
        self._saved: Optional[list] = None
        self._handlers: dict = {}
        self._wake_r, self._wake_w = os.pipe()

    def __enter__(self) -> "_Terminal":
        self.out_fd = os.dup(self.out_fd)
        self._saved = termios.tcgetattr(self.in_fd)
        tty.setcbreak(self.in_fd, termios.TCSANOW)
        for signum in (signal.SIGTERM, signal.SIGHUP):
            self._handlers[signum] = signal.signal(signum, _interrupt)
        self._handlers[signal.SIGWINCH] = signal.signal(signal.SIGWINCH, lambda *_: os.write(self._wake_w, b"r"))
        self._write(ENTER)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._write(LEAVE)
        except OSError:  # a terminal gone (SIGHUP): its settings are still restored where they can be
            pass
        try:
            termios.tcsetattr(self.in_fd, termios.TCSADRAIN, self._saved)
        except termios.error:
            pass
        for signum, handler in self._handlers.items():
            signal.signal(signum, handler)
        for fd in (self.out_fd, self._wake_r, self._wake_w):
            os.close(fd)
        self.out_fd = self._terminal_fd

    def size(self) -> tuple[int, int]:
        try:
            size = os.get_terminal_size(self.out_fd)
        except OSError:
            return 80, 24
        return size.columns, size.lines

    def draw(self, lines: list[str]) -> None:
        self._write(HOME + "".join(f"{line}{CLEAR_LINE}\r\n" for line in lines[:-1]) + lines[-1] + CLEAR_LINE
                    + CLEAR_BELOW)

    def wait(self, sample_fd: int) -> str:
        """"quit" on q; "sample" when a sample (or a resize) is there to draw."""
        while True:
            ready, _, _ = select.select([self.in_fd, sample_fd, self._wake_r], [], [])
            if self._wake_r in ready:
                os.read(self._wake_r, 4096)
                return "sample"
            if self.in_fd in ready:
                keys = os.read(self.in_fd, 64)
                if b"q" in keys.lower():
                    return "quit"
            if sample_fd in ready:
                os.read(sample_fd, 4096)
                return "sample"

    def _write(self, text: str) -> None:
        data = text.encode(sys.stdout.encoding or "utf-8", "replace")
        while data:
            data = data[os.write(self.out_fd, data):]


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM, SIGHUP: ended as Ctrl-C ends it, the terminal restored on the way out


class _Worker:
    """Takes the samples after the first, one every `delay` seconds, `left` of them (None: until stopped)."""

    def __init__(self, sampler, delay: float, left: Optional[int]):
        self._sampler, self._delay, self._left = sampler, delay, left
        self._samples: queue.Queue = queue.Queue()
        self._stopping = threading.Event()
        self._error: Optional[BaseException] = None
        self.wake_fd, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name="gpudiag-top", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=0.1)  # one stuck in a collection stays behind, a daemon (bounded by --timeout)

    def take(self) -> list:
        found = []
        while True:
            try:
                found.append(self._samples.get_nowait())
            except queue.Empty:
                return found

    def raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        due = time.monotonic()
        while self._left is None or self._left > 0:
            due = max(due + self._delay, time.monotonic())
            if self._stopping.wait(due - time.monotonic()):
                return
            try:
                sample = self._sampler.sample()
            except Exception as exc:  # noqa: BLE001 - told on the main thread, after the terminal is restored
                self._error = exc
                self._wake()
                return
            if self._stopping.is_set():
                return
            self._samples.put(sample)
            self._left = None if self._left is None else self._left - 1
            self._wake()

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"s")
        except OSError:
            pass


class _KeptWarnings(logging.Handler):
    """While the view is up, warnings go to its last line instead of stderr (they would scribble over the
    screen); once it is down they are written to stderr, each once, as gpudiag writes them."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.last: Optional[str] = None
        self._messages: list[str] = []
        self._moved: list[logging.Handler] = []

    def __enter__(self) -> "_KeptWarnings":
        root = logging.getLogger()
        self._moved = [h for h in root.handlers if isinstance(h, logging.StreamHandler)
                       and getattr(h, "stream", None) in (sys.stderr, sys.__stderr__)]
        for handler in self._moved:
            root.removeHandler(handler)
        root.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        root = logging.getLogger()
        root.removeHandler(self)
        for handler in self._moved:
            root.addHandler(handler)

    def emit(self, record: logging.LogRecord) -> None:
        message = f"gpudiag: {record.levelname}: {record.getMessage()}"
        self.last = message
        if message not in self._messages:
            self._messages.append(message)

    def replay(self) -> None:
        for message in self._messages:
            print(message, file=sys.stderr)
