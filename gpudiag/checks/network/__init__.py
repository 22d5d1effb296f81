"""The network family: the node's RDMA NICs, judged. family.py declares the family and its checks of NICs, rates and
firmware; the error counters and flaps are judged in counters.py, GPUDirect RDMA and the GPU-NIC placement in
affinity.py, and what they share in common.py."""
