"""Where `gpudiag serve` listens: `--listen` parsed, and the HTTP server bound (every interface: dual-stack IPv6
where the host has it, else IPv4).

Default listen address `:9858`, every interface, IPv4 and IPv6. Prometheus scrapes node exporters from another
host, so a loopback default would only make every deployment override it; the port keeps clear of the GPU
exporters a node may already run during a migration (DCGM exporter 9400, nvidia_gpu_exporter 9835); it is also
sysload_exporter's default, and Prometheus' port allocation list has no free number left (docs/exporter-security.md,
"The port"): where both run, move one with --listen. The metrics
describe hardware health and inventory (UUIDs, serials, driver versions), nothing that grants access; where they
must not leave a trusted network, use `--web-config` (TLS, basic auth) or `--listen 127.0.0.1:9858`.
"""

from __future__ import annotations

import logging
import socket
from typing import Callable

from gpudiag.exporter.http_server import ExporterHTTPServer

log = logging.getLogger(__name__)

DEFAULT_LISTEN = ":9858"


def parse_listen(listen: str) -> tuple[str, int]:
    """`HOST:PORT`, `[IPV6]:PORT` or `:PORT` (every interface)."""
    host, sep, port_text = listen.strip().rpartition(":")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"--listen {listen!r}: expected HOST:PORT, [IPV6]:PORT or :PORT")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port_text)


def bind(host: str, port: int, make: Callable[[socket.AddressFamily, tuple], ExporterHTTPServer]) -> ExporterHTTPServer:
    if host in ("", "*"):
        if socket.has_ipv6:
            try:
                return make(socket.AF_INET6, ("::", port))
            except OSError as exc:  # IPv6 disabled on this host: IPv4 alone
                log.debug("dual-stack bind failed (%s); binding IPv4 only", exc)
        return make(socket.AF_INET, ("0.0.0.0", port))
    family, _, _, _, address = socket.getaddrinfo(host, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0,
                                                  socket.AI_PASSIVE)[0]
    return make(family, address)
