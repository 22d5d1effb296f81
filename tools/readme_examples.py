"""The README's two failing checklists and its live-view example, printed by today's gpudiag over the test fakes.

The README shows what `gpudiag check` prints on a failing 8x H200 node (GPU 7 fell off the bus, GPUs 3 and 5 trained
at Gen4 in P0, GPU 2 has a pending row remap, GPU 6 has two NVLinks down, Xid 63 and Xid 79 in the kernel log: the
checklist leads with the lost GPU, what follows from it under it, and one block for the two slow links) and on
an 8x MI300X node whose GPU 3 sits in a Gen4 slot. Both are built here from the same fakes the tests use, so the
README can be checked against the code (tests/test_readme_examples.py) and rewritten when a change moves a count.

A README block is compared line by line with the output, less its first line when that is the header (hostname,
time and probe duration change every run); a line `[… what was left out …]` stands for any run of lines; a block
without one must be the start of the output.

Usage: python3 tools/readme_examples.py [--check | --write]   (from the repository root)
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

ELISION = re.compile(r"^\[… .* …\]$")
# The first line of each example block in the README: how the examples are found there.
NVIDIA_MARK = "GPUs: 8 × NVIDIA H200 — nvml: driver 550.127.05, CUDA 12.4"
AMD_MARK = "GPUs: 8 × AMD Instinct MI300X — amdsmi: driver 6.12.12, ROCm 7.0.2"
# `gpudiag top`'s pipe header (gpudiag/report/live_text.py): its example's first line.
TOP_MARK = ("#Time     gpu bus           pwr plim gtemp mtemp pclk mclk  sm mem     fb sbecc dbecc   remap pcig  pciw "
            "thrtl    verdict")


def _checklist(argv: list[str]) -> list[str]:
    from gpudiag.cli.app import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main([*argv, "--no-color"])
    return out.getvalue().splitlines()


def nvidia_example() -> list[str]:
    from tests.support.exporter_node import fake_root, xid_line
    from tests.support.fakes.fake_nvml import FakeNode, installed

    node = FakeNode.hgx_h200(8)
    node.gpus[7].lose_after_calls = 4  # enumerated, then lost: the first call it fails is nvmlDeviceGetSerial
    node.gpus[3].pcie_downtrained(4, 16)
    node.gpus[5].pcie_downtrained(4, 16)
    node.gpus[2].remap_pending = True
    node.gpus[6].nvlink_down(4, 5)
    with tempfile.TemporaryDirectory() as tmp:
        fake_root(Path(tmp), node, kmsg=(xid_line(2, 5_000_000, node.gpus[2].bus_id, 63),
                                         xid_line(3, 6_000_000, node.gpus[7].bus_id, 79)))
        with installed(node):
            return _checklist(["check", "--root", tmp])


def amd_example() -> list[str]:
    from tests.probe.amdsmi.test_end_to_end import node_root
    from tests.support.fakes import amd_node
    from tests.support.fakes.fake_amdsmi import installed

    node = amd_node.mi300x_node()
    amd_node.pcie_trained_gen4_on_gen4_board(node, 3)
    with tempfile.TemporaryDirectory() as tmp:
        root, log = node_root(Path(tmp), node)
        with installed(node):
            return _checklist(["check", "--root", str(root), "--kernel-log", str(log)])


def top_example() -> list[str]:
    """`gpudiag top -c 1 | cat` on a loaded 8x H200 node: GPU 2 with a row remap pending, GPU 3 at Gen4, GPU 5 in
    a thermal slowdown, GPU 7 lost (the kernel's Xid 79 follows from it). The pipe's lines as `top` writes them
    (the sampler and renderer it uses), read at a fixed time of day so that the README can be compared."""
    import time

    import pynvml

    from gpudiag.cli.top.source import Sampler
    from gpudiag.report.live_text import header_lines, sample_lines
    from tests.support.exporter_node import fake_root, xid_line
    from tests.support.fakes.fake_nvml import FakeNode, installed

    node = FakeNode.hgx_h200(8)
    for index, gpu in enumerate(node.gpus[:7]):  # a training job on every GPU
        gpu.power_mw, gpu.utilization, gpu.memory_used = 612_000 + 7_000 * index, (98, 41), 71_000 << 20
        gpu.compute_processes = [(4242 + index, 71_000 << 20)]
        gpu.clock_event_reasons = 0
        gpu.clocks[pynvml.NVML_CLOCK_SM] = gpu.clocks[pynvml.NVML_CLOCK_GRAPHICS] = 1980
        gpu.temperature, gpu.memory_temperature = 61 + index % 3, 67 + index % 2
    node.gpus[2].remap_pending, node.gpus[2].remapped_uncorrectable = True, 1
    node.gpus[3].pcie_downtrained(4, 16)
    node.gpus[5].thermal_slowdown()
    node.gpus[7].lose_after_calls = 4
    with tempfile.TemporaryDirectory() as tmp:
        fake_root(Path(tmp), node, kmsg=(xid_line(3, 6_000_000, node.gpus[7].bus_id, 79),))
        with installed(node):
            sampler = Sampler(Path(tmp), None, None, True, None, 1.0)
            try:
                sample = sampler.sample()
            finally:
                sampler.close()
    return header_lines() + sample_lines(sample.rows, time.mktime((2026, 12, 5, 3, 12, 40, 0, 0, -1)))


def _blocks(readme: list[str]) -> dict[str, tuple[int, int]]:
    """{mark: (first line, end line)} of the README code blocks holding each example (the header line included)."""
    found = {}
    for mark in (NVIDIA_MARK, AMD_MARK, TOP_MARK):
        at = readme.index(mark)
        start = at - 1 if readme[at - 1].startswith("gpudiag ") else at
        end = readme.index("```", at)
        found[mark] = (start, end)
    return found


def _body(block: list[str]) -> list[str]:
    return block[1:] if block and block[0].startswith("gpudiag ") else block


def differences(block: list[str], output: list[str]) -> list[str]:
    """How a README block differs from the output; empty when it agrees."""
    shown, printed = _body(block), _body(output)
    cut = next((i for i, line in enumerate(shown) if ELISION.match(line)), None)
    if cut is None:
        head, tail = shown, []
    else:
        head, tail = shown[:cut], shown[cut + 1:]
        while head and head[-1] == "":  # the blank line before the elision stands for the one between blocks
            head = head[:-1]
    problems = [f"line {n + 1}: README {want!r} vs printed {got!r}"
                for n, (want, got) in enumerate(zip(head, printed)) if want != got]
    if len(printed) < len(head) + len(tail):
        problems.append(f"the checklist printed {len(printed)} lines, fewer than the README shows")
    if tail and printed[-len(tail):] != tail:
        problems += [f"end: README {want!r} vs printed {got!r}"
                     for want, got in zip(tail, printed[-len(tail):]) if want != got]
    return problems


def _rewritten(block: list[str], output: list[str]) -> list[str]:
    header = block[:1] if block[0].startswith("gpudiag ") else []
    shown, printed = _body(block), _body(output)
    cut = next((i for i, line in enumerate(shown) if ELISION.match(line)), None)
    if cut is None:
        return header + printed[:len(shown)]
    head_length, tail_length = cut, len(shown) - cut - 1
    while head_length and shown[head_length - 1] == "":
        head_length -= 1  # the blank lines around the elision stay as the README has them
    return header + printed[:head_length] + shown[head_length:cut + 1] + printed[-tail_length:]


def main(argv: list[str]) -> int:
    path = REPO / "README.md"
    readme = path.read_text().splitlines()
    outputs = {NVIDIA_MARK: nvidia_example(), AMD_MARK: amd_example(), TOP_MARK: top_example()}
    if "--check" in argv or "--write" in argv:
        problems = []
        for mark, (start, end) in sorted(_blocks(readme).items(), key=lambda item: -item[1][0]):
            block = readme[start:end]
            found = differences(block, outputs[mark])
            problems += [f"{mark[:30]}…: {p}" for p in found]
            if found and "--write" in argv:
                readme[start:end] = _rewritten(block, outputs[mark])
        if "--write" in argv:
            path.write_text("\n".join(readme) + "\n")
            return 0
        print("\n".join(problems) or "the README's examples are what gpudiag prints")
        return 1 if problems else 0
    for lines in outputs.values():
        print("\n".join(lines), end="\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
