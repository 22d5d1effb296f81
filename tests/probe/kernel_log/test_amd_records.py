"""amdgpu's records as the kernel wrote them (issue 32): a record of two lines read as one (the SMU's failures),
page-fault lines of GPUs that fault at once each on the GPU it names, and a serial console's log. The records are the
field corpus's (tests/fixtures/field/amd/, each with its source), verbatim; the hostile ones are built from them."""

from __future__ import annotations

import pytest

from gpudiag.model import KernelLogInfo
from gpudiag.probe.kernel_log.events import EventReader, parse_event
from gpudiag.probe.kernel_log.formats import split_line, wall_seconds
from gpudiag.probe.kernel_log.reader import read_kernel_log, scan
from tests.support.field_corpus import records

CORPUS = {r.id: r.data["log"] for r in records()}


def _scan(text: str) -> KernelLogInfo:
    return scan(text.split("\n"), KernelLogInfo(source="test"))


def _kinds(info: KernelLogInfo) -> list[tuple[str, str | None]]:
    return [(e.kind, e.pci_bus_id) for e in info.events]


# -- the SMU stops answering: one record of two lines ------------------------------------------------------------

# ishitatsuyuki/acominer#9 (RX 480): smu7_smumgr.c's pr_info("\n failed to send message %x ret is %d \n"), as dmesg
# prints it: the prefix alone, then the text indented to the message column, with the text's own leading space.
ACOMINER = CORPUS["acominer-9-smu-failed-to-send-message"]


def test_the_two_line_smu_record_is_read_as_one_record():
    info = _scan(ACOMINER)
    assert _kinds(info) == [("smu_unresponsive", None)] * 4
    assert info.events[0].message == "amdgpu: failed to send message 200 ret is 0"
    assert info.unreadable_lines == 0


def test_the_two_line_smu_record_from_kmsg_is_read_as_one_record():
    """The same record as /dev/kmsg hands it over: one read, the newlines escaped, at the info level (pr_info)."""
    lines = ["6,2301,442366409593,-;amdgpu: \\x0a failed to send message 200 ret is 0 ",
             "6,2302,442368471903,-;amdgpu: \\x0a last message was failed ret is 0"]
    assert _kinds(scan(lines, KernelLogInfo(source="kmsg"))) == [("smu_unresponsive", None)] * 2
    reader = EventReader()
    assert [e.kind for e in reader.feed(split_line(lines[0]))] == ["smu_unresponsive"]


def test_the_two_line_smu_record_of_newer_kernels_at_the_error_level_is_one_event():
    """Newer smu7_smumgr.c prints it with dev_info(adev->dev, "\\nlast message was failed ret is %d\\n"): the device's
    prefix alone on the first line. At the error level too, the head is no unrecognised error of its own."""
    for level in (6, 3):
        lines = [f"{level},7,442368471903,-;amdgpu 0000:01:00.0: \\x0alast message was failed ret is 0"]
        assert _kinds(scan(lines, KernelLogInfo(source="kmsg"))) == [("smu_unresponsive", "0000:01:00.0")]
    dmesg_x = "kern  :err   : [442366.409593] amdgpu:\n" + " " * 32 + " failed to send message 200 ret is 0"
    assert _kinds(_scan(dmesg_x)) == [("smu_unresponsive", None)]


@pytest.mark.parametrize("later", [
    "NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus.",
    "amdgpu 0000:03:00.0: amdgpu: GPU reset(1) failed",
    "ring gfx_0.0.0 timeout, signaled seq=1, emitted seq=2",
])
def test_the_later_line_of_an_amdgpu_head_is_read_only_as_an_smu_failure(later):
    """The head opens a record whose next line is its text: only the SMU's failures are read from it, and nothing
    after a newline ever starts a record of its own."""
    info = _scan(f"[442366.409593] amdgpu:\n                 {later}")
    assert info.events == [] and info.unreadable_lines == 0


def test_a_users_record_continued_by_an_smu_failure_is_no_driver_record():
    """A segfault report (tests/fixtures/kmsg-hostile/) whose file name's later line says what amdgpu would."""
    text = ("[57607.268910] x\n               failed to send message 200 ret is 0\n"
            "               amdgpu:\n                 failed to send message 200 ret is 0")
    assert _scan(text).events == []


def test_a_line_indented_past_the_message_column_is_still_the_records_text():
    """util-linux indents to the message column; the text may start with spaces of its own. Such a line is the
    record's (here a segfault report's file name), not an unreadable line nor a record."""
    text = "[57607.268910] x\n                   NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus."
    info = _scan(text)
    assert info.events == [] and info.unreadable_lines == 0, info.first_unreadable


def test_an_smu_answer_is_not_an_unanswered_message():
    """A response other than none is the SMU's answer (0xFE: the message is not supported), not a hang."""
    assert parse_event("amdgpu 0000:e3:00.0: amdgpu: Failed to send message 0x26, response 0xfe") is None
    assert parse_event("amdgpu: failed to send message 200 ret is 255") is None


# -- page faults of several GPUs at once -------------------------------------------------------------------------

# sgl-project/sglang#10195 (MI300X): the faults of two GPUs, their lines interleaved, each fault's header above the
# part the reporter quoted.
SGLANG = CORPUS["sglang-10195-mi300x-interleaved-page-faults"]
# ollama/ollama#12915 (MI50): one whole fault, its header and its status lines.
OLLAMA = CORPUS["ollama-12915-mi50-no-retry-page-fault"]


def test_interleaved_page_fault_lines_are_a_fault_on_each_gpu_they_name():
    info = _scan(SGLANG)
    assert sorted(_kinds(info)) == [("page_fault", "0000:66:00.0"), ("page_fault", "0000:c6:00.0")]


