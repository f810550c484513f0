"""TLS streams whose handshake is bounded in time and whose failures say why.

``trio.SSLStream`` does its handshake on first use and waits for the peer as
long as it takes: a client that connects to a TLS port and never starts TLS
would hold the connection (and whatever serves it) forever. ``TlsStream``
bounds the handshake by ``handshake_timeout`` and closes the connection
when it runs out, on every port a TLS listener serves.

A refused handshake surfaces from ``trio.SSLStream`` as a
``trio.BrokenResourceError`` with no message (the ``ssl.SSLError`` is its
cause), and the TLS alert that tells the peer why stays unsent. ``TlsStream``
sends that alert, so the peer learns the reason too, and raises the error
again with a message naming the reason (``"certificate required"``,
``"unknown ca"``) and who refused whose certificate; an accepted stream also
logs it, so the server's log says why a peer was turned away.
"""

from __future__ import annotations

import logging
import ssl

import trio

from triomq.rpc.peer import describe_peer

log = logging.getLogger("triomq.transport.tcp")

#: How long a refusing side waits for its alert to be sent and the peer to close.
_FAREWELL_TIMEOUT = 1.0

_ALERT_PREFIXES = ("TLSV13_ALERT_", "TLSV1_ALERT_", "SSLV3_ALERT_")
#: Alerts a server sends when it refuses the client's certificate.
_CERTIFICATE_ALERTS = frozenset({
    "CERTIFICATE_REQUIRED", "UNKNOWN_CA", "BAD_CERTIFICATE", "CERTIFICATE_UNKNOWN",
    "CERTIFICATE_EXPIRED", "CERTIFICATE_REVOKED", "UNSUPPORTED_CERTIFICATE", "ACCESS_DENIED",
})


def tls_reason(error: ssl.SSLError) -> str:
    """The reason of a TLS failure in words: ``"unknown ca"``, ``"certificate required"``."""
    if isinstance(error, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {error.verify_message}"
    reason = error.reason or ""
    for prefix in _ALERT_PREFIXES:
        if reason.startswith(prefix):
            reason = reason[len(prefix):]
            break
    if reason == "PEER_DID_NOT_RETURN_A_CERTIFICATE":
        reason = "CERTIFICATE_REQUIRED"  # what the alert sent to the client says
    return reason.replace("_", " ").lower() if reason else str(error)


def explain_refusal(error: ssl.SSLError, *, server_side: bool) -> str:
    """Who refused whom, and why."""
    reason = tls_reason(error)
    peer = "client" if server_side else "server"
    code = error.reason or ""
    if any(code.startswith(p) for p in _ALERT_PREFIXES):
        if code.split("ALERT_", 1)[1] in _CERTIFICATE_ALERTS:
            return f"the {peer} refused this node's certificate ({reason})"
        return f"the {peer} refused the handshake ({reason})"
    if (isinstance(error, ssl.SSLCertVerificationError)
            or code == "PEER_DID_NOT_RETURN_A_CERTIFICATE"):
        return f"the {peer}'s certificate was refused ({reason})"
    if isinstance(error, ssl.SSLEOFError):
        return f"the {peer} closed the connection during the handshake ({reason})"
    return f"the handshake failed ({reason})"


class TlsStream(trio.abc.Stream):
    """``ssl_stream`` with a handshake bounded by ``handshake_timeout`` seconds.

    ``transport_stream`` is the ``trio.SSLStream``, so ``describe_peer``
    finds the socket through it.
    """

    def __init__(self, ssl_stream: trio.SSLStream, *, server_side: bool,
                 handshake_timeout: float, local: str) -> None:
        self.transport_stream = ssl_stream
        self._server_side = server_side
        self._timeout = handshake_timeout
        #: The connection, for messages: the peer and the listener, or the address dialled.
        self._name = f"{describe_peer(ssl_stream)} on {local}" if server_side else local
        self._handshook = False
        # One sender and one receiver at a time, told at once even during the
        # handshake (where trio.SSLStream lets a second caller wait).
        self._sending = False
        self._receiving = False

    async def _handshake(self) -> None:
        try:
            with trio.fail_after(self._timeout):
                await self.transport_stream.do_handshake()
        except trio.TooSlowError:
            await trio.aclose_forcefully(self.transport_stream)
            message = (f"TLS handshake with {self._name} did not finish within "
                       f"{self._timeout:g} s; connection closed")
            if self._server_side:
                log.warning("%s", message)
            raise trio.BrokenResourceError(message) from None
        self._handshook = True

    async def _refused(self, exc: trio.BrokenResourceError) -> trio.BrokenResourceError:
        """``exc`` with a message saying why, if TLS refused the connection; the
        alert saying so to the peer is sent first."""
        cause = exc.__cause__
        if not isinstance(cause, ssl.SSLError) or exc.args:
            return exc
        await self._send_alert()
        message = f"TLS with {self._name}: {explain_refusal(cause, server_side=self._server_side)}"
        if self._server_side:
            log.warning("%s", message)
        refused = trio.BrokenResourceError(message)
        refused.__cause__ = cause
        return refused

    async def _send_alert(self) -> None:
        """Send what TLS left unsent when it failed (the alert naming the reason),
        then wait briefly for the peer to close: closing first, with the peer's
        bytes unread, would reset the connection and could lose the alert."""
        # trio.SSLStream keeps its outgoing bytes in ``_outgoing``; without it
        # (another trio), the peer only sees the connection end.
        outgoing = getattr(self.transport_stream, "_outgoing", None)
        pending = outgoing.read() if isinstance(outgoing, ssl.MemoryBIO) else b""
        if not pending:
            return
        tcp = self.transport_stream.transport_stream
        with trio.move_on_after(_FAREWELL_TIMEOUT):
            try:
                await tcp.send_all(pending)
                await tcp.send_eof()
                while await tcp.receive_some():
                    pass
            except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError):
                pass

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self._sending:
            raise trio.BusyResourceError("another task is sending on this stream")
        self._sending = True
        try:
            if not self._handshook:
                await self._handshake()
            await self.transport_stream.send_all(data)
        except trio.BrokenResourceError as exc:
            raise await self._refused(exc) from exc.__cause__
        finally:
            self._sending = False

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if self._receiving:
            raise trio.BusyResourceError("another task is receiving from this stream")
        self._receiving = True
        try:
            if not self._handshook:
                await self._handshake()
            return await self.transport_stream.receive_some(max_bytes)
        except trio.BrokenResourceError as exc:
            raise await self._refused(exc) from exc.__cause__
        finally:
            self._receiving = False

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport_stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self.transport_stream.aclose()
