"""The transport contract: a transport is a factory of trio byte streams.

A transport plugin turns an address into a connected ``trio.abc.Stream``
(``connect``) or into a listener that accepts them (``listen``). Everything
above it (RPC, HA replication, Raft) only sees bytes, so swapping the
in-process transport for TCP changes nothing else.

Addresses are strings ``scheme://rest``: ``tcp://127.0.0.1:9876``,
``inproc://controller-1``. The scheme picks the plugin (see
``triomq.hookspecs.triomq_transport``); the rest is the plugin's business.
"""

from __future__ import annotations

import os
from typing import Protocol, Self, runtime_checkable

import trio

from triomq.errors import ConfigError


class TransportError(OSError):
    """Connecting or listening failed; the message names the address."""


def os_reason(exc: BaseException) -> str | None:
    """The operating system's reason behind ``exc`` (``connection refused``), from the
    first OS error with an errno among its causes and exception groups; None if none."""
    seen: list[BaseException] = []
    pending = [exc]
    while pending and len(seen) < 16:
        error = pending.pop(0)
        seen.append(error)
        if isinstance(error, OSError) and error.errno:
            return os.strerror(error.errno).lower()
        if isinstance(error, BaseExceptionGroup):
            pending.extend(error.exceptions)
        cause = error.__cause__ if error.__cause__ is not None else error.__context__
        if cause is not None and cause not in seen:
            pending.append(cause)
    return None


#: What a listener has, for messages that name what one lacks.
LISTENER_MEMBERS = ("address", "accept", "aclose", "__aenter__", "__aexit__")


@runtime_checkable
class Listener(Protocol):
    """A bound listener. ``address`` is the address peers dial (port 0 resolved).

    It closes when an ``async with listener:`` block ends, as every
    ``trio.abc.AsyncResource`` does: subclassing ``trio.abc.Listener`` gives
    a listener ``__aenter__`` and ``__aexit__`` from its ``aclose``.
    """

    address: str

    async def accept(self) -> trio.abc.Stream: ...

    async def aclose(self) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc_info: object) -> None: ...


@runtime_checkable
class Transport(Protocol):
    """What a transport plugin provides for its scheme."""

    scheme: str

    async def connect(self, address: str) -> trio.abc.Stream:
        """Open a stream to ``address``; raise TransportError on failure."""

    async def listen(self, address: str) -> Listener:
        """Bind ``address`` and return a listener; raise TransportError on failure."""


def split_address(address: str) -> tuple[str, str]:
    """``"tcp://h:1"`` -> ``("tcp", "h:1")``; a missing scheme is a ConfigError."""
    scheme, sep, rest = address.partition("://")
    if not sep or not scheme or not rest:
        raise ConfigError(f"address {address!r}: expected 'scheme://location'")
    return scheme, rest
