"""The README's checklist examples are what gpudiag prints: the failing 8x H200 and MI300X nodes over the test
fakes (tools/readme_examples.py), and the passing node exactly as recorded on the lab's H200."""

from __future__ import annotations


from tests.support.paths import REPO
from tests.support.tools import load_tool

README = (REPO / "README.md").read_text().splitlines()


def _tool():
    return load_tool("readme_examples")


def test_the_failing_examples_are_what_the_checklist_prints():
    tool = _tool()
    outputs = {tool.NVIDIA_MARK: tool.nvidia_example(), tool.AMD_MARK: tool.amd_example(),
               tool.TOP_MARK: tool.top_example()}
    for mark, (start, end) in tool._blocks(README).items():
        assert tool.differences(README[start:end], outputs[mark]) == [], mark


def test_the_comparison_catches_a_changed_count():
    tool = _tool()
    start, end = tool._blocks(README)[tool.AMD_MARK]
    block = README[start:end]
    printed = list(block) + ["", "Checks by family:"]
    assert tool.differences(block, printed) == []
    printed[1] = printed[1].replace("1 failed", "2 failed")
    assert tool.differences(block, printed) != []


def test_the_passing_example_is_the_lab_recording():
    recorded = (REPO / "tests/fixtures/h200/recorded/check.txt").read_text().splitlines()
    at = README.index(recorded[0])
    assert README[at:at + len(recorded)] == recorded
