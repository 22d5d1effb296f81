"""The exporter's HTTP side: the server (http_server.py: routes, heads read whole and bounded in http_head.py,
connection slots in connections.py, gzip and the landing page in responses.py), where it listens (listen.py), and
exporter-toolkit's web config (config.py: TLS in tls_config.py and openssl_ctx.py, rate_limit.py, errors.py). It
serves bytes the metric side made; nothing here imports that side. This file imports nothing."""
