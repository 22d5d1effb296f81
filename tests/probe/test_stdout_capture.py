"""capture_stdout keeps Python and C output off stdout (fd 1) and hands it back as text."""

from __future__ import annotations

import ctypes
import os

import pytest

from gpudiag.probe.stdout_capture import capture_stdout


def test_python_and_raw_fd_writes_are_captured(capfd):
    with capture_stdout() as captured:
        print("from print()")
        os.write(1, b"from write(1)\n")
    print("after")

    assert "from print()" in captured.text and "from write(1)" in captured.text
    assert capfd.readouterr().out == "after\n"


def test_c_printf_is_captured(capfd):
    try:
        libc = ctypes.CDLL(None)
        libc.printf
    except (OSError, AttributeError):
        pytest.skip("no C library to call printf from")
    with capture_stdout() as captured:
        libc.printf(b"from printf %d\n", 42)  # C writes to fd 1 (through libc's buffer, flushed on exit)

    assert "from printf 42" in captured.text
    assert capfd.readouterr().out == ""


def test_stdout_is_restored_when_the_block_raises(capfd):
    with pytest.raises(KeyError), capture_stdout() as captured:
        print("noise before the error")
        raise KeyError("libamd_smi.so")
    print("data")

    assert captured.text == "noise before the error\n"
    assert capfd.readouterr().out == "data\n"
