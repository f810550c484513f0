"""Naming the far end of a stream (its address, its TLS certificate), and why it broke."""

from __future__ import annotations

import hashlib
from typing import Any

import trio

from triomq.admin_access import ClientCertificate


def describe_peer(stream: trio.abc.Stream) -> str:
    """A name for the far end of ``stream``, for logs and handlers.

    A transport may give its streams a ``remote_address`` string; otherwise
    the socket's peer address is used, looking through wrappers such as
    ``trio.SSLStream`` (``transport_stream``).
    """
    current: Any = stream
    while current is not None:
        address = getattr(current, "remote_address", None)
        if isinstance(address, str):
            return address
        sock = getattr(current, "socket", None)
        if sock is not None:
            try:
                name = sock.getpeername()
            except OSError:
                break
            return f"{name[0]}:{name[1]}" if isinstance(name, tuple) else str(name)
        current = getattr(current, "transport_stream", None)
    return "unknown peer"


def peer_host(peer: str) -> str:
    """The host part of a peer's name (``describe_peer``): ``"10.0.0.5:4242"`` and
    ``"[::1]:80"`` give ``"10.0.0.5"`` and ``"::1"``; a name with no port is the host."""
    location = peer.partition("://")[2] or peer
    host, sep, port = location.rpartition(":")
    if not sep or not port.isdigit():
        return location
    return host.strip("[]")


def describe_error(exc: BaseException) -> str:
    """``exc`` and, if trio wrapped an OS or TLS error, that error, which says why."""
    cause = exc.__cause__
    return f"{exc!r} caused by {cause!r}" if cause is not None else repr(exc)


def client_certificate(stream: trio.abc.Stream) -> ClientCertificate | None:
    """The certificate the far end of ``stream`` presented over TLS, if any.

    Looks through wrappers (``transport_stream``) for a TLS stream, as
    ``trio.SSLStream`` is, whose handshake is done.
    """
    current: Any = stream
    while current is not None:
        getpeercert = getattr(current, "getpeercert", None)
        if getpeercert is not None:
            try:
                der = getpeercert(binary_form=True)
                decoded = getpeercert() or {}
            except ValueError:  # the handshake has not happened
                return None
            if not der:
                return None
            names = tuple(value for rdn in decoded.get("subject", ()) for key, value in rdn
                          if key == "commonName")
            return ClientCertificate(hashlib.sha256(der).hexdigest(), names)
        current = getattr(current, "transport_stream", None)
    return None
