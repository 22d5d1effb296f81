"""NVML's reads of a cold check made ahead, by a process that imports nothing but pynvml (gpudiag/cli/check/
early_collect.py forks it first): the driver's time, the longest chain of a cold check, starts before the model,
the backend and the rest of the probe are imported anywhere.

The reads are the NVIDIA backend's, in its order (backend.py, device.py and the modules it calls): the library's
open (nvmlInit, the versions, the GPU count), then for each GPU its handle, identity, firmware, field batch, driver
health (the SRAM ECC status and the fabric, structs passed by reference), PCIe, sensors, memory, modes, NVLinks, NUMA
node and processes; then every pair. Each is streamed to the vendor child as it is made, as a frame of its own:
- ("module", constants, names) first: what the backend reads off the pynvml module besides its calls
  (frames.module_image);
- ("begin", key) before a call and ("done", key, outcome) after it;
- ("system done",) once the library is open, ("gpu done", index) once a GPU's reads are made, ("pairs done",) at
  the end; ("mark", step, time.perf_counter()) after some steps, for the benchmark's timeline.
A key is (function, the GPUs' indices, the other arguments), a struct passed by reference among them as a
frames.StructArg. An outcome is ("value", what pynvml returned), ("filled", what it returned, the struct it filled),
("handle",) (a GPU's handle was had), ("error", the NVML return code, pynvml's text for it) or ("mismatch",)
(pynvml's NVMLLibraryMismatchError), every struct in it made plain (frames.py); or None for anything else (the
vendor child then makes that call itself).

The vendor child's backend makes every decision and asks every call in its own order, under its own deadline, of a
stand-in for pynvml that answers from these frames (ahead_library.py): it imports pynvml only to make a read this
process did not. A read listed here that the backend does not make is made for nothing.
tests/probe/nvml/test_ahead.py holds the two in step over the fake nodes.

Nothing is written but reads: the process changes nothing on the node.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import time
from collections.abc import Callable, Iterator

from gpudiag.probe.nvml.codes import ARGUMENT_VERSION_MISMATCH, FUNCTION_NOT_FOUND, LOST, NO_SUCH_LINK
from gpudiag.probe.nvml.field_ids import batch, device_fields, field_value
from gpudiag.probe.nvml.frames import (
    FABRIC_CALL,
    FABRIC_VERSIONS,
    FRAME,
    HANDLE,
    SRAM_CALL,
    SRAM_STRUCT,
    UNVERSIONED_FABRIC,
    StructArg,
    Unsendable,
    hashable,
    module_image,
    plain,
)


# A GPU's reads up to its field batch (device.read_identity, read_firmware); a string argument is a pynvml constant.
BEFORE_FIELDS = (
    ("nvmlDeviceGetPciInfo",), ("nvmlDeviceGetUUID",), ("nvmlDeviceGetName",), ("nvmlDeviceGetSerial",),
    ("nvmlDeviceGetArchitecture",), ("nvmlDeviceGetBoardPartNumber",), ("nvmlDeviceGetMinorNumber",),
    ("nvmlDeviceGetVbiosVersion",), ("nvmlDeviceGetInforomVersion", "NVML_INFOROM_OEM"),
    ("nvmlDeviceGetInforomVersion", "NVML_INFOROM_ECC"), ("nvmlDeviceGetInforomVersion", "NVML_INFOROM_POWER"),
    ("nvmlDeviceGetInforomImageVersion",),
)
# After it: health.read_driver_health (the flag, asked only of a pynvml that has it; then its struct reads,
# _health_struct_reads), device.read_pcie, read_remap_histogram, sensors.read_temperatures and read_power.
HEALTH_FLAG = "nvmlDeviceGetUnrepairableMemoryFlag_v1"
AFTER_HEALTH = (
    ("nvmlDeviceGetCurrPcieLinkGeneration",), ("nvmlDeviceGetCurrPcieLinkWidth",),
    ("nvmlDeviceGetMaxPcieLinkGeneration",), ("nvmlDeviceGetMaxPcieLinkWidth",),
    ("nvmlDeviceGetGpuMaxPcieLinkGeneration",), ("nvmlDeviceGetRowRemapperHistogram",),
    ("nvmlDeviceGetTemperature", "NVML_TEMPERATURE_GPU"),
    ("nvmlDeviceGetTemperatureThreshold", "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN"),
    ("nvmlDeviceGetTemperatureThreshold", "NVML_TEMPERATURE_THRESHOLD_SHUTDOWN"),
    ("nvmlDeviceGetTemperatureThreshold", "NVML_TEMPERATURE_THRESHOLD_GPU_MAX"),
    ("nvmlDeviceGetTemperatureThreshold", "NVML_TEMPERATURE_THRESHOLD_MEM_MAX"),
    ("nvmlDeviceGetPowerUsage",), ("nvmlDeviceGetEnforcedPowerLimit",), ("nvmlDeviceGetPowerManagementDefaultLimit",),
    ("nvmlDeviceGetPowerManagementLimitConstraints",),
)
# sensors.read_clocks after the clock-event reasons, then read_utilization.
CLOCKS = tuple((function, domain) for domain in ("NVML_CLOCK_GRAPHICS", "NVML_CLOCK_SM", "NVML_CLOCK_MEM")
               for function in ("nvmlDeviceGetClockInfo", "nvmlDeviceGetMaxClockInfo")) + (
    ("nvmlDeviceGetPerformanceState",), ("nvmlDeviceGetUtilizationRates",))
# device.read_memory_usage after the memory info, and read_modes.
MODES = (("nvmlDeviceGetBAR1MemoryInfo",), ("nvmlDeviceGetPersistenceMode",), ("nvmlDeviceGetComputeMode",),
         ("nvmlDeviceGetMigMode",))
# links.read_nvlinks: per link, its state, then (a link up) its far end, then its error counters.
FAR_END = ("nvmlDeviceGetNvLinkVersion", "nvmlDeviceGetNvLinkRemotePciInfo", "nvmlDeviceGetNvLinkRemoteDeviceType")
LINK_COUNTERS = ("NVML_NVLINK_ERROR_DL_REPLAY", "NVML_NVLINK_ERROR_DL_RECOVERY", "NVML_NVLINK_ERROR_DL_CRC_FLIT",
                 "NVML_NVLINK_ERROR_DL_CRC_DATA")
LINK_COUNT_FIELD = "NVML_FI_DEV_NVLINK_LINK_COUNT"
# device.read_affinity, read_processes.
LAST = (("nvmlDeviceGetNumaNodeId",), ("nvmlDeviceGetComputeRunningProcesses",),
        ("nvmlDeviceGetGraphicsRunningProcesses",))
P2P_CAPS = (0, 1, 2, 3)  # links.P2P_CAPS
# backend.open after nvmlInit: the versions, then the count.
SYSTEM = ("nvmlSystemGetDriverVersion", "nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetNVMLVersion",
          "nvmlDeviceGetCount")

# A call's outcome as the script sees it: (value, NVML return code or None).
Outcome = tuple


def gpu_reads(nvml: object, field_names: tuple[str, ...], link_errors: bool) -> Iterator[tuple]:
    """One GPU's reads in the backend's order, as (function, args) without the handle; sent each one's outcome."""

    def constants(spec: tuple) -> tuple:
        return tuple(getattr(nvml, arg) if isinstance(arg, str) else arg for arg in spec)

    for function, *args in BEFORE_FIELDS:
        yield function, constants(args)
    names, ids = batch(nvml, field_names)
    fields, _ = yield "nvmlDeviceGetFieldValues", (ids,)
    if hasattr(nvml, HEALTH_FLAG):
        yield HEALTH_FLAG, ()
    yield from _health_struct_reads(nvml)
    for function, *args in AFTER_HEALTH:
        yield function, constants(args)
    _, code = yield "nvmlDeviceGetCurrentClocksEventReasons", ()
    if code == FUNCTION_NOT_FOUND:
        yield "nvmlDeviceGetCurrentClocksThrottleReasons", ()
    for function, *args in CLOCKS:
        yield function, constants(args)
    version = getattr(nvml, "nvmlMemory_v2", None)
    code = FUNCTION_NOT_FOUND
    if version:
        _, code = yield "nvmlDeviceGetMemoryInfo", (version,)
    if code is not None:
        yield "nvmlDeviceGetMemoryInfo", ()
    for function, *args in MODES:
        yield function, constants(args)
    yield from _link_reads(nvml, _link_count(names, fields), link_errors)
    for function, *args in LAST:
        yield function, constants(args)


