"""Copy bandwidth: pinned host memory to and from each GPU (the PCIe link), and between every pair of GPUs with peer
access enabled (NVLink / XGMI where present, PCIe otherwise)."""

from __future__ import annotations

import logging
import os
from contextlib import ExitStack, contextmanager
from typing import Callable, Iterator, Optional

from gpudiag.active.runtime import Resources
from gpudiag.active.session import Session, recording
from gpudiag.model import CopyBandwidth, DeviceSnapshot, PeerBandwidth

log = logging.getLogger(__name__)


def _gb_per_second(nbytes: int, seconds: float) -> float:
    return round(nbytes / max(seconds, 1e-9) / 1e9, 2)


def timed_copies(session: Session, result: CopyBandwidth, nbytes: int, stream: int, start: int, end: int,
                 issue: Callable[[], None], during: Optional[Callable[[], None]] = None,
                 repeats: Optional[int] = None) -> None:
    """One warm-up copy (the first copy to a buffer pays for mapping it), then timed batches of `repeats` copies
    (default options.copy_repeats); `result` (a CopyBandwidth or HbmBandwidth) keeps the best batch so far, so a stop
    between batches keeps what was measured. `during` runs on the host while each batch is in flight (after it is
    queued, before it is waited for); GPU events time the copies, so it costs them nothing."""
    runtime, options = session.runtime, session.options
    repeats = options.copy_repeats if repeats is None else repeats
    result.bytes_per_copy = nbytes
    session.check()
    issue()
    runtime.stream_synchronize(stream)
    for _ in range(options.copy_batches):
        session.check()
        runtime.event_record(start, stream)
        for _ in range(repeats):
            issue()
        runtime.event_record(end, stream)
        if during is not None:
            during()
        runtime.event_synchronize(end)
        seconds = runtime.event_elapsed_ms(start, end) / 1000
        rate = _gb_per_second(nbytes * repeats, seconds)
        result.gb_per_second = max(rate, result.gb_per_second or 0.0)
        result.copies_timed += repeats


@contextmanager
def near(cpus: Optional[list[int]]) -> Iterator[None]:
    """Run this thread on the GPU's local CPUs: pinned memory is then allocated (first touch) on the GPU's NUMA node,
    and the copies measure the GPU's own link, not the link between sockets as well."""
    if not cpus or not hasattr(os, "sched_setaffinity"):
        yield
        return
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, cpus)
    except OSError as exc:  # CPUs outside this cgroup's cpuset
        log.debug("could not bind to CPUs %s: %s", cpus, exc)
        yield
        return
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def host_copies(session: Session, ordinal: int, device: DeviceSnapshot) -> tuple[CopyBandwidth, CopyBandwidth]:
    """Host → device and device → host over the same pinned buffer."""
    runtime, nbytes = session.runtime, session.options.copy_bytes
    h2d, d2h = CopyBandwidth(), CopyBandwidth()
    with recording("active.pcie", h2d, d2h), near(device.cpu_affinity), Resources(runtime, ordinal) as res:
        session.check()
        host, memory, stream = res.alloc_host(nbytes), res.alloc(nbytes), res.stream()
        start, end = res.event(), res.event()
        with recording("active.pcie_h2d", h2d):
            timed_copies(session, h2d, nbytes, stream, start, end,
                         lambda: runtime.copy_h2d_async(memory, host, nbytes, stream),
                         _link_sampler(session, device, h2d))
        with recording("active.pcie_d2h", d2h):
            timed_copies(session, d2h, nbytes, stream, start, end,
                         lambda: runtime.copy_d2h_async(host, memory, nbytes, stream),
                         _link_sampler(session, device, d2h))
    return h2d, d2h


def _link_sampler(session: Session, device: DeviceSnapshot, result: CopyBandwidth) -> Optional[Callable[[], None]]:
    """Reads the PCIe link through the probe layer while copies run over it, keeping the best generation and width
    seen: an idle GPU may have lowered its link to save power (NVIDIA low P-states, amdgpu link DPM), a loaded one
    runs it at what it trained at. The pcie.link_* checks judge this reading when it exists."""
    reader = session.options.reader
    if reader is None:
        return None

    def sample() -> None:
        try:
            pcie = reader(device).pcie
        except Exception as exc:  # noqa: BLE001 - a failed read leaves the link unobserved, the copies go on
            log.debug("reading the link of GPU %d under load failed: %s", device.index, exc)
            return
        if pcie.current_generation is not None:
            result.link_generation = max(pcie.current_generation, result.link_generation or 0)
        if pcie.current_width is not None:
            result.link_width = max(pcie.current_width, result.link_width or 0)

    return sample


