"""The kernel_log family: what the GPU drivers logged since boot, judged per GPU. family.py declares the family and
its checks; NVIDIA's records are judged in nvidia.py (with the Xid and SXid catalogs, xid_catalog.py and
sxid_catalog.py), amdgpu's in amdgpu.py, and what the two share in common.py."""
