"""TCP transport (``tcp://host:port``), optionally TLS with mutual authentication.

Options (``[transport.options.tcp]``): ``connect_timeout``,
``handshake_timeout`` (seconds a TLS handshake may take before the
connection is closed, default 10), ``keepalive``,
``keepalive_idle``, ``keepalive_interval``, ``keepalive_count``, ``backlog``
and a ``tls`` table with ``cert``, ``key``, ``ca``, ``require_client_cert``
and ``server_hostname``. Listening on port 0 picks a free port; the
listener's ``address`` shows it. Reconnecting is the caller's business
(``triomq.rpc.RpcClient`` does it with backoff), so the transport stays a
plain factory of streams.
"""

from __future__ import annotations

from collections.abc import Mapping

from triomq.hookspecs import TransportFactory, hookimpl
from triomq.plugins.transport_tcp.tls import TlsOptions
from triomq.plugins.transport_tcp.transport import TcpListener, TcpTransport, parse_address

__all__ = ["TcpListener", "TcpTransport", "TlsOptions", "parse_address", "triomq_transport"]


@hookimpl
def triomq_transport() -> Mapping[str, TransportFactory]:
    return {"tcp": TcpTransport.from_options}
