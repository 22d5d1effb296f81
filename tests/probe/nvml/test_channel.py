"""What joins the NVML process to its collector (gpudiag/probe/nvml/channel.py): each call is made by exactly one of
the two, answers arrive whole whatever their size, and a process that dies holding the lock does not hang the
collector."""

from __future__ import annotations

import os
import threading
import time

from gpudiag.probe.nvml.channel import NvmlChannel


def test_a_call_begun_is_the_nvml_process_s_and_once_the_collector_takes_one_it_begins_none():
    channel = NvmlChannel()
    try:
        assert channel.begin(0) and channel.begin(1)
        assert channel.take(0) and channel.take(1)  # begun there: their answers will come
        assert not channel.take(3)  # not begun: the collector's own
        assert not channel.begin(2) and not channel.begin(3)  # and the NVML process stops
    finally:
        channel.close()


def test_a_call_taken_first_is_never_begun():
    channel = NvmlChannel()
    try:
        assert not channel.take(0)
        assert not channel.begin(0)
    finally:
        channel.close()


def test_across_two_processes_each_call_has_exactly_one_maker():
    for wanted in (0, 50, 400):
        channel = NvmlChannel()
        pid = os.fork()
        if pid == 0:  # the NVML process: begins calls in order until stopped, tells how many it began
            began = 0
            while began < 1000 and channel.begin(began):
                began += 1
            channel.for_nvml_process().send(str(began).encode())
            os._exit(0)
        channel.for_collector()
        theirs = channel.take(wanted)
        began = int(channel.receive())
        os.waitpid(pid, 0)
        channel.close()
        assert theirs == (began > wanted), (wanted, theirs, began)
        assert began < 1000  # it stopped at the collector's take


def test_answers_arrive_whole_whatever_their_size_and_none_once_the_sender_ended():
    channel = NvmlChannel()
    pid = os.fork()
    if pid == 0:
        sending = channel.for_nvml_process()
        for size in (0, 1, 65536 + 7, 3 << 20):
            sending.send(bytes([size % 251]) * size)
        os._exit(0)
    channel.for_collector()
    got = [channel.receive() for _ in range(5)]
    os.waitpid(pid, 0)
    channel.close()
    assert [len(answer) for answer in got[:4]] == [0, 1, 65536 + 7, 3 << 20]
    assert got[3] == bytes([(3 << 20) % 251]) * (3 << 20)
    assert got[4] is None


def test_a_process_that_died_holding_the_lock_does_not_hang_the_collector():
    channel = NvmlChannel()
    pid = os.fork()
    if pid == 0:  # takes the lock's byte and dies with it
        with channel._locked():
            os._exit(0)
    os.waitpid(pid, 0)
    channel.for_collector()
    threading.Timer(0.3, lambda: setattr(channel, "gone", True)).start()  # as the answers' reader sets it at EOF
    started = time.monotonic()
    assert not channel.take(0)
    assert 0.2 < time.monotonic() - started < 5
    channel.close()
