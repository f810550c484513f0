"""An in-process network: listeners by address, connections, and seeded fault injection.

Every endpoint has an address ``inproc://name``. A listener's address is the
one it listens on; a connecting client's address is its transport's
``local`` address (or the ``local=`` given to ``connect``), so faults can
name both ends of a connection. Fault methods accept ``"name"`` for
``"inproc://name"``.

Faults, all applying to connections already open and to new ones:

- ``partition(a, b)`` stops bytes between ``a`` and ``b`` (``one_way=True``:
  only from ``a`` to ``b``); ``isolate(a)`` partitions ``a`` from everyone.
  Bytes are held, not lost, and flow again after ``heal``, as TCP would
  deliver them after a partition mends; a sender blocks once the link's
  buffer is full. New connections wait for both directions to be open, up
  to the transport's ``connect_timeout``.
- ``delay(a, b, latency, jitter=...)`` and ``slow(a, b, bytes_per_second)``
  shape the link; ``drop(a, b, probability)`` resets a connection at each
  send with that probability, drawn from the network's ``random.Random(seed)``
  (as is jitter), so a run is reproducible from its seed.
- ``reset(a, b)`` breaks matching connections at once (both ends get
  ``trio.BrokenResourceError``); ``close(a, b)`` ends them gracefully (data in
  flight arrives, then EOF).
- ``heal()`` removes every partition and shaping rule (``heal(a)`` or
  ``heal(a, b)``: only those naming ``a``, or joining ``a`` and ``b``).
"""

from __future__ import annotations

import itertools
import random
from typing import TYPE_CHECKING

import attrs
import trio

from triomq.errors import ConfigError
from triomq.plugins.transport_inproc.stream import Connection, InprocStream
from triomq.transport import TransportError, split_address

if TYPE_CHECKING:
    from triomq.plugins.transport_inproc.transport import InprocListener

SCHEME = "inproc"
DEFAULT_BUFFER_SIZE = 256 * 1024


@attrs.frozen
class Link:
    """The faults on one direction between two endpoints."""

    blocked: bool = False
    latency: float = 0.0
    jitter: float = 0.0
    bandwidth: float | None = None
    drop_rate: float = 0.0

    @property
    def shaped(self) -> bool:
        """Whether delivery times need computing."""
        return bool(self.latency or self.jitter or self.bandwidth is not None)


_OPEN_LINK = Link()


def normalize(address: str) -> str:
    """``"name"`` or ``"inproc://name"`` -> ``"inproc://name"``."""
    if "://" not in address:
        address = f"{SCHEME}://{address}"
    scheme, _ = split_address(address)
    if scheme != SCHEME:
        raise ConfigError(f"address {address!r}: not an {SCHEME}:// address")
    return address


