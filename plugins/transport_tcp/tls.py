"""TLS settings for the TCP transport: files in, ``ssl.SSLContext`` out."""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any

import attrs

from triomq.errors import ConfigError

_PATH = "transport.options.tcp.tls"


@attrs.frozen
class TlsOptions:
    """PEM files for TLS; one set serves both directions, so a node has one identity.

    ``cert`` is the certificate chain (it may also hold the key; else
    ``key``); ``ca`` the authorities peers' certificates must chain to (the
    system's when absent). With ``require_client_cert`` a listener accepts
    only clients presenting a certificate signed by ``ca``: mutual TLS
    (``[security] admin_certificates`` then names the clients whose admin
    requests pass).
    ``server_hostname`` overrides the name checked in the server's
    certificate (default: the host of the address dialled).
    """

    cert: str | None = None
    key: str | None = None
    ca: str | None = None
    require_client_cert: bool = False
    server_hostname: str | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> TlsOptions:
        """Build from ``[transport.options.tcp.tls]``."""
        fields = {field.name: field for field in attrs.fields(cls)}
        unknown = set(options) - set(fields)
        if unknown:
            raise ConfigError(f"unknown option(s) {', '.join(sorted(unknown))}", _PATH)
        for name, value in options.items():
            expected = bool if name == "require_client_cert" else str
            if not isinstance(value, expected):
                raise ConfigError(f"expected a {expected.__name__}, got {value!r}",
                                  f"{_PATH}.{name}")
        tls = cls(**options)
        if tls.require_client_cert and tls.ca is None:
            raise ConfigError("require_client_cert needs 'ca' to check client certificates",
                              _PATH)
        if tls.key is not None and tls.cert is None:
            raise ConfigError("'key' given without 'cert'", _PATH)
        return tls

    def client_context(self) -> ssl.SSLContext:
        """The context for connecting: verifies the server, presents ``cert`` if given."""
        return self._load(ssl.Purpose.SERVER_AUTH)

    def server_context(self) -> ssl.SSLContext:
        """The context for listening: presents ``cert``, checks clients if required."""
        if self.cert is None:
            raise ConfigError("listening with TLS needs 'cert' (and the key)", _PATH)
        context = self._load(ssl.Purpose.CLIENT_AUTH)
        if self.require_client_cert:
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def _load(self, purpose: ssl.Purpose) -> ssl.SSLContext:
        try:
            context = ssl.create_default_context(purpose, cafile=self.ca)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"cannot load CA file {self.ca!r}: {exc}", f"{_PATH}.ca") from exc
        if self.cert is not None:
            try:
                context.load_cert_chain(self.cert, self.key)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(f"cannot load certificate {self.cert!r} / key {self.key!r}: "
                                  f"{exc}", f"{_PATH}.cert") from exc
        return context
