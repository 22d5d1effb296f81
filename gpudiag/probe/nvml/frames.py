"""What the NVML-ahead process (ahead.py) sends the vendor child (ahead_answers.py, ahead_library.py): its frames'
format, the reads' keys, and pynvml's answers made plain; and the structs the NVIDIA backend passes by reference
(health.py), named once for the backend and the keys.

Nothing here imports pynvml, the model or ctypes (each costs the vendor child's Python time on a cold check's longest
chain; ctypes only where an answer is made plain, which the vendor child does only for a read it makes itself).

A pynvml struct pickles as a reference to its class in pynvml: unpickling one imports pynvml, whose module body alone
took 8.3-10.4 ms on the lab H100 (ahead_library.py says where). So the ahead process sends a struct as `Plain`: each
of its fields as reading it off the struct gave it (pynvml's own conversions done: a char array read as text), nested
structs, unions and arrays alike.
"""

from __future__ import annotations

import struct
from collections import namedtuple

FRAME = struct.Struct("<I")  # each frame: its length, then its pickle

HANDLE = "nvmlDeviceGetHandleByIndex"  # keyed by the GPU's index, as (HANDLE, (index,), ())

# health._read_sram: the SRAM ECC status struct and its version constant.
SRAM_CALL = "nvmlDeviceGetSramEccErrorStatus"
SRAM_STRUCT = ("c_nvmlEccSramErrorStatus_v1_t", "nvmlEccSramErrorStatus_v1")
# health.read_fabric: newest first, (struct, its version constant); v3 adds healthSummary (R550+), v2 the health mask.
# The unversioned call of R525-R535 fills the unversioned struct.
FABRIC_CALL = "nvmlDeviceGetGpuFabricInfoV"
FABRIC_VERSIONS = (("c_nvmlGpuFabricInfo_v3_t", "nvmlGpuFabricInfo_v3"),
                   ("c_nvmlGpuFabricInfo_v2_t", "nvmlGpuFabricInfo_v2"))
UNVERSIONED_FABRIC = ("nvmlDeviceGetGpuFabricInfo", "c_nvmlGpuFabricInfo_t")

# A struct passed by reference, as part of a read's key: pynvml's name for its type and the version set in it (None:
# the struct has none). (collections.namedtuple, not typing.NamedTuple: typing is not imported by then.)
StructArg = namedtuple("StructArg", ("name", "version"))


def hashable(args: tuple) -> tuple:
    """A call's arguments as part of its key (the field batch passes a list of IDs)."""
    return tuple(tuple(arg) if isinstance(arg, list) else arg for arg in args)


class Plain:
    """A pynvml struct (or one of its friendly objects) as the fields it had: read them as attributes."""

    def __init__(self, fields: dict) -> None:
        self.__dict__.update(fields)

    def __repr__(self) -> str:
        return f"Plain({self.__dict__!r})"


class Unsendable(ValueError):
    """A value with something in it that cannot leave its process (a pointer)."""


_SCALARS = (type(None), bool, int, float, str, bytes)


def plain(value: object) -> object:
    """`value` with every pynvml struct, union, array and friendly object in it made plain; Unsendable for a pointer
    or anything else not known here."""
    import ctypes

    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(plain(item) for item in value)
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, ctypes.Array):
        return [plain(item) for item in value]
    if isinstance(value, (ctypes.Structure, ctypes.Union)):
        return Plain({name: plain(getattr(value, name)) for name, *_ in type(value)._fields_})
    if isinstance(value, (ctypes._Pointer, ctypes._SimpleCData, ctypes._CFuncPtr)):
        raise Unsendable(f"{type(value).__name__} cannot be sent")  # (a pointer type pynvml made is pynvml's too)
    if type(value).__module__ == "pynvml" and hasattr(value, "__dict__"):  # nvmlFriendlyObject
        return Plain({name: plain(item) for name, item in vars(value).items()})
    raise Unsendable(f"{type(value).__name__} cannot be sent")


def module_image(nvml: object) -> tuple[dict, frozenset]:
    """What the backend reads off the pynvml module besides its calls: its constants (NVML_*, the struct versions,
    the field IDs), and the names of its functions and struct types (which it asks whether this pynvml has)."""
    constants, names = {}, set()
    for name, value in vars(nvml).items():
        if name.startswith("_"):
            continue
        if isinstance(value, (int, float, str)):
            constants[name] = value
        elif name.startswith(("nvml", "c_nvml")) and callable(value):
            names.add(name)
    return constants, frozenset(names)
