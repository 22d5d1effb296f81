"""What every load test shares while it runs: the runtime, the options, the stop signal (deadline or Ctrl-C), the
progress lines on stderr, and the rule that turns whatever ended a test early into that test's recorded error."""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Optional, TextIO

from gpudiag.active.eta import Remaining, human
from gpudiag.active.options import ActiveOptions
from gpudiag.active.runtime import GpuCallError, GpuRuntime, RuntimeUnavailable
from gpudiag.model import DeviceSnapshot, ErrorKind, ProbeError, TelemetrySample

log = logging.getLogger(__name__)


class Stopped(Exception):
    """The deadline passed or the run was interrupted: the test ends early and keeps what it measured."""


class Progress:
    """`gpudiag: active: …` lines on the progress stream (stderr), whole lines even from parallel tests; once the
    run is planned each ends with what is left of it ("(about 1 min 5 s left)": active/eta.py)."""

    def __init__(self, stream: Optional[TextIO], remaining: Optional[Remaining] = None):
        self._stream = stream
        self._lock = threading.Lock()
        self.remaining = remaining or Remaining()

    def say(self, message: str) -> None:
        if self._stream is None:
            return
        left = self.remaining.seconds_left()
        with self._lock:
            self._stream.write(f"gpudiag: active: {message}{'' if left is None else f' (about {human(left)} left)'}\n")
            self._stream.flush()


@dataclass
class Control:
    """Shared by the caller's thread (which watches the deadline and Ctrl-C) and the test threads."""

    until: Optional[float]  # time.monotonic() deadline
    stop: threading.Event = field(default_factory=threading.Event)
    reason: str = "stopped"

    def request_stop(self, reason: str) -> None:
        self.reason = reason
        self.stop.set()

    def stopping(self) -> Optional[str]:
        if self.stop.is_set():
            return self.reason
        if self.until is not None and time.monotonic() >= self.until:
            return "deadline reached"
        return None


@dataclass
class Session:
    """One load test's runtime, options, stop control and progress lines."""
    runtime: GpuRuntime
    options: ActiveOptions
    control: Control
    progress: Progress

    def check(self) -> None:
        """Raise Stopped when the run must end; tests call it between steps."""
        reason = self.control.stopping()
        if reason:
            raise Stopped(reason)

    def remaining(self) -> Optional[float]:
        return None if self.control.until is None else max(0.0, self.control.until - time.monotonic())


def stopped_error(source: str, reason: str) -> ProbeError:
    return ProbeError(source, ErrorKind.TIMEOUT, f"stopped early: {reason}")


@contextmanager
def recording(source: str, *results: object) -> Iterator[None]:
    """Whatever ends the block early becomes the `.error` of each result that has none yet: Stopped (TIMEOUT),
    a runtime error (the call and the vendor's error name), or a bug (logged with its traceback)."""
    error: Optional[ProbeError] = None
    try:
        yield
    except Stopped as stop:
        error = stopped_error(source, str(stop))
    except (GpuCallError, RuntimeUnavailable) as exc:
        error = exc.probe_error()
    except Exception as exc:  # noqa: BLE001 - a test's own bug must not take the others down
        log.exception("%s failed", source)
        error = ProbeError(source, ErrorKind.ERROR, f"{type(exc).__name__}: {exc}")
    if error is not None:
        for result in results:
            if getattr(result, "error") is None:
                setattr(result, "error", error)


def telemetry_of(device: DeviceSnapshot, seconds: float) -> TelemetrySample:
    """The sensors the stress watches, from a fresh read of the device."""
    sensor = next((device.temperatures[name] for name in ("gpu", "hotspot", "edge") if name in device.temperatures),
                  None)
    return TelemetrySample(
        seconds=round(seconds, 3),
        sm_clock_mhz=device.clocks.sm_mhz if device.clocks.sm_mhz is not None else device.clocks.graphics_mhz,
        memory_clock_mhz=device.clocks.memory_mhz,
        temperature_celsius=sensor.current_celsius if sensor else None,
        power_watts=device.power.draw_watts,
        throttle_reasons=device.clocks.throttle_reasons,
        power_limit_watts=device.power.limit_watts,
    )


def ecc_counts(session: Session, device: DeviceSnapshot, fresh: bool) -> tuple[Optional[int], Optional[int]]:
    """Volatile (since driver load) corrected and uncorrected ECC counts: read live when a reader is given, else
    the snapshot's for `before` and nothing for `after`."""
    reader = session.options.reader
    if reader is None:
        return (None, None) if fresh else (device.ecc.volatile_corrected, device.ecc.volatile_uncorrected)
    try:
        ecc = reader(device).ecc
    except Exception as exc:  # noqa: BLE001 - the test stands without the counters
        session.progress.say(f"GPU {device.index}: ECC counters could not be read: {exc}")
        return None, None
    return ecc.volatile_corrected, ecc.volatile_uncorrected
