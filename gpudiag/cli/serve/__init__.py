"""`gpudiag serve`: its command line (command.py), the assembly that wires collection, exporter and local service
together and runs them (serving.py), and its log: what changed, told once per change (changes.py), bounded per key
(log_bound.py), in logfmt or JSON (log_format.py). This file imports nothing."""
