"""`gpudiag top` on a pipe, probing directly over the fake NVIDIA and AMD nodes: the dmon-style lines (the `#` header
once, then one line per GPU per sample, fixed columns), `-i`, `-c`, `-` for what a device does not report, and the
verdict column naming the failing check on the faulted GPU."""

from __future__ import annotations

import pytest

from gpudiag.cli import app as cli
from tests.support.fakes.fake_nvml import installed
from tests.support.top_node import amd_node_of, node_root, nvidia_node

NAMES = ["#Time", "gpu", "bus", "pwr", "plim", "gtemp", "mtemp", "pclk", "mclk", "sm", "mem", "fb", "sbecc", "dbecc",
         "remap", "pcig", "pciw", "thrtl", "verdict"]
UNITS = ["#HH:MM:SS", "Idx", "ID", "W", "W", "C", "C", "MHz", "MHz", "%", "%", "MiB", "errs", "errs", "rows/pg",
         "gen", "lanes", "reasons", "checks"]


@pytest.fixture(autouse=True)
def _no_wait(monkeypatch):
    monkeypatch.setattr("gpudiag.cli.top.command._sleep", lambda seconds: None)  # -d's wait: the samples come at once


def top(capsys, root, *args: str) -> tuple[int, list[str], str]:
    code = cli.main(["top", "--root", str(root), "--direct", *args])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


def table(lines: list[str]) -> list[dict]:
    """The data lines by column name, as a script would read them (split on blanks, names from the header)."""
    return [dict(zip(NAMES[1:], line.split()[1:])) | {"time": line.split()[0]} for line in lines if
            not line.startswith("#")]


def test_the_header_comes_once_then_a_line_per_gpu_per_sample_in_fixed_columns(tmp_path, capsys):
    node = nvidia_node(4, fault=2)
    node_root(tmp_path, "nvidia", node)
    with installed(node):
        code, lines, err = top(capsys, tmp_path, "-c", "3", "-d", "1")
    assert code == 0 and err == ""
    assert [line.split() for line in lines[:2]] == [NAMES, UNITS]
    assert sum(line.startswith("#") for line in lines) == 2  # the header once, not per sample
    rows = table(lines)
    assert [r["gpu"] for r in rows] == ["0", "1", "2", "3"] * 3
    data = lines[2:]
    assert all(len(line.split()) == len(NAMES) for line in data)
    # fixed columns: every number ends where its header name ends, the bus ID starts where "bus" starts
    header = lines[0]
    for name in ("gpu", "pwr", "plim", "gtemp", "mtemp", "pclk", "mclk", "sm", "mem", "fb", "sbecc", "dbecc",
                 "remap", "pcig", "pciw"):
        end = header.index(f" {name} ") + 1 + len(name)  # the blank after the name
        assert all(line[end - 1] != " " and line[end] == " " for line in data), name
    start = header.index(" bus ") + 1
    assert all(line[start - 1] == " " and line[start:start + 12].startswith("0000:") for line in data)
    gpu2 = rows[2]
    assert gpu2 | {"time": "x"} == {
        "time": "x", "gpu": "2", "bus": "0000:4c:00.0", "pwr": "74", "plim": "700", "gtemp": "27", "mtemp": "32",
        "pclk": "345", "mclk": "3201", "sm": "0", "mem": "0", "fb": "0", "sbecc": "0", "dbecc": "0", "remap": "0",
        "pcig": "4", "pciw": "16", "thrtl": "gpu_idle", "verdict": "fail:pcie.link_generation"}
    assert {r["verdict"] for r in rows if r["gpu"] != "2"} == {"ok"}


def test_a_value_the_device_does_not_report_is_a_dash_never_0(tmp_path, capsys):
    node = nvidia_node(2)
    quiet = node.gpus[1]
    quiet.memory_temperature = None  # NVML_ERROR_NOT_SUPPORTED, as on a GPU without a memory sensor
    quiet.unsupported |= {"nvmlDeviceGetPowerUsage", "nvmlDeviceGetUtilizationRates",
                          "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"}
    node_root(tmp_path, "nvidia", node)
    with installed(node):
        code, lines, _ = top(capsys, tmp_path, "-c", "1")
    assert code == 0
    full, partial = table(lines)
    assert (full["pwr"], full["mtemp"], full["sm"], full["mem"], full["thrtl"]) == ("74", "32", "0", "0", "gpu_idle")
    assert (partial["pwr"], partial["mtemp"], partial["sm"], partial["mem"], partial["thrtl"]) == ("-",) * 5
    assert partial["plim"] == "700" and partial["gtemp"] == "27"  # what it does report is still there