class InprocNetwork:
    """Endpoints, connections and the faults between them; ``seed`` drives all randomness."""

    def __init__(self, name: str = "", *, seed: int = 0,
                 buffer_size: int = DEFAULT_BUFFER_SIZE) -> None:
        self.name = name
        self.seed = seed
        self.random = random.Random(seed)
        self.buffer_size = buffer_size
        self._listeners: dict[str, InprocListener] = {}
        self._links: dict[tuple[str, str], Link] = {}
        self._isolated: set[str] = set()
        self._connections: set[Connection] = set()
        self._changed = trio.lowlevel.ParkingLot()
        self._anonymous = itertools.count(1)

    def __repr__(self) -> str:
        return f"<InprocNetwork {self.name!r} seed={self.seed}>"

    # -- looking --------------------------------------------------------

    def link(self, source: str, target: str) -> Link:
        """The faults on the direction ``source`` -> ``target``."""
        return self._links.get((source, target), _OPEN_LINK)

    def blocked(self, source: str, target: str) -> bool:
        """Whether bytes from ``source`` to ``target`` are held back now."""
        if self._isolated and (source in self._isolated or target in self._isolated):
            return True
        return self.link(source, target).blocked

    def connections(self, a: str | None = None, b: str | None = None) -> list[Connection]:
        """Open connections joining ``a`` and ``b`` (``None`` matches any endpoint)."""
        a, b = _optional(a), _optional(b)
        return [c for c in self._connections if c.involves(a, b)]

    def listening(self) -> list[str]:
        """The addresses listened on."""
        return sorted(self._listeners)

    # -- faults ----------------------------------------------------------

    def partition(self, a: str, b: str, *, one_way: bool = False) -> None:
        """Hold back bytes from ``a`` to ``b``, and from ``b`` to ``a`` unless ``one_way``."""
        self._update(a, b, one_way, blocked=True)

    def isolate(self, a: str) -> None:
        """Partition ``a`` from every other endpoint."""
        self._isolated.add(normalize(a))
        self._wake()

    def delay(self, a: str, b: str, latency: float, *, jitter: float = 0.0,
              one_way: bool = False) -> None:
        """Deliver bytes ``latency`` (+ up to ``jitter``, seeded) seconds after they are sent."""
        if latency < 0 or jitter < 0:
            raise ValueError(f"latency and jitter must be >= 0, got {latency}, {jitter}")
        self._update(a, b, one_way, latency=latency, jitter=jitter)

    def slow(self, a: str, b: str, bytes_per_second: float, *, one_way: bool = False) -> None:
        """Limit the link to ``bytes_per_second``."""
        if bytes_per_second <= 0:
            raise ValueError(f"bytes_per_second must be > 0, got {bytes_per_second}")
        self._update(a, b, one_way, bandwidth=bytes_per_second)

    def drop(self, a: str, b: str, probability: float, *, one_way: bool = False) -> None:
        """Reset a connection at each send across the link with ``probability`` (seeded)."""
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"probability must be within [0, 1], got {probability}")
        self._update(a, b, one_way, drop_rate=probability)

    def heal(self, a: str | None = None, b: str | None = None) -> None:
        """Remove partitions and shaping: all, those naming ``a``, or those joining ``a``, ``b``."""
        a, b = _optional(a), _optional(b)
        if a is None and b is None:
            self._links.clear()
            self._isolated.clear()
        else:
            for key in [k for k in self._links if _joins(k, a, b)]:
                del self._links[key]
            if b is None:
                self._isolated.discard(a)
        self._wake()

    def reset(self, a: str | None = None, b: str | None = None) -> int:
        """Break matching connections now; returns how many."""
        matching = self.connections(a, b)
        for connection in matching:
            connection.reset("connection reset by fault injection")
        return len(matching)

    def close(self, a: str | None = None, b: str | None = None) -> int:
        """End matching connections gracefully (EOF after the data in flight); returns how many."""
        matching = self.connections(a, b)
        for connection in matching:
            connection.close("connection closed by fault injection")
        return len(matching)

    def _update(self, a: str, b: str, one_way: bool, **changes: object) -> None:
        a, b = normalize(a), normalize(b)
        for key in [(a, b)] if one_way else [(a, b), (b, a)]:
            self._links[key] = attrs.evolve(self.link(*key), **changes)
        self._wake()

    def _wake(self) -> None:
        for connection in self._connections:
            for pipe in connection.pipes:
                pipe.wake()
        self._changed.unpark_all()

    # -- used by the transport -------------------------------------------

    def anonymous_address(self) -> str:
        """A fresh address for a transport that was given no ``local`` one."""
        return f"{SCHEME}://anonymous-{next(self._anonymous)}"

    def add_listener(self, listener: InprocListener) -> None:
        if listener.address in self._listeners:
            raise TransportError(f"{listener.address}: address already in use "
                                 f"(network {self.name!r})")
        self._listeners[listener.address] = listener

    def remove_listener(self, listener: InprocListener) -> None:
        if self._listeners.get(listener.address) is listener:
            del self._listeners[listener.address]

    async def connect(self, source: str, target: str, timeout: float) -> InprocStream:
        """A connection from ``source`` to the listener at ``target``."""
        await trio.lowlevel.checkpoint()
        with trio.move_on_after(timeout):
            while self.blocked(source, target) or self.blocked(target, source):
                await self._changed.park()
            # The handshake takes a round trip.
            round_trip = self.link(source, target).latency + self.link(target, source).latency
            if round_trip:
                await trio.sleep(round_trip)
            listener = self._listeners.get(target)
            if listener is None:
                raise TransportError(f"{target}: connection refused, nothing listens there "
                                     f"(network {self.name!r})")
            connection = Connection(self, source, target, self.buffer_size)
            if not listener.offer(connection.server):
                raise TransportError(f"{target}: connection refused, accept backlog full")
            self._connections.add(connection)
            return connection.client
        raise TransportError(f"{target}: connect from {source} timed out after {timeout} s "
                             "(partitioned)")

    def forget(self, connection: Connection) -> None:
        self._connections.discard(connection)


def _optional(address: str | None) -> str | None:
    return None if address is None else normalize(address)


def _joins(key: tuple[str, str], a: str | None, b: str | None) -> bool:
    if b is None:
        return a in key
    return key in ((a, b), (b, a))


_networks: dict[str, InprocNetwork] = {}


def get_network(name: str = "default") -> InprocNetwork:
    """The process-wide network called ``name``, created (seed 0) on first use."""
    network = _networks.get(name)
    if network is None:
        network = _networks[name] = InprocNetwork(name)
    return network


def forget_network(name: str) -> None:
    """Drop the process-wide network ``name`` (its open connections are reset)."""
    network = _networks.pop(name, None)
    if network is not None:
        network.reset()

