#!/usr/bin/env bash
# Copy, as a tarball, the sysfs/procfs files gpudiag's host probe reads, for every GPU and its upstream port on a
# real node: the host-probe tests are built from these real formats. Usage: tools/capture_sysfs.sh OUT.tar.gz
set -u
out=$1
list=$(mktemp)
for dev in /sys/bus/pci/devices/*; do
  vendor=$(cat "$dev/vendor" 2>/dev/null); class=$(cat "$dev/class" 2>/dev/null)
  case "$vendor:$class" in 0x10de:0x03*|0x1002:0x03*|0x1002:0x12*|0x10de:0x0680*) ;; *) continue ;; esac
  real=$(readlink -f "$dev"); up=$(dirname "$real")
  for d in "$real" "$up"; do
    for f in class vendor device subsystem_vendor subsystem_device current_link_speed current_link_width \
             max_link_speed max_link_width aer_dev_correctable aer_dev_fatal aer_dev_nonfatal numa_node \
             local_cpulist resource revision enable; do
      [ -r "$d/$f" ] && echo "$d/$f"
    done
    g=$(readlink -f "$d/iommu_group" 2>/dev/null) && [ -r "$g/type" ] && echo "$g/type"
  done
done > "$list"
for f in /proc/cmdline /proc/version /proc/driver/nvidia/version /sys/module/nvidia/version /proc/modules \
         /proc/sys/kernel/osrelease /etc/os-release; do [ -r "$f" ] && echo "$f"; done >> "$list"
# Copy by reading, not with tar: sysfs files claim 4096 bytes and procfs files 0, so tar pads or empties them.
stage=$(mktemp -d)
while read -r f; do
  mkdir -p "$stage$(dirname "$f")"
  cat "$f" 2>/dev/null | tr -d '\000' > "$stage$f"
done < "$list"
tar -czf "$out" -C "$stage" .
# symlinks that matter (driver, iommu_group) do not survive -h: write them down
for dev in /sys/bus/pci/devices/*; do
  echo "$(basename "$dev") -> $(readlink -f "$dev") driver=$(basename "$(readlink -f "$dev/driver" 2>/dev/null)") group=$(basename "$(readlink "$dev/iommu_group" 2>/dev/null)")"
done > "${out%.tar.gz}.links.txt"
ls /sys/class/iommu >> "${out%.tar.gz}.links.txt" 2>&1
