"""A returning master's pre-online (seed 003), as a state machine (sans-I/O).

While its group's master was gone, the slave acting for it moved the
group's consumer offsets, delay offsets and timer checkpoint on. A master
that came back and registered at once would have its slaves copy its older
tables, rolling the group back. So a static master with
``enable_slave_acting_master`` starts isolated (it neither registers nor
heartbeats, so no client is routed to it) and ``PreOnline`` decides what it
does first:

- ``AskMembers``: ask the name servers for the group's alive members, then
  ``members`` (None: none answered; it asks again after ``RETRY_MS``);
- ``AnnounceHa``: tell each alive slave this master is back
  (EXCHANGE_BROKER_HA_INFO), so that one waiting out its HA backoff
  reconnects now;
- ``AwaitSlaves``: wait until each slave's HA connection transfers (it
  replicates from this master again), reporting the transferring ones with
  ``transferring``; a slave not there by ``deadline_ms`` is left out;
- ``Fetch``: ask a slave for its tables, then ``fetched`` with the
  DataVersion of each (None: it did not answer);
- ``Adopt``: take that slave's table of that kind, the newest by DataVersion
  and newer than this master's (``versions``);
- ``GoOnline``: register with the name servers (``why`` says how it ended).

With no slave alive it goes online at once; past ``wait_ms`` from the start
in any case (a master kept isolated by a lost slave would leave the group
without one). Times are milliseconds.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from triomq.protocol.route import DataVersion

__all__ = [
    "MASTER_ID",
    "RETRY_MS",
    "Adopt",
    "AnnounceHa",
    "AskMembers",
    "AwaitSlaves",
    "Fetch",
    "GoOnline",
    "PreOnline",
    "PreOnlineAction",
]

MASTER_ID = 0
#: How long a master waits before asking the name servers again.
RETRY_MS = 1000


@attrs.frozen
class AskMembers:
    at_ms: int


@attrs.frozen
class AnnounceHa:
    slaves: frozenset[str]


@attrs.frozen
class AwaitSlaves:
    slaves: frozenset[str]
    deadline_ms: int


@attrs.frozen
class Fetch:
    address: str


@attrs.frozen
class Adopt:
    kind: str
    address: str


@attrs.frozen
class GoOnline:
    why: str


PreOnlineAction = AskMembers | AnnounceHa | AwaitSlaves | Fetch | Adopt | GoOnline


class PreOnline:
    """One master's way from isolated to registered."""

    def __init__(self, *, own: str, versions: Mapping[str, DataVersion], wait_ms: int) -> None:
        self.own = own
        self.versions = dict(versions)
        self.wait_ms = wait_ms
        self.deadline_ms = 0
        #: The alive slaves' RPC addresses by broker id.
        self.slaves: dict[int, str] = {}
        self._pending: set[str] = set()
        #: kind -> (the newest DataVersion seen, the slave that has it)
        self._newest: dict[str, tuple[DataVersion, str]] = {}
        self.online = False

    def start(self, now: int) -> list[PreOnlineAction]:
        self.deadline_ms = now + self.wait_ms
        return [AskMembers(now)]

    def members(self, addrs: Mapping[int, str] | None, now: int) -> list[PreOnlineAction]:
        """The group's alive members by broker id (RPC addresses), or None."""
        if addrs is None:
            if now >= self.deadline_ms:
                return self._online("no name server named the group's members")
            return [AskMembers(min(now + RETRY_MS, self.deadline_ms))]
        self.slaves = {i: a for i, a in addrs.items() if i != MASTER_ID and a != self.own}
        if not self.slaves:
            return self._online("no slave of the group is alive")
        addresses = frozenset(self.slaves.values())
        return [AnnounceHa(addresses), AwaitSlaves(addresses, self.deadline_ms)]

    def transferring(self, slaves: frozenset[int], now: int) -> list[PreOnlineAction]:
        """The slaves (broker ids) whose HA connections transfer now."""
        ready = {self.slaves[i] for i in self.slaves.keys() & slaves}
        if len(ready) != len(self.slaves) and now < self.deadline_ms:
            return []
        if not ready:
            return self._online("no slave reconnected in time")
        self._pending = ready
        return [Fetch(address) for address in sorted(ready)]

    def fetched(self, address: str, versions: Mapping[str, DataVersion] | None,
                now: int) -> list[PreOnlineAction]:
        """A slave's tables' DataVersions by kind (None: it did not answer)."""
        if address not in self._pending:
            return []
        self._pending.discard(address)
        for kind, version in (versions or {}).items():
            held = self._newest.get(kind, (self.versions.get(kind, DataVersion()), ""))
            if version.newer_than(held[0]):
                self._newest[kind] = (version, address)
        if self._pending:
            return []
        adopt: list[PreOnlineAction] = [Adopt(kind, address)
                                        for kind, (_, address) in sorted(self._newest.items())]
        return adopt + self._online(f"took back {len(adopt)} newer table(s) of the slaves")

    def _online(self, why: str) -> list[PreOnlineAction]:
        self.online = True
        return [GoOnline(why)]
