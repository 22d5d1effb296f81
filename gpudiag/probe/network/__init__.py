"""The network family's probe: the node's RDMA NICs from sysfs (rdma.py, with its bounded reads in files.py, the
attribute formats in formats.py, the NICs' PCI side in pci.py and the host facts GPUDirect RDMA needs in host.py),
the NIC drivers' kernel-log records (kernel_log.py), and the probe part the collector finds by this package's name
(part.py), which carries the last counters from one collection to the next (history.py).

This file imports nothing: the collector imports part.py only when a selected check judges the NICs.
"""
