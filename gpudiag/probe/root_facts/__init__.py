"""What only root can read, for the unprivileged service and textfile timer (docs/service.md, "What the service
cannot read, and who reads it"): the record root writes into the state directory and how the probes use it
(record.py), and what `gpudiag root-facts` reads as root to write it (gather.py, apart because it imports the probes
that import record.py)."""
