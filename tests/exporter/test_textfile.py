"""`gpudiag textfile`: the metrics written once for node_exporter's textfile collector, replaced atomically."""

from __future__ import annotations

from gpudiag.cli.app import main
from tests.support.exporter import series, value
from tests.support.exporter_node import fake_root
from tests.support.fakes.fake_nvml import FakeNode, installed


def test_textfile_writes_metrics_and_check_results(tmp_path):
    node = FakeNode.hgx_h200(2)
    node.gpus[1].pcie_downtrained(generation=5, width=8)
    fake_root(tmp_path / "root", node)
    out_dir = tmp_path / "textfile"
    out_dir.mkdir()
    target = out_dir / "gpudiag.prom"
    target.write_text("# an older run\n")
    old_inode = target.stat().st_ino
    with installed(node):
        code = main(["textfile", "--output", str(target), "--root", str(tmp_path / "root"), "--timeout", "5"])
    assert code == 0
    text = target.read_text()
    assert [v for _, v in series(text, "gpudiag_device_up")] == [1.0, 1.0]
    assert value(text, "gpudiag_gpu_pcie_link_width_lanes", gpu="1", kind="current") == 8
    assert series(text, "gpudiag_check_ok")  # the checks ran
    assert value(text, "gpudiag_last_collection_timestamp_seconds") > 1.7e9
    assert "gpudiag_gpu_xid_errors_total" not in text  # event counters belong to the daemon
    # replaced by rename (a reader sees the old file or the new one), and nothing left behind
    assert target.stat().st_ino != old_inode
    assert sorted(p.name for p in out_dir.iterdir()) == ["gpudiag.prom"]
    assert oct(target.stat().st_mode & 0o777) == "0o644"  # node_exporter runs as another user


def test_unwritable_output_is_a_usage_error(tmp_path, capsys):
    node = FakeNode.hgx_h200(1)
    fake_root(tmp_path / "root", node)
    with installed(node):
        code = main(["textfile", "--output", str(tmp_path / "missing" / "gpudiag.prom"), "--root",
                     str(tmp_path / "root")])
    assert code == 2
    err = capsys.readouterr().err
    assert "cannot write" in err and err.count("\n") == 1
