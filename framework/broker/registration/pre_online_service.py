"""A returning master's pre-online: a thin trio driver of ``core.pre_online.PreOnline``.

It runs once, in a static master with ``enable_slave_acting_master`` (and
not ``skip_pre_online``) that starts isolated: it asks the name servers for
the group's members, tells each slave it is back (EXCHANGE_BROKER_HA_INFO,
``announce``), waits for the slaves' HA connections (the replicas
manager's master term says which transfer), asks each slave for its
consumer offsets (GET_ALL_CONSUMER_OFFSET 43), delay offsets
(GET_ALL_DELAY_OFFSET 45) and timer checkpoint (GET_TIMER_CHECK_POINT 60),
takes the newer ones by DataVersion into its own tables (saved by their
services as any change) and then lets the broker register
(``go_online``).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

from triomq.broker.core.codes import ResponseCode
from triomq.broker.registration.core.pre_online import (
    Adopt,
    AnnounceHa,
    AskMembers,
    AwaitSlaves,
    Fetch,
    GoOnline,
    PreOnline,
    PreOnlineAction,
)
from triomq.clock import now_ms
from triomq.errors import TriomqError
from triomq.protocol.route import DataVersion
from triomq.rpc import RpcClient, RpcError

__all__ = ["MetadataTable", "PreOnlineService"]

log = logging.getLogger("triomq.broker")

#: Seconds a slave has to answer each table request.
FETCH_TIMEOUT = 3.0


class MetadataTable:
    """One kind of table a master takes back: how to ask a slave for it, read it, and
    take it."""

    def __init__(self, code: int, decode: Callable[[bytes], Any],
                 version: Callable[[], DataVersion], adopt: Callable[[Any], object]) -> None:
        self.code = code
        self.decode = decode
        self.version = version
        self.adopt = adopt


class PreOnlineService:
    """Keeps a returning master isolated until it took its slaves' newer tables."""

    def __init__(self, *, rpc: RpcClient, own: str, tables: Mapping[str, MetadataTable],
                 members: Callable[[], Awaitable[dict[int, str] | None]],
                 announce: Callable[[str], Awaitable[None]],
                 transferring: Callable[[], frozenset[int]], go_online: Callable[[str], None],
                 wait_ms: int, poll_ms: int) -> None:
        self.rpc = rpc
        self.own = own
        self.tables = tables
        self.members = members
        self.announce = announce
        self.transferring = transferring
        self.go_online = go_online
        self.wait_ms = wait_ms
        self.poll_ms = poll_ms
        #: What it took back, as (table kind, slave address), and how it ended (``GoOnline``).
        self.adopted: list[tuple[str, str]] = []
        self.outcome: str | None = None
        self._master = trio.Event()

    def master_term(self) -> None:
        """The broker took the master role (the pre-online starts then)."""
        self._master.set()

    async def run(self) -> None:
        await self._master.wait()
        flow = PreOnline(own=self.own, wait_ms=self.wait_ms,
                         versions={kind: t.version() for kind, t in self.tables.items()})
        fetched: dict[str, dict[str, Any]] = {}
        actions: deque[PreOnlineAction] = deque(flow.start(now_ms()))
        while actions:
            action = actions.popleft()
            if isinstance(action, AskMembers):
                await trio.sleep_until(action.at_ms / 1000)
                actions.extend(flow.members(await self.members(), now_ms()))
            elif isinstance(action, AnnounceHa):
                async with trio.open_nursery() as nursery:
                    for slave in sorted(action.slaves):
                        nursery.start_soon(self.announce, slave)
            elif isinstance(action, AwaitSlaves):
                while not (ready := flow.transferring(self.transferring(), now_ms())):
                    await trio.sleep(self.poll_ms / 1000)
                actions.extend(ready)
            elif isinstance(action, Fetch):
                tables = fetched[action.address] = await self._fetch(action.address)
                versions = {kind: table.data_version for kind, table in tables.items()}
                actions.extend(flow.fetched(action.address, versions, now_ms()))
            elif isinstance(action, Adopt):
                log.info("pre-online: %s taken from slave %s", action.kind, action.address)
                self.tables[action.kind].adopt(fetched[action.address][action.kind])
                self.adopted.append((action.kind, action.address))
            elif isinstance(action, GoOnline):
                log.info("pre-online done: %s", action.why)
                self.outcome = action.why
                self.go_online(action.why)

    async def _fetch(self, address: str) -> dict[str, Any]:
        """The slave's tables it answered, by kind."""
        tables: dict[str, Any] = {}
        for kind, table in self.tables.items():
            try:
                answer = await self.rpc.invoke(address, table.code, timeout=FETCH_TIMEOUT)
                if answer.code == ResponseCode.SUCCESS:
                    tables[kind] = table.decode(answer.body)
            except (RpcError, TriomqError) as exc:
                log.info("pre-online: %s of slave %s not read: %s", kind, address, exc)
        return tables

