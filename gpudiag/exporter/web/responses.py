"""What the exporter answers besides the metrics themselves: the gzip of /metrics, and the landing page at `/`.

gzip (Prometheus sends `Accept-Encoding: gzip` on every scrape): the 8-GPU body is ~350 KB, ~10 KB gzipped. The
body is the cached exposition (rebuilt once per collection, state.ExporterState.body) plus the process metrics
(a few hundred bytes, new on every scrape). The exposition is compressed once, when it changes; each scrape then
copies the compressor's state (zlib's copy, microseconds) and compresses only the process metrics and the gzip
trailer onto it: one valid gzip stream, never a per-scrape compression of the whole body.
"""

from __future__ import annotations

import html
import threading
import zlib
from typing import Optional

GZIP_LEVEL = 6
_GZIP_WBITS = 16 + zlib.MAX_WBITS  # a gzip header and trailer, not a zlib one


def accepts_gzip(header: Optional[str]) -> bool:
    """True when an Accept-Encoding header lists gzip (or x-gzip) with a non-zero q-value (RFC 9110 12.5.3)."""
    for item in (header or "").split(","):
        name, _, params = item.partition(";")
        if name.strip().lower() not in ("gzip", "x-gzip"):
            continue
        q = 1.0
        for param in params.split(";"):
            key, _, val = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(val.strip())
                except ValueError:
                    q = 0.0
        if q > 0:
            return True
    return False


class GzipCache:
    """gzip of a body given as [cached part, per-request parts…]: the cached part is compressed once per object."""

    def __init__(self, level: int = GZIP_LEVEL):
        self.level = level
        self._lock = threading.Lock()
        self._source: Optional[bytes] = None
        self._prefix = b""
        self._compressor = None
        self.compressions = 0  # how often the cached part was compressed (a test counts them)

    def compress(self, chunks: list[bytes]) -> list[bytes]:
        static, rest = chunks[0], chunks[1:]
        with self._lock:
            if self._source is not static:  # identity: state.body returns the same bytes until it re-renders
                compressor = zlib.compressobj(self.level, zlib.DEFLATED, _GZIP_WBITS)
                self._prefix = compressor.compress(static)
                self._source, self._compressor = static, compressor
                self.compressions += 1
            prefix, tail = self._prefix, self._compressor.copy()
        return [prefix, b"".join(tail.compress(chunk) for chunk in rest) + tail.flush()]


def landing_page(version: str, links: list[tuple[str, str]]) -> bytes:
    """A small static page naming the endpoints and the version, as exporter-toolkit's web/landing_page.html."""
    items = "\n".join(f'      <li><a href="{html.escape(path)}">{html.escape(path)}</a>: {html.escape(text)}</li>'
                      for path, text in links)
    return f"""<!DOCTYPE html>
<html lang="en">
  <head>
    <meta charset="UTF-8">
    <title>gpudiag exporter</title>
  </head>
  <body>
    <h1>gpudiag exporter</h1>
    <p>GPU node health for Prometheus. Version: {html.escape(version)}</p>
    <ul>
{items}
    </ul>
  </body>
</html>
""".encode()