def test_an_amd_node_has_the_same_columns_and_its_own_sensors(tmp_path, capsys):
    from tests.support.fakes.fake_amdsmi import installed as amd_installed

    node = amd_node_of(2, fault=1)
    node_root(tmp_path, "amd", node)
    with amd_installed(node):
        code, lines, _ = top(capsys, tmp_path, "-c", "2")
    assert code == 0 and [line.split() for line in lines[:2]] == [NAMES, UNITS]
    rows = table(lines)
    assert [(r["gpu"], r["bus"]) for r in rows] == [("0", "0000:05:00.0"), ("1", "0000:26:00.0")] * 2
    hot = rows[1]
    # the hotspot (amd-smi's GPU_T) as gtemp, vram as mtemp, the gfx clock as pclk, bad pages as remap
    assert (hot["gtemp"], hot["mtemp"], hot["pclk"], hot["mclk"], hot["remap"]) == ("104", "39", "132", "900", "0")
    assert (hot["pwr"], hot["plim"], hot["pcig"], hot["pciw"], hot["thrtl"]) == ("180", "750", "5", "16", "none")
    assert hot["verdict"] == "fail:thermal.temperature" and rows[0]["verdict"] == "ok"


@pytest.mark.parametrize("wanted", [["-i", "1,3"], ["-i", "0000:3b:00.0", "-i", "3"],
                                    ["--gpu", "GPU-3f6e2a1b-8c4d-4e5f-9a0b-1c2d3e4f5a01,00000000:5D:00.0"]])
def test_i_picks_gpus_as_check_does_by_index_bus_id_or_uuid(tmp_path, capsys, wanted):
    node = nvidia_node(4)
    node_root(tmp_path, "nvidia", node)
    with installed(node):
        code, lines, _ = top(capsys, tmp_path, "-c", "2", *wanted)
    assert code == 0 and [r["gpu"] for r in table(lines)] == ["1", "3", "1", "3"]


