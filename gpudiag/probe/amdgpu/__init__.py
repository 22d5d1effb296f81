"""What the amdgpu kernel driver itself exposes: the sysfs backend that stands in when amdsmi is unusable (sysfs.py,
its file formats in sysfs_formats.py), the ACA/MCA bank STATUS decoding its kernel-log dumps need (aca.py), and the
bad-page threshold amdgpu applies by default (ras_threshold.py). This file imports nothing."""
