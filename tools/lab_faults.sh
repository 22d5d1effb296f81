#!/usr/bin/env bash
# Provoke real application faults on a lab NVIDIA GPU and save the kernel log in every format an operator can hand
# over (issue 21, item 7; the fixtures in tests/fixtures/h200/faults/). Run as root from the repository root:
#   tools/lab_faults.sh OUTDIR
# Each case of tools/lab_faults.cu runs in a process of its own between two user-space markers written to /dev/kmsg,
# so the driver's lines for one fault can be told apart. The GPU's settings are never changed and it is never reset.
# A forged "NVRM: Xid" record is written from user space only after the driver's records were saved, into files of
# its own (forged-*): it shows what each format keeps of where a record came from.
set -u
out=$1
mkdir -p "$out"
log="$out/run.txt"
nvcc -arch=sm_90 -o "$out/lab_faults" tools/lab_faults.cu >> "$log" 2>&1 || { echo "nvcc failed" >> "$log"; exit 1; }
{ uname -a; cat /proc/driver/nvidia/version; dmesg --version; journalctl --version; } >> "$log" 2>&1
nvidia-smi --query-gpu=index,pci.bus_id,name,driver_version,serial --format=csv >> "$log" 2>&1
for c in illegal_read misaligned_load illegal_write null_read misaligned_store trap assert illegal_instruction \
         shared_oob; do
  echo "gpudiag-lab: case $c begins" > /dev/kmsg
  timeout 60 "$out/lab_faults" "$c" >> "$log" 2>&1; echo "case $c exit $?" >> "$log"
  sleep 1
  echo "gpudiag-lab: case $c ends" > /dev/kmsg
done
sleep 1
dmesg > "$out/dmesg.txt" 2>&1
dmesg -x > "$out/dmesg-x.txt" 2>&1
dmesg --time-format iso > "$out/dmesg-iso.txt" 2>&1
dmesg -x --time-format iso > "$out/dmesg-x-iso.txt" 2>&1
dmesg -T > "$out/dmesg-ctime.txt" 2>&1
dmesg -x -T > "$out/dmesg-x-ctime.txt" 2>&1
dmesg -r > "$out/dmesg-raw.txt" 2>&1
dmesg --time-format reltime > "$out/dmesg-reltime.txt" 2>&1
dmesg --time-format delta > "$out/dmesg-delta.txt" 2>&1
dmesg -t > "$out/dmesg-notime.txt" 2>&1
dmesg -x -t > "$out/dmesg-x-notime.txt" 2>&1
for mode in short short-iso short-precise short-monotonic cat export json; do
  journalctl -k -b --no-pager -o "$mode" > "$out/journal-$mode.txt" 2>&1
done
python3 - "$out/kmsg.txt" <<'EOF'
import os, sys
fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
with open(sys.argv[1], "wb") as f:
    while True:
        try:
            f.write(os.read(fd, 65536))
        except BlockingIOError:
            break
        except BrokenPipeError:
            continue
EOF
nvidia-smi -q > "$out/nvidia-smi-q.txt" 2>&1
PYTHONPATH=. python3 -m gpudiag check --only kernel_log --json > "$out/check-kernel-log.json" 2>> "$log"
echo "gpudiag check exit $?" >> "$log"
# The forgery: from user space, in the driver's words, at the kernel's error level.
echo "<3>NVRM: Xid (PCI:0000:ff:00): 79, pid=1, name=forged, GPU has fallen off the bus." > /dev/kmsg
sleep 0.2
dmesg -x | tail -5 > "$out/forged-dmesg-x.txt" 2>&1
dmesg | tail -5 > "$out/forged-dmesg.txt" 2>&1
dmesg -r | tail -5 > "$out/forged-dmesg-raw.txt" 2>&1
python3 - "$out/forged-kmsg.txt" <<'EOF'
import os, sys
fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
records = []
while True:
    try:
        records.append(os.read(fd, 65536))
    except BlockingIOError:
        break
    except BrokenPipeError:
        continue
open(sys.argv[1], "wb").write(b"".join(records[-5:]))
EOF
grep -n 'NVRM\|gpudiag-lab' "$out/dmesg.txt" | tail -80
