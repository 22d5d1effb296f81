#!/usr/bin/env bash
# Record what an AMD Instinct node (MI300X / MI325X / MI355X) answers, for the fakes in tests/support/fakes/amd_node.py:
# the quirks gpudiag relies on (xgmi_error EINVAL, XGMI_WAFL counts, gpu_metrics version, xgmi_link_status, the
# bad-page threshold as root and not, the in-tree driver version, CPX BDFs and KFD partition IDs, VF answers, the CPER
# records and their AFIDs: as root, `amd-smi ras --cper --folder` writes each record as it came, for
# tests/support/cper_records.py to be checked against).
# Run from the repository root, once as root and once as a normal user:
#   tools/amd_record.sh OUTDIR NAME            (e.g. tools/amd_record.sh /tmp/rec mi300x-root)
set -u
out=$1; name=$2
d="$out/$name"; mkdir -p "$d"
export PYTHONPATH=.
python3 -m gpudiag check --json > "$d/check.json" 2> "$d/check.stderr"; echo "exit $?" >> "$d/check.stderr"
python3 -m gpudiag snapshot --output "$d/snapshot.json" 2>> "$d/check.stderr"
for args in "static --json" "metric --json" "metric --ecc-blocks --json" "xgmi --json" "list --json" \
            "partition --json" "bad-pages --json" "version --json"; do
    echo "== amd-smi $args"; amd-smi $args 2>&1
done > "$d/amd-smi.txt"
mkdir -p "$d/cper"; amd-smi ras --cper --folder "$d/cper" > "$d/cper/amd-smi-ras.txt" 2>&1
for f in "$d"/cper/*.cper; do [ -e "$f" ] && { echo "== $f"; amd-smi ras --afid --cper-file "$f" 2>&1; }; done \
    > "$d/cper/afids.txt"
{
    for f in /sys/class/drm/card*/device/xgmi_error /sys/class/drm/card*/device/ras/features \
             /sys/class/drm/card*/device/ras/*_err_count /sys/class/drm/card*/device/current_compute_partition \
             /sys/kernel/debug/dri/*/ras/bad_page_cnt_threshold /sys/module/amdgpu/version \
             /sys/module/amdgpu/parameters/bad_page_threshold /sys/module/amdgpu/parameters/ras_enable; do
        printf '== %s\n' "$f"; cat "$f" 2>&1
    done
    echo "== /proc/version"; cat /proc/version
} > "$d/sysfs.txt" 2>&1
# The raw amdsmi answers, status codes included, for each processor handle.
python3 - > "$d/amdsmi-calls.txt" 2>&1 <<'PY'
import amdsmi
amdsmi.amdsmi_init(amdsmi.AmdSmiInitFlags.INIT_AMD_GPUS)
for i, h in enumerate(amdsmi.amdsmi_get_processor_handles()):
    for name, args in [("amdsmi_get_gpu_device_bdf", ()), ("amdsmi_get_gpu_bdf_id", ()),
                       ("amdsmi_get_gpu_kfd_info", ()), ("amdsmi_get_gpu_virtualization_mode", ()),
                       ("amdsmi_get_gpu_metrics_header_info", ()), ("amdsmi_get_gpu_driver_info", ()),
                       ("amdsmi_gpu_xgmi_error_status", ()), ("amdsmi_get_gpu_xgmi_link_status", ()),
                       ("amdsmi_get_gpu_ecc_enabled", ()), ("amdsmi_get_gpu_total_ecc_count", ()),
                       ("amdsmi_get_gpu_ecc_count", (amdsmi.AmdSmiGpuBlock.XGMI_WAFL,)),
                       ("amdsmi_get_gpu_bad_page_threshold", ()), ("amdsmi_get_power_info", ()),
                       ("amdsmi_get_power_cap_info", ()), ("amdsmi_get_gpu_vram_usage", ()),
                       ("amdsmi_get_gpu_vbios_info", ()), ("amdsmi_get_pcie_info", ()),
                       ("amdsmi_get_gpu_cper_entries", (0xFFFFFFFF,))]:
        try:
            print(i, name, repr(getattr(amdsmi, name)(h, *args)))
        except Exception as exc:  # the status is the point: print it and go on
            print(i, name, "raised", type(exc).__name__, getattr(exc, "get_error_code", lambda: None)(), exc)
amdsmi.amdsmi_shut_down()
PY
