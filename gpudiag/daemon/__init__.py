"""The collection loop below its two users, the exporter and the local service: a collection and what the checks
made of it, collected on an interval under a deadline (poller), and shared one at a time by everyone who wants one
(fresh). Neither user imports the other; `gpudiag serve` wires them together (gpudiag/cli/serve/serving.py)."""
