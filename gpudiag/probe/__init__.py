"""The probe layer: everything gpudiag knows about a node is read here, into a NodeSnapshot (gpudiag/model), within a
deadline. collector.py is its front door (`Collector`, `collect()`, `CollectOptions`): the host (host.py, pci.py,
procfs.py), the vendor backends (nvml/, amdsmi/, amdgpu/; base.py is their contract, vendor_backends.py which are
tried), the kernel log (kernel_log/) and the parts families add (network/, ras/, screening/, services/, ...;
index.py), every call bounded by deadline.py. split.py divides one collection between processes.

This file imports nothing: a process that needs one module of the layer (the vendor child of `gpudiag check
--direct` starts NVML through nvml/early.py before anything else) does not pay for the collector's imports.
"""
