"""What an RPC call raises when it gets no response."""

from __future__ import annotations

from triomq.errors import TriomqError


class RpcError(TriomqError):
    """A call did not get a response."""


class RpcTimeout(RpcError):
    """No response within the call's timeout."""


class RpcConnectionError(RpcError):
    """The connection could not be opened, or was lost before the response came."""