def _health_struct_reads(nvml: object) -> Iterator[tuple]:
    """health._read_sram and health.read_fabric's calls, each with the struct it passes by reference."""
    struct_name, version = SRAM_STRUCT[0], getattr(nvml, SRAM_STRUCT[1], None)
    if hasattr(nvml, struct_name) and version is not None and hasattr(nvml, SRAM_CALL):
        yield SRAM_CALL, (StructArg(struct_name, version),)
    if hasattr(nvml, FABRIC_CALL):
        for struct_name, version_name in FABRIC_VERSIONS:
            version = getattr(nvml, version_name, None)
            if not hasattr(nvml, struct_name) or version is None:
                continue
            _, code = yield FABRIC_CALL, (StructArg(struct_name, version),)
            if code == ARGUMENT_VERSION_MISMATCH:
                continue
            if code == FUNCTION_NOT_FOUND:
                break
            return
    function, struct_name = UNVERSIONED_FABRIC
    if hasattr(nvml, struct_name) and hasattr(nvml, function):
        yield function, (StructArg(struct_name, None),)


def _link_count(names: tuple[str, ...], fields: object) -> int | None:
    """The field batch's NVLink count, as fields.read_fields reads it; None where it has none."""
    if fields is None or LINK_COUNT_FIELD not in names:
        return None
    value = fields[names.index(LINK_COUNT_FIELD)]
    number = field_value(value) if value.nvmlReturn == 0 else None
    return None if number is None else int(number)