def peer_matrix(session: Session, members: list[tuple[int, int]]) -> list[PeerBandwidth]:
    """Every ordered pair of `members` ((snapshot index, runtime ordinal)), and both directions at once for each
    unordered pair. Peer access is enabled both ways wherever the runtime allows it."""
    runtime, nbytes = session.runtime, session.options.p2p_bytes
    ordinal_of = dict(members)
    results = [PeerBandwidth(src=a, dst=b) for a, _ in members for b, _ in members if a != b]
    with ExitStack() as stack, recording("active.p2p", *[r.copy for r in results]):
        buffers, streams, events = {}, {}, {}
        for _, ordinal in members:
            res = stack.enter_context(Resources(runtime, ordinal))
            buffers[ordinal], streams[ordinal] = res.alloc(nbytes), res.stream()
            events[ordinal] = (res.event(), res.event())
        access = _enable_peer_access(session, [o for _, o in members])
        for done, result in enumerate(results, 1):
            src, dst = ordinal_of[result.src], ordinal_of[result.dst]
            result.p2p_enabled = access[(src, dst)]
            with recording("active.p2p", result.copy):
                runtime.use(src)
                timed_copies(session, result.copy, nbytes, streams[src], *events[src],
                             lambda: runtime.copy_peer_async(buffers[dst], dst, buffers[src], src, nbytes,
                                                             streams[src]))
            if result.src < result.dst:
                with recording("active.p2p_bidirectional", result.copy):
                    result.bidirectional_gb_per_second = _both_ways(session, src, dst, buffers, streams, events)
            session.progress.remaining.advance("p2p", done / len(results))
            session.progress.say(f"GPU {result.src} -> GPU {result.dst}: {_figure(result)}")
    return results


def _enable_peer_access(session: Session, ordinals: list[int]) -> dict[tuple[int, int], bool]:
    runtime = session.runtime
    access = {}
    for a in ordinals:
        runtime.use(a)
        for b in ordinals:
            if a != b:
                access[(a, b)] = runtime.can_access_peer(a, b)
                if access[(a, b)]:
                    runtime.enable_peer_access(b)
    return access


def _both_ways(session: Session, a: int, b: int, buffers: dict[int, int], streams: dict[int, int],
               events: dict[int, tuple[int, int]]) -> float:
    """a → b and b → a at once: each direction is timed by its own device's events (events of two devices cannot
    be compared) while both run, and the two rates are added."""
    runtime, options, nbytes = session.runtime, session.options, session.options.p2p_bytes
    session.check()
    for src, dst in ((a, b), (b, a)):  # warm-up
        runtime.use(src)
        runtime.copy_peer_async(buffers[dst], dst, buffers[src], src, nbytes, streams[src])
    for src, dst in ((a, b), (b, a)):
        runtime.use(src)
        runtime.stream_synchronize(streams[src])
        runtime.event_record(events[src][0], streams[src])
    for _ in range(options.copy_repeats):
        for src, dst in ((a, b), (b, a)):
            runtime.use(src)
            runtime.copy_peer_async(buffers[dst], dst, buffers[src], src, nbytes, streams[src])
    total = 0.0
    for src in (a, b):
        runtime.use(src)
        start, end = events[src]
        runtime.event_record(end, streams[src])
        runtime.event_synchronize(end)
        total += _gb_per_second(nbytes * options.copy_repeats, runtime.event_elapsed_ms(start, end) / 1000)
    return round(total, 2)


def _figure(result: PeerBandwidth) -> str:
    if result.copy.gb_per_second is None:
        return f"no figure ({result.copy.error.message if result.copy.error else 'not measured'})"
    both = f", {result.bidirectional_gb_per_second} GB/s both ways" if result.bidirectional_gb_per_second else ""
    return f"{result.copy.gb_per_second} GB/s{both}{'' if result.p2p_enabled else ' (no peer access)'}"
