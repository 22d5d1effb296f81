"""Are NVLink error counters cheaper through nvmlDeviceGetFieldValues than one nvmlDeviceGetNvLinkErrorCounter
call per link and counter? Prints both timings and values for GPU 0. Usage: python3 tools/nvlink_fields_probe.py

On the lab's 2x H200 (tests/fixtures/h200x2/recorded/nvlink-fields.txt): 54 link-scoped fields took 44 ms
against 70 ms for 72 per-link calls — each field is still a driver round trip — and no field carries the CRC-data
counter, so the probe keeps the per-link calls.
"""

import time, pynvml as n
n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex(0)
def per_link(counter):
    return [n.nvmlDeviceGetNvLinkErrorCounter(h, l, counter) for l in range(18)]
t=time.perf_counter(); api = {c: per_link(c) for c in range(4)}; api_ms=(time.perf_counter()-t)*1000
for label, ids in (
    ("scoped 161-163", [(f, l) for f in (161, 162, 163) for l in range(18)]),
    ("unscoped 161-163", [161, 162, 163]),
    ("scoped totals 38,45,52,59", [(f, l) for f in (38, 45, 52, 59) for l in range(2)]),
):
    t=time.perf_counter(); vals=n.nvmlDeviceGetFieldValues(h, ids); ms=(time.perf_counter()-t)*1000
    print(label, f"{ms:.2f} ms", [(v.fieldId, v.scopeId, v.nvmlReturn, v.valueType, v.value.ullVal) for v in vals][:20])
print(f"per-link API {api_ms:.1f} ms", {c: api[c] for c in api})
