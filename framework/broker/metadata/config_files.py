"""The broker's JSON files under ``<root>/config/`` and a slave's copies of its master's.

RocketMQ keeps ``topics.json``, ``subscriptionGroup.json`` and
``consumerOffset.json`` side by side, each with a ``.bak`` of the version
before; so does the broker here, one rule for all three:

- ``load``: the file, else its ``.bak`` (a damaged file is logged and
  skipped), else ``None`` for the caller's fresh table;
- ``save``: the previous version copied to ``.bak`` first (copied, not
  moved, so that the file is never missing while it is replaced), then the
  new one written atomically;
- ``Changes``: a table's changes, written by one loop as they come (in a
  thread: a write fsyncs), and once more on the way out;
- ``write_every``: a table that counts its changes (``Revised``: offsets
  moving all the time), written by one loop every period when it moved, and
  once more on the way out;
- ``copy_from_master``: a slave-term task asking its master for a table every
  ``slave_synchronize_period`` (RocketMQ's ``SlaveSynchronize``), handing
  what it gets to the table's own rule for adopting it.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from typing import Protocol, TypeVar

import trio

from triomq.broker.components import ComponentView
from triomq.broker.core.codes import ResponseCode
from triomq.durable_files import replace_atomically
from triomq.protocol.route import RouteDataError
from triomq.rpc import RpcClient, RpcError

__all__ = ["Changes", "Revised", "copy_from_master", "load", "save", "write_every"]

log = logging.getLogger("triomq.broker")

T = TypeVar("T")


def load(root: str, name: str, decode: Callable[[bytes], T]) -> T | None:
    """``<root>/<name>`` decoded, else its ``.bak``; ``None`` if neither is there and good."""
    path = os.path.join(root, name)
    for candidate in (path, path + ".bak"):
        try:
            with open(candidate, "rb") as file:
                return decode(file.read())
        except FileNotFoundError:
            continue
        except RouteDataError as exc:
            log.warning("%s is damaged (%s); trying its backup", candidate, exc)
    return None


def save(root: str, name: str, data: bytes) -> None:
    """Write ``<root>/<name>``, keeping the version before as ``.bak``."""
    path = os.path.join(root, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.exists(path):
        shutil.copyfile(path, path + ".bak.tmp")
        os.replace(path + ".bak.tmp", path + ".bak")
    replace_atomically(path, data)


class Changes:
    """Marks a table changed; ``write_each`` writes it after each change."""

    def __init__(self) -> None:
        self._event = trio.Event()

    def set(self) -> None:
        """The table changed: the writing loop writes it."""
        self._event.set()

    async def write_each(self, write: Callable[[], None]) -> None:
        """Until cancelled, ``write()`` (in a thread) after each change; once more when
        cancelled, so that the last change is written."""
        try:
            while True:
                await self._event.wait()
                self._event = trio.Event()
                await trio.to_thread.run_sync(write)
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(write)


class Revised(Protocol):
    """A table whose ``revision`` moves with every change."""

    @property
    def revision(self) -> int: ...

    def encode(self) -> bytes: ...


async def write_every(period_ms: int, root: str, name: str, table: Revised,
                      written: int) -> None:
    """Until cancelled, every ``period_ms``, write ``table`` to ``<root>/<name>`` (in a
    thread: it fsyncs) when its revision moved past the one written (``written`` at
    first); once more when cancelled, so that the last change is written."""

    async def write() -> None:
        nonlocal written
        revision = table.revision
        if revision != written:
            await trio.to_thread.run_sync(save, root, name, table.encode())
            written = revision

    try:
        while True:
            await trio.sleep(period_ms / 1000)
            await write()
    finally:
        with trio.CancelScope(shield=True):
            await write()


async def copy_from_master(*, what: str, code: int, decode: Callable[[bytes], T],
                           adopt: Callable[[T], object], rpc: RpcClient,
                           broker: ComponentView, period_ms: int) -> None:
    """A slave-term task (``Scope.SLAVE_TERM``: not while the slave acts for its absent
    master, whose tables are the newer then): every ``period_ms`` ask the master
    ``code`` and ``adopt`` the decoded answer (``what`` names it in the log)."""
    while True:
        await trio.sleep(period_ms / 1000)
        # Looked up at each copy, so a host (or a test) may redirect it.
        address = broker.master_address()
        if address is None:
            continue
        try:
            answer = await rpc.invoke(address, code, timeout=3.0)
            if answer.code != ResponseCode.SUCCESS:
                continue
            master = decode(answer.body)
        except (RpcError, RouteDataError) as exc:
            log.info("copying %s from master %s failed: %s", what, address, exc)
            continue
        # An answer that came as the term ended (or an acting term began) is not taken.
        await trio.lowlevel.checkpoint()
        adopt(master)
