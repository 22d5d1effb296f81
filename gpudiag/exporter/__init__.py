"""The Prometheus side of gpudiag: the metrics `gpudiag serve` serves (assembled by gpudiag/cli/serve/serving.py) and
the node_exporter textfile.

Modules: catalog (every metric's name, type, labels), metric_set / device_metrics / node_metrics (series from a
snapshot and check results), events (Xid and kernel-log counters), state (what a scrape renders), textfile; and web/,
the HTTP side: http_server, config (the web config: TLS, basic auth), listen (`--listen`, binding). What `serve`
tells its log (what changed, told once per change, bounded) is serve's own: gpudiag/cli/serve/.
"""

from gpudiag.exporter.textfile import render_textfile, write_textfile
from gpudiag.exporter.web.listen import DEFAULT_LISTEN

__all__ = ["DEFAULT_LISTEN", "render_textfile", "write_textfile"]
