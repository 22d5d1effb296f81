"""pynvml's answers made plain for the NVML-ahead process's frames (gpudiag/probe/nvml/frames.py): every field as
reading it off the real struct gives it, through pickle, with no pynvml class left in them."""

from __future__ import annotations

import ctypes
import pickle

import pynvml
import pytest

from gpudiag.probe.nvml.frames import Plain, Unsendable, module_image, plain


def _no_pynvml_class(data: bytes) -> bool:
    return b"pynvml" not in data


def test_a_field_value_array_keeps_each_field_and_each_reading_of_its_union():
    values = (pynvml.c_nvmlFieldValue_t * 2)()
    values[0].fieldId, values[0].nvmlReturn, values[0].valueType = 1, 0, pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
    values[0].value.ullVal = 2**40 + 7
    values[1].fieldId, values[1].nvmlReturn = 2, pynvml.NVML_ERROR_NOT_SUPPORTED
    data = pickle.dumps(plain(values))
    assert _no_pynvml_class(data)
    first, second = pickle.loads(data)
    assert (first.fieldId, first.nvmlReturn, first.value.ullVal) == (1, 0, 2**40 + 7)
    assert first.value.uiVal == values[0].value.uiVal  # the union read every way, as the struct reads it
    assert (second.fieldId, second.nvmlReturn) == (2, pynvml.NVML_ERROR_NOT_SUPPORTED)


def test_a_struct_reads_as_pynvml_reads_it_text_decoded_and_arrays_as_lists():
    info = pynvml.nvmlPciInfo_t()
    info.busId = b"00000000:19:00.0"
    info.domain, info.bus = 0, 0x19
    made = pickle.loads(pickle.dumps(plain(info)))
    assert made.busId == info.busId == "00000000:19:00.0"  # pynvml's _PrintableStructure decodes char arrays
    assert (made.domain, made.bus) == (0, 0x19)
    assert not hasattr(made, "no_such_field")
    histogram = pynvml.c_nvmlRowRemapperHistogramValues()
    histogram.max, histogram.none = 8, 2
    assert (plain(histogram).max, plain(histogram).none) == (8, 2)
    assert plain((ctypes.c_uint * 3)(1, 2, 3)) == [1, 2, 3]


def test_a_friendly_object_and_plain_values_pass_and_a_pointer_does_not():
    friendly = pynvml.nvmlFriendlyObject({"pid": 41, "usedGpuMemory": None})
    made = plain([friendly])
    assert isinstance(made[0], Plain) and (made[0].pid, made[0].usedGpuMemory) == (41, None)
    assert plain({"a": (1, 2.5, "x", b"y", None, True)}) == {"a": (1, 2.5, "x", b"y", None, True)}
    with pytest.raises(Unsendable):
        plain(ctypes.pointer(ctypes.c_uint(1)))
    with pytest.raises(Unsendable):
        plain(object())


def test_the_module_image_has_what_the_backend_reads_off_pynvml():
    constants, names = module_image(pynvml)
    assert constants["NVML_ERROR_NOT_SUPPORTED"] == 3 and constants["NVML_TEMPERATURE_GPU"] == 0
    assert constants["nvmlMemory_v2"] == pynvml.nvmlMemory_v2  # a struct version, computed by pynvml
    assert {"nvmlInit", "nvmlDeviceGetFieldValues", "c_nvmlEccSramErrorStatus_v1_t"} <= names
    assert "NVMLError" not in names and "byref" not in names
    assert _no_pynvml_class(pickle.dumps((constants, names)))


def test_the_ahead_process_imports_a_whole_pynvml_without_ctypes_util():
    """gpudiag/probe/nvml/ahead.py import_pynvml, in a fresh interpreter: pynvml works, ctypes.util and its imports
    are not loaded, and pynvml's find_library still finds through the real ctypes.util."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from gpudiag.probe.nvml.ahead import import_pynvml\n"
        "nvml = import_pynvml()\n"
        "print(nvml.NVML_ERROR_NOT_SUPPORTED, callable(nvml.nvmlInit), 'ctypes.util' in sys.modules,"
        " 'subprocess' in sys.modules)\n"
        "nvml.find_library('c')\n"
        "print(sys.modules['ctypes.util'].__file__.endswith('util.py'))\n"  # the real one, loaded by the call
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["3", "True", "False", "False", "True"]
