"""The web-config error, with the class of failure exporter-toolkit's own tests name (web/tls_config_test.go,
ErrorMap), so that a test can check that gpudiag refuses a file for the same reason the toolkit does."""

from __future__ import annotations

NO_SUCH_FILE = "No such file"  # a file the config names cannot be read
YAML = "YAML error"  # not a mapping, an unknown key, a value of the wrong type
MISSING_CERT = "Invalid Cert or CertPath"
MISSING_KEY = "Invalid Key or KeyPath"
BAD_CERT = "Bad certificate"  # a certificate or key that does not load (the toolkit's X509KeyPair error)
INVALID_CLIENT_AUTH = "Invalid ClientAuth"
CA_WITHOUT_POLICY = "ClientCA set without policy"
BAD_PASSWORD = "Bad password"
UNKNOWN_CIPHER = "Unknown cipher"
UNKNOWN_CURVE = "Unknown curve"
UNKNOWN_TLS_VERSION = "Unknown TLS version"
NO_HTTP2_CIPHER = "No HTTP2 cipher"
INVALID_VALUE = "Invalid value"  # a header the toolkit allows with a value it does not
INVALID_HEADER = "Invalid header"  # a header the toolkit does not let a config set
UNSUPPORTED = "Unsupported here"  # gpudiag only: a setting this Python cannot enforce (never silently dropped)


class WebConfigError(Exception):
    """The web-config file is unreadable or invalid; the message is one line for the operator."""

    def __init__(self, message: str, kind: str = YAML):
        super().__init__(message)
        self.kind = kind
