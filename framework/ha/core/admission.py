"""Who may hold a connection of the master's HA port (sans-I/O).

The port serves at most ``max_connections`` at once, but what a slot is
worth depends on what its peer has proved:

- A connection that has not sent its slave handshake holds a slot only
  until someone else needs it: when the port is full, a new connection
  takes the slot of the oldest connection still without a handshake,
  which is closed. A flood of handshake-less connections, however fast,
  can therefore not keep a slave from reaching its handshake.
- A handshake naming a slave (its broker id) already connected replaces the older
  connection (a restarted slave's old connection may not look closed
  yet): one live connection per slave, and its acks count for that slave
  only.
- A *known* slave (a member of the group's SyncStateSet, now or earlier
  in this replica's life) is always admitted at its handshake. Slaves not
  known hold at most ``max_connections - 1`` slots, so a slot is always
  left for a newcomer's handshake; when a known slave finds them full,
  the oldest unknown one is closed, and if none is left it is admitted
  over the cap (the known slaves are a handful).

Connections are named by any hashable key the driver picks.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

import attrs

__all__ = ["Admitted", "HAAdmission", "RefuseHandshake"]


@attrs.frozen
class Admitted:
    """The connection may stay; ``close`` are connections to close for it."""

    close: tuple[Hashable, ...] = ()


@attrs.frozen
class RefuseHandshake:
    """The handshake is refused: close the connection; ``reason`` says why."""

    reason: str


class HAAdmission:
    """The HA port's slots: connections without a handshake, and slaves."""

    def __init__(self, *, max_connections: int) -> None:
        if max_connections < 2:
            raise ValueError(f"ha_max_connections must be >= 2, got {max_connections}")
        self.max_connections = max_connections
        #: Broker ids of the group's replicas, as SyncStateSets named them.
        self.known: set[int] = set()
        # Insertion order is age: the first key is the oldest.
        self._handshaking: dict[Hashable, None] = {}
        self._slaves: dict[Hashable, int] = {}
        self._by_id: dict[int, Hashable] = {}

    @property
    def held(self) -> int:
        """Connections holding a slot."""
        return len(self._handshaking) + len(self._slaves)

    @property
    def handshaking(self) -> int:
        """Connections still without a handshake."""
        return len(self._handshaking)

    def remember(self, members: Iterable[int]) -> None:
        """``members`` (a SyncStateSet) are replicas of the group: known from now on."""
        self.known.update(members)

    def opened(self, connection: Hashable) -> Admitted:
        """A new connection: admitted, maybe in place of the oldest without a handshake."""
        close: tuple[Hashable, ...] = ()
        if self.held >= self.max_connections and self._handshaking:
            oldest = next(iter(self._handshaking))
            del self._handshaking[oldest]
            close = (oldest,)
        self._handshaking[connection] = None
        return Admitted(close)

    def handshaken(self, connection: Hashable, broker_id: int) -> Admitted | RefuseHandshake:
        """``connection`` introduced itself as the slave ``broker_id``."""
        if connection not in self._handshaking:
            raise ValueError(f"connection {connection!r} is not waiting for a handshake")
        close: list[Hashable] = []
        older = self._by_id.get(broker_id)
        if older is not None:
            # One live connection per slave: the newer handshake wins.
            self._drop_slave(older)
            close.append(older)
        elif len(self._slaves) >= self.max_connections - 1:
            if broker_id not in self.known:
                del self._handshaking[connection]
                return RefuseHandshake(f"the HA port serves its ha_max_connections "
                               f"({self.max_connections}) and broker {broker_id} is no "
                               "known replica of the group")
            victim = next((c for c, i in self._slaves.items() if i not in self.known), None)
            if victim is not None:
                self._drop_slave(victim)
                close.append(victim)
        del self._handshaking[connection]
        self._slaves[connection] = broker_id
        self._by_id[broker_id] = connection
        return Admitted(tuple(close))

    def closed(self, connection: Hashable) -> None:
        """``connection`` ended (any reason); a key already dropped is ignored."""
        self._handshaking.pop(connection, None)
        if connection in self._slaves:
            self._drop_slave(connection)

    def _drop_slave(self, connection: Hashable) -> None:
        broker_id = self._slaves.pop(connection)
        if self._by_id.get(broker_id) == connection:
            del self._by_id[broker_id]