def _link_reads(nvml: object, link_count: int | None, link_errors: bool) -> Iterator[tuple]:
    limit = nvml.NVML_NVLINK_MAX_LINKS if link_count is None else min(link_count, nvml.NVML_NVLINK_MAX_LINKS)
    for link in range(limit):
        state, code = yield "nvmlDeviceGetNvLinkState", (link,)
        if code in NO_SUCH_LINK:
            if link_count is None:
                return
            continue
        if code is None and state == nvml.NVML_FEATURE_ENABLED:
            for function in FAR_END:
                yield function, (link,)
        if link_errors:
            for counter in LINK_COUNTERS:
                yield "nvmlDeviceGetNvLinkErrorCounter", (link, getattr(nvml, counter))


def pair_reads() -> Iterator[tuple]:
    """One pair's reads (links.probe_pair), as (function, args) without the two handles."""
    yield "nvmlDeviceGetTopologyCommonAncestor", ()
    for cap in P2P_CAPS:
        yield "nvmlDeviceGetP2PStatus", (cap,)


def read_ahead(writing: int, link_errors: bool = True) -> None:
    """In the NVML-ahead process: make the reads and stream them to `writing` (see the module's text); returns when
    every read is made, the library cannot be imported or opened, or the reader has gone. NVML's early start
    (early.py) is the caller's to begin, before it imports this module: the driver's initialisation then runs beside
    these imports and pynvml's."""
    from gpudiag.probe.nvml.early import WINDOW

    try:
        nvml = import_pynvml()
    except Exception:  # noqa: BLE001 - the vendor child's own import says what is wrong
        return
    send = _Sender(writing)
    try:
        send(("module", *module_image(nvml)))
        send(_mark("pynvml imported"))
        _, code = _make(nvml, send, ("nvmlInit", (), ()), ())
        if code is not None:
            return
        answers = {function: _make(nvml, send, (function, (), ()), ())[0] for function in SYSTEM}
        send(("system done",))
        send(_mark("NVML opened"))
        field_names = device_fields(_text(answers["nvmlSystemGetDriverVersion"]))
        handles: dict[int, object] = {}
        for index in range(answers["nvmlDeviceGetCount"] or 0):
            handle, code = _make(nvml, send, (HANDLE, (index,), ()), (index,))
            if code is None and _run(nvml, (handle,), (index,), gpu_reads(nvml, field_names, link_errors), send):
                handles[index] = handle
            send(("gpu done", index))
            send(_mark(f"GPU {index} read"))
        indices = sorted(handles)
        for position, a in enumerate(indices):
            for b in indices[position + 1:]:
                _run(nvml, (handles[a], handles[b]), (a, b), pair_reads(), send)
        send(("pairs done",))
        send(_mark("pairs read"))
        for label, at in zip(("early start begun", "library loaded", "NVML initialised", "GPUs opened"), WINDOW):
            send(("mark", label, at))  # the early start's thread (early.py), once it has ended
    except BrokenPipeError:
        return  # the vendor child has what it needs, or has gone