@pytest.mark.parametrize("args, says", [
    (["-i", "7"], "--gpu '7': no such GPU on this node; it has 0 (0000:19:00.0"),
    (["-c", "0"], "Invalid value for '--count' / '-c'"),
    (["-d", "0.2"], "Invalid value for '--delay' / '-d'"),
    (["-d", "soon"], "Invalid value for '--delay' / '-d'"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, says):
    node = nvidia_node(2)
    node_root(tmp_path, "nvidia", node)
    with installed(node):
        code, lines, err = top(capsys, tmp_path, *args)
    assert code == 2 and lines == []
    assert err.startswith(f"gpudiag: error: {says}") and err.count("\n") == 1


def test_a_gpu_that_stops_answering_reads_dashes_and_its_failure_in_the_same_row(tmp_path):
    from gpudiag.cli.top.source import Sampler
    from gpudiag.report.live_text import sample_lines

    node = nvidia_node(2)
    node_root(tmp_path, "nvidia", node)
    with installed(node):
        sampler = Sampler(tmp_path, None, 2.0, True, None, 1.0)
        try:
            healthy = sampler.sample()
            node.gpus[1].lost = True
            lost = sampler.sample()
        finally:
            sampler.close()
    assert [r["verdict"] for r in healthy.rows] == [{}, {}]
    assert len(lost.rows) == 2  # the same GPU, though it no longer tells its bus ID: not a new row and a gone one
    row = lost.rows[1]
    assert row["pci_bus_id"] == "0000:3b:00.0" and row["reachable"] is False
    assert row["verdict"] == {"fail": ["inventory.gpus_visible"]}  # its dozen unknowns follow from it
    line = sample_lines([row], lost.taken_at)[0].split()
    assert line[3:17] == ["-"] * 14 and line[-1] == "fail:inventory.gpus_visible"


def test_a_gpu_gone_from_every_list_keeps_its_row_as_gone(monkeypatch, tmp_path):
    from gpudiag.cli.top import source as top_source
    from gpudiag.report.live_text import sample_lines

    row = {"index": 0, "pci_bus_id": "0000:19:00.0", "vendor": "nvidia", "power_watts": 74.0, "verdict": {}}
    views = iter([{"gpus": [row, {**row, "index": 1, "pci_bus_id": "0000:3b:00.0"}]}, {"gpus": [row]},
                  {"gpus": [row]}])

    class Canned:
        def __init__(self, root, timeout):
            pass

        def view(self):
            return next(views), 1.0

    monkeypatch.setattr(top_source, "_Direct", Canned)
    sampler = top_source.Sampler(tmp_path, None, None, True, None, 1.0)
    samples = [sampler.sample() for _ in range(3)]
    assert [len(s.rows) for s in samples] == [2, 2, 2]
    for sample in samples[1:]:
        assert sample_lines(sample.rows, 1.0)[1].split()[1:] == ["1", "0000:3b:00.0"] + ["-"] * 15 + ["gone"]


def test_nothing_to_probe_is_exit_3_with_its_line(tmp_path, capsys):
    from tests.support.fakes.fake_nvml import library_missing

    (tmp_path / "sys").mkdir()  # a root with no GPU on its bus, and no vendor library
    with library_missing():
        code, lines, err = top(capsys, tmp_path, "-c", "1")
    assert code == 3 and lines == []
    assert err == "gpudiag: error: nothing could be probed: no usable GPU library and no GPU on the PCI bus\n"


def test_the_power_sample_rounds_as_dmon_prints_it(tmp_path, capsys):
    node = nvidia_node(1)
    node.gpus[0].power_mw = 74_612  # 74.612 W: dmon prints 75
    node_root(tmp_path, "nvidia", node)
    with installed(node):
        _, lines, _ = top(capsys, tmp_path, "-c", "1")
    assert table(lines)[0]["pwr"] == "75"


def test_gpus_on_the_bus_that_no_library_reads_are_never_ok(tmp_path, capsys):
    from tests.support.fakes.fake_nvml import library_missing

    node_root(tmp_path, "nvidia", nvidia_node(2))
    with library_missing():
        code, lines, _ = top(capsys, tmp_path, "-c", "1")
    rows = table(lines)
    assert code == 0 and [r["bus"] for r in rows] == ["0000:19:00.0", "0000:3b:00.0"]
    # inventory.gpus_visible is unknown on each (nothing to cross-check with): it follows from the library
    assert [r["verdict"] for r in rows] == ["fail:driver.library"] * 2
    assert all(set(line.split()[3:17]) == {"-"} for line in lines[2:])


def test_after_the_first_sample_pwr_is_the_mean_of_the_driver_s_samples_since_the_previous_one(
        tmp_path, capsys, monkeypatch):
    # issue 36, item 1: the mean of NVML's power samples since the previous sample, not the driver's reading
    # (74.312 W here throughout)
    node = nvidia_node(2)
    for gpu in node.gpus:
        gpu.power_sampled(75_000, 75_500)  # the buffer before top starts: no mean for the first sample
    seconds = iter([((195_000, 700_000, 706_000, 699_000), (80_000,)), ((700_500, 701_500), ())])

    def a_second_passes(delay):
        for gpu, sampled in zip(node.gpus, next(seconds)):
            gpu.power_sampled(*sampled)

    monkeypatch.setattr("gpudiag.cli.top.command._sleep", a_second_passes)
    node_root(tmp_path, "nvidia", node)
    with installed(node):
        code, lines, err = top(capsys, tmp_path, "-c", "3", "-d", "1")
    assert code == 0 and err == ""
    # GPU 0: the draw first, then the mean of each second's samples; GPU 1: nothing sampled in the last second
    assert [(r["gpu"], r["pwr"]) for r in table(lines)] == [
        ("0", "74"), ("1", "74"), ("0", "575"), ("1", "80"), ("0", "701"), ("1", "74")]


def test_serve_s_collector_asks_for_the_power_samples_and_check_s_does_not(tmp_path, monkeypatch):
    from gpudiag.cli.shared.node_collect import collect_options

    (tmp_path / "sys").mkdir()
    given = []
    monkeypatch.setattr("gpudiag.cli.serve.serving.serve", lambda listen, web, options, *rest, **named: (
        given.append(options), 0)[1])
    code = cli.main(["serve", "--root", str(tmp_path), "--listen", "127.0.0.1:0", "--log.level", "error"])
    assert code == 0 and [options.power_samples for options in given] == [True]
    assert collect_options(tmp_path, None, None).power_samples is False  # what check collects with
