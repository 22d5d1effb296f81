"""Where `gpudiag serve` listens: `--listen` parsed, and the HTTP server bound (every interface: dual-stack IPv6
where the host has it, else IPv4).

Default listen address `:9858`, every interface, IPv4 and IPv6. Prometheus scrapes node exporters from another
host, so a loopback default would only make every deployment override it; the port keeps clear of the GPU
exporters a node may already run during a migration (DCGM exporter 9400, nvidia_gpu_exporter 9835); it is also
sysload_exporter's default, and Prometheus' port allocation list has no free number left (docs/exporter-security.md,
"The port"): where both run, move one with --listen. The metrics
describe hardware health and inventory (UUIDs, serials, driver versions), nothing that grants access; where they
must not leave a trusted network, use `--web-config` (TLS, basic auth) or `--listen 127.0.0.1:9858`.

Several addresses (`--listen` / `--web.listen-address`, repeatable, as exporter-toolkit spells it) are all bound
before anything is served: one that cannot be bound refuses them all. `--web.systemd-socket` serves on the
listening sockets systemd passes instead (socket activation: gpudiag.socket owns the port), read as
sd_listen_fds(3) reads them: LISTEN_PID must be this process, LISTEN_FDS sockets from descriptor 3 on.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Callable, MutableMapping

from gpudiag.exporter.web.http_server import ExporterHTTPServer

log = logging.getLogger(__name__)

DEFAULT_LISTEN = ":9858"
SD_LISTEN_FDS_START = 3  # sd_listen_fds(3): the first descriptor systemd passes
MAX_SYSTEMD_SOCKETS = 64  # a bound on LISTEN_FDS, which anyone starting the process could set


class ListenError(OSError):
    """An address (or systemd's sockets) that cannot be served on: `where` and one line of why."""

    def __init__(self, where: str, reason: str):
        super().__init__(f"{where}: {reason}")
        self.where, self.reason = where, reason


def split_addresses(values) -> list[str]:
    """Every address of repeated and comma-separated values (a comma is in no HOST:PORT), in order, once each."""
    found: list[str] = []
    for value in values:
        for part in value.replace(",", " ").split():
            if part not in found:
                found.append(part)
    return found


def systemd_sockets(environ: MutableMapping[str, str] = os.environ) -> list[socket.socket]:
    """The TCP sockets systemd passed to this process (LISTEN_PID, LISTEN_FDS), listening already; ListenError when
    there are none or one is not a listening TCP socket. The variables are then removed, as sd_listen_fds(1) does,
    so that nothing this process starts takes the sockets for its own."""
    where = "--web.systemd-socket"
    pid, count = environ.get("LISTEN_PID", ""), environ.get("LISTEN_FDS", "")
    if not pid or not count:
        raise ListenError(where, "systemd passed no socket (LISTEN_FDS and LISTEN_PID are not set): start it "
                                 "through gpudiag.socket, or use --listen")
    if not pid.isdigit() or int(pid) != os.getpid():
        raise ListenError(where, f"LISTEN_PID={pid[:20]!r} is not this process ({os.getpid()}): the sockets "
                                 f"were passed to another one")
    if not count.isdigit() or not 1 <= int(count) <= MAX_SYSTEMD_SOCKETS:
        raise ListenError(where, f"LISTEN_FDS={count[:20]!r}: expected 1 to {MAX_SYSTEMD_SOCKETS} sockets")
    sockets: list[socket.socket] = []
    try:
        for fd in range(SD_LISTEN_FDS_START, SD_LISTEN_FDS_START + int(count)):
            try:
                sock = socket.socket(fileno=fd)  # family and type read from the descriptor
            except OSError as exc:
                raise ListenError(where, f"descriptor {fd}: not a socket ({exc.strerror or exc})") from None
            sockets.append(sock)
            if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type != socket.SOCK_STREAM:
                raise ListenError(where, f"descriptor {fd}: not a TCP socket (ListenStream= with a port or "
                                         f"address:port)")
            if not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                raise ListenError(where, f"descriptor {fd}: not listening")
            sock.set_inheritable(False)
    except BaseException:
        for sock in sockets:
            sock.detach()  # systemd's descriptors are left as they were: not ours to close on a refusal
        raise
    for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        environ.pop(name, None)
    return sockets


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