def import_pynvml() -> object:
    """pynvml, imported without ctypes.util, which it imports and never calls (nvidia-ml-py 12 and 13: `from
    ctypes.util import find_library`; the library is loaded by its name, libnvidia-ml.so.1). ctypes.util's own imports
    (shutil, subprocess, tempfile and theirs) were half of pynvml's import here: 17.8 ms against 8.1 (medians of 11)
    on the development machine, on this process's way to its first read. A stand-in stays in sys.modules only while
    pynvml is imported: anything imported later gets the real ctypes.util, and so does a call of the stand-in's
    find_library."""
    import sys
    import types

    if "ctypes.util" in sys.modules:
        import pynvml

        return pynvml

    def find_library(name: str) -> object:
        import ctypes.util

        return ctypes.util.find_library(name)

    stand_in = types.ModuleType("ctypes.util", "a stand-in while pynvml is imported (gpudiag/probe/nvml/ahead.py)")
    stand_in.find_library = find_library
    sys.modules["ctypes.util"] = stand_in
    try:
        import pynvml
    finally:
        if sys.modules.get("ctypes.util") is stand_in:
            del sys.modules["ctypes.util"]
    return pynvml


def _mark(label: str) -> tuple:
    """A step of this process, for the vendor child's marks (bench/check_vs_nvidia_smi.py's timeline)."""
    return "mark", label, time.perf_counter()


def _run(nvml: object, handles: tuple, indices: tuple, reads: Iterator[tuple], send: Callable) -> bool:
    """Make `reads` with `handles` in front of each, streaming each; False where the GPU turned out lost."""
    outcome: Outcome | None = None
    while True:
        try:
            function, args = reads.send(outcome) if outcome is not None else next(reads)
        except StopIteration:
            return True
        outcome = _make(nvml, send, (function, indices, hashable(args)), handles + tuple(args))
        if outcome[1] in LOST:  # the backend reads no more of a lost GPU
            return False


def _make(nvml: object, send: Callable, key: tuple, args: tuple) -> Outcome:
    """One read streamed: its key begun, the call made with `args`, its outcome sent; (value, code) for the script."""
    send(("begin", key))
    record, outcome = _call(nvml, key[0], args)
    send(("done", key, record))
    return outcome


def _call(nvml: object, function: str, args: tuple) -> tuple:
    """(the outcome to send, (value, code) for the script). A StructArg is passed as a new struct of its type, its
    version set, by reference; the outcome carries it filled."""
    filled = None
    try:
        passed = []
        for arg in args:
            if isinstance(arg, StructArg):
                filled = getattr(nvml, arg.name)()
                if arg.version is not None:
                    filled.version = arg.version
                arg = ctypes.byref(filled)
            passed.append(arg)
        value = getattr(nvml, function)(*passed)
    except nvml.NVMLError as exc:
        return ("error", exc.value, str(exc)), (None, exc.value)
    except nvml.NVMLLibraryMismatchError:
        return ("mismatch",), (None, FUNCTION_NOT_FOUND)
    except Exception:  # noqa: BLE001 - the backend makes this call itself and sees what it raises
        return None, (None, -1)
    try:
        if function == HANDLE:
            record = ("handle",)
        elif filled is not None:
            record = ("filled", plain(value), plain(filled))
        else:
            record = ("value", plain(value))
    except Unsendable:
        record = None  # the vendor child makes this one itself
    return record, (value, None)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class _Sender:
    """Frames written to the vendor child's pipe; a value that does not pickle goes as None (made there again)."""

    def __init__(self, writing: int) -> None:
        self.writing = writing

    def __call__(self, frame: tuple) -> None:
        try:
            data = pickle.dumps(frame)
        except Exception:  # noqa: BLE001 - e.g. a value of a type pickle does not know
            if frame[0] != "done":
                raise
            data = pickle.dumps(frame[:2] + (None,))
        data = FRAME.pack(len(data)) + data
        while data:
            data = data[os.write(self.writing, data):]
