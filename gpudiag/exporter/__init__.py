"""The Prometheus side of gpudiag: `gpudiag serve` (a daemon scraped by Prometheus) and the node_exporter textfile.

Modules: catalog (every metric's name, type, labels), families / device_metrics / node_metrics (series from a
snapshot and check results), events (Xid and kernel-log counters), poller (background collection with a deadline),
state (what a scrape renders), http_server, web_config (TLS, basic auth), server (`serve`), textfile, changes /
log_format / log_bound (what changed, told once per change on the log, bounded).
"""

from gpudiag.exporter.server import DEFAULT_LISTEN, Exporter, serve
from gpudiag.exporter.textfile import render_textfile, write_textfile

__all__ = ["DEFAULT_LISTEN", "Exporter", "serve", "render_textfile", "write_textfile"]
