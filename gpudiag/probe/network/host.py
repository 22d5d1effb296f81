"""The host facts GPUDirect RDMA depends on, as the libraries that use it test for them (sysfs/procfs only).

- NCCL src/transport/net_ib.cc ncclIbGdrSupport(): GPUDirect RDMA is there when any of
  /sys/kernel/mm/memory_peers/nv_mem/version, /sys/kernel/mm/memory_peers/nv_mem_nc/version (MLNX OFED's peer-memory
  clients of the legacy nv_peer_mem module) or /sys/module/nvidia_peermem/version (the driver's own module, 465+)
  exists; ncclIbDmaBufSupport() instead registers a dma-buf (Linux 5.12 ib_umem_dmabuf, NVIDIA's open kernel
  modules).
- UCX uct/ib (ib_md.c) checks the same two NVIDIA paths, and /sys/kernel/mm/memory_peers/amdkfd/version for ROCm's
  peer-memory client; GASNet does likewise (AMD: amdkfd).
- /sys/class/infiniband_verbs/uverbsN/ibdev: the verbs character device of each RDMA device (a device whose
  /dev/infiniband/uverbsN is missing cannot be opened by any RDMA program: NVSentinel's InfiniBandCharDeviceCheck).
"""

from __future__ import annotations

import re

from gpudiag.model import GpuDirectInputs
from gpudiag.probe.network.files import BoundedReader

# Modules that RDMA and peer memory need, by role: the verbs core, each NIC's core and RDMA drivers, the peer-memory
# modules (nvidia_peermem; nv_peer_mem, its out-of-tree predecessor) and the GPU drivers whose memory they export.
RDMA_MODULES = ("ib_core", "ib_uverbs", "rdma_ucm", "mlx5_core", "mlx5_ib", "bnxt_en", "bnxt_re", "ionic",
                "ionic_rdma", "irdma", "nvidia", "nvidia_peermem", "nv_peer_mem", "amdgpu")
MAX_PROC_MODULES_BYTES = 1 << 20  # /proc/modules of a busy node is ~30 KiB
MAX_PEERS = 16
MAX_VERBS = 256
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}", re.ASCII)


def read_gpudirect_inputs(reader: BoundedReader) -> GpuDirectInputs:
    inputs = GpuDirectInputs()
    text = reader.raw(reader.path("proc/modules"), MAX_PROC_MODULES_BYTES)
    listed = set()
    if isinstance(text, bytes):
        listed = {line.split(" ", 1)[0] for line in text.decode("utf-8", errors="replace").splitlines()}
    for name in RDMA_MODULES:
        directory = reader.path(f"sys/module/{name}")
        if name in listed or directory.is_dir():  # built into the kernel: under /sys/module only
            inputs.modules_loaded[name] = reader.value(directory / "version")
    peers = reader.path("sys/kernel/mm/memory_peers")
    for name in reader.names(peers, MAX_PEERS)[0] or []:
        if _NAME.fullmatch(name):
            inputs.memory_peers[name] = reader.value(peers / name / "version")
    version = reader.raw(reader.path("proc/driver/nvidia/version"))
    if isinstance(version, bytes):
        inputs.nvidia_open_kernel_module = b"Open Kernel Module" in version
    inputs.kernel_release = reader.value(reader.path("proc/sys/kernel/osrelease"))
    verbs = reader.path("sys/class/infiniband_verbs")
    for name in reader.names(verbs, MAX_VERBS)[0] or []:
        if name.startswith("uverbs"):
            ibdev = reader.value(verbs / name / "ibdev")
            if ibdev is not None and _NAME.fullmatch(ibdev):
                inputs.verbs_devices[name] = ibdev
    return inputs