def test_a_fault_line_belongs_to_its_own_gpu_never_to_another_gpus_header():
    header = OLLAMA.split("\n")[0]  # GPU 0000:45:00.0's header
    other = SGLANG.split("\n")[1]  # GPU 0000:c6:00.0's "in page starting at address …"
    assert _kinds(_scan(f"{header}\n{other}")) == [("page_fault", "0000:45:00.0"), ("page_fault", "0000:c6:00.0")]


def test_a_whole_fault_is_one_event():
    assert _kinds(_scan(OLLAMA)) == [("page_fault", "0000:45:00.0")]
    assert _kinds(_scan(f"{OLLAMA}\n{OLLAMA}")) == [("page_fault", "0000:45:00.0")] * 2


def test_rdna4s_fault_status_line_is_part_of_its_fault_not_an_unrecognised_error():
    """getsolus/packages#7986 (RDNA4, gmc_v12): `GCVM_L2_PROTECTION_FAULT_STATUS`, at the error level in `dmesg -x`."""
    lines = CORPUS["solus-7986-rdna4-sdma-page-fault-tab-fields"].split("\n")
    info = _scan("\n".join(f"kern  :err   : {line}" for line in lines))
    assert _kinds(info) == [("page_fault", "0000:0e:00.0")]


# -- a serial console's log ----------------------------------------------------------------------------------------

# QubesOS/qubes-issues#7971: a guest's console log as xenconsoled writes it, `[YYYY-MM-DD hh:mm:ss] ` before each line.
QUBES = CORPUS["qubes-7971-console-prefixed-amdgpu-init"]


def test_a_console_log_is_read():
    info = _scan(QUBES)
    assert info.events == [] and info.unreadable_lines == 0, info.first_unreadable
    assert info.formats == {"console": 5}
    line = split_line(QUBES.split("\n")[0])
    assert (line.fmt, line.seconds, line.kernel) == ("console", 8.091385, True)
    assert line.message.startswith("amdgpu 0000:00:06.0: amdgpu: SECUREDISPLAY")
    assert wall_seconds(line.wall_time) == 1704585945.0  # 2024-01-07 00:05:45, the console's clock


def test_a_fault_in_a_console_log_is_read():
    line = "[2024-01-07 00:05:46] [    9.000000] amdgpu 0000:00:06.0: amdgpu: GPU reset(1) failed"
    assert _kinds(_scan(f"{QUBES}\n{line}")) == [("gpu_reset_failed", "0000:00:06.0")]


def test_a_console_prefix_inside_a_record_is_the_records_text():
    """A record whose text looks like a console line (after the kernel's own stamp, or as its indented later line) is
    not a driver record: the console's prefix is read only at the start of a line."""
    forged = "[2024-01-07 00:05:46] [    9.000000] amdgpu 0000:00:06.0: amdgpu: GPU reset(1) failed"
    assert _scan(f"[   57.268910] {forged}").events == []
    info = _scan(f"[57607.268910] x\n               {forged}")
    assert info.events == [] and info.unreadable_lines == 0


def test_a_console_line_without_the_kernels_stamp_is_not_read():
    """The console's clock alone is no kernel record: anything written to the console has it."""
    info = _scan("[2024-01-07 00:05:46] amdgpu 0000:00:06.0: amdgpu: GPU reset(1) failed")
    assert info.events == [] and info.unreadable_lines == 1


def test_a_later_line_of_a_users_record_on_the_console_is_the_records_text():
    """The console prints each line of a record behind the record's stamps (printk.c record_print_text): a segfault
    report whose file name holds a newline and amdgpu's words shows them behind the report's own stamp."""
    head = ("[2024-01-07 00:05:46] [   57.268910] x[9377]: segfault at 0 ip 0000555bf4527132 sp 00007ffc92c9cd00 "
            "error 6 in x")
    later = "[2024-01-07 00:05:46] [   57.268910] amdgpu 0000:00:06.0: amdgpu: GPU reset(1) failed"
    info = _scan(f"{QUBES}\n{head}\n{later}")
    assert info.events == [] and info.unreadable_lines == 0


def test_a_saved_console_log_is_read_from_its_file(tmp_path):
    log = tmp_path / "guest-gpu.log"
    log.write_text(QUBES + "\n")
    info = read_kernel_log(file=log)
    assert info.readable and info.unreadable_lines == 0 and info.formats == {"console": 5}


# -- error-level records no rule names (issue 32, item 7) ---------------------------------------------------------

def test_amdgpus_benign_error_level_records_pass():
    """kachick/dotfiles#970: the Secure Display TA's failed query at boot, which amdgpu prints with dev_err
    (amdgpu_psp.c, amdgpu_securedisplay.c), here in the kmsg form with that level: a benign record, no warning."""
    lines = CORPUS["kachick-970-securedisplay-ta-ja-locale"].split("\n")
    kmsg = [f"3,{n},4000000,-;{line.split('kernel: ', 1)[1]}" for n, line in enumerate(lines)]
    assert scan(kmsg, KernelLogInfo(source="kmsg")).events == []


def test_an_amdgpu_error_no_rule_names_still_warns():
    """legacy-rocm-build#2196: "Failed to export SMU metrics table!" (dev_err), no rule's: an unrecognised error."""
    line = next(x for x in CORPUS["2196-smu-unresponsive-then-ring-timeout"].split("\n") if "metrics table" in x)
    info = scan([f"3,1,31317644111,-;{line.split('] ', 1)[1]}"], KernelLogInfo(source="kmsg"))
    assert _kinds(info) == [("driver_error", "0000:0d:00.0")]
