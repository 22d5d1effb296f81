"""The Prometheus side of gpudiag: the metrics `gpudiag serve` serves (assembled by gpudiag/cli/serving.py) and the
node_exporter textfile.

Modules: catalog (every metric's name, type, labels), families / device_metrics / node_metrics (series from a
snapshot and check results), events (Xid and kernel-log counters), state (what a scrape renders), http_server,
web_config (TLS, basic auth), listen (`--listen`, binding), textfile, changes / log_format / log_bound (what changed,
told once per change on the log, bounded).
"""

from gpudiag.exporter.listen import DEFAULT_LISTEN
from gpudiag.exporter.textfile import render_textfile, write_textfile

__all__ = ["DEFAULT_LISTEN", "render_textfile", "write_textfile"]
