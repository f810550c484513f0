"""The escape bridge: how a broker's own services put a message on a master.

RocketMQ's secondary messages (scheduled, transactional, retried) are
written by the broker itself, not by a client. On a master they go into its
own log; on a slave acting for an absent master (seed 003) they must not,
and go to a master elsewhere. Those services write only through an
``EscapeBridge``, so where a message lands is the bridge's business:

- ``LocalEscapeBridge``: a put through this broker's own put flow (the
  store's checks, the append, then the wait for the flush and the
  replicas every send waits for), for a master. A broker that is not
  master refuses with SERVICE_NOT_AVAILABLE, as a send to it is refused.
- ``FallbackEscapeBridge``: several bridges tried in order (``Fallback``),
  as a slave acting for its absent master escapes (seed 003: a master in
  the same process first, another one of the cluster next).

Bridges come from plugins (hook ``triomq_escape_bridge``, by name; the
broker plugin provides ``"local"``); ``triomq.testing.escape_bridge_suite``
states what every bridge must do.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol

import attrs

from triomq.broker.core.codes import ResponseCode
from triomq.protocol.remoting import RemotingCommand

__all__ = [
    "EscapeBridge",
    "EscapeResult",
    "EscapedMessage",
    "Fallback",
    "FallbackEscapeBridge",
    "LocalEscapeBridge",
]


@attrs.frozen
class EscapedMessage:
    """A message a broker writes itself: what its record holds before it is stored.

    The bridge sets the store's fields (store host and time, the ``CLUSTER``
    property, a ``UNIQ_KEY`` when the message has none). A zero
    ``born_timestamp`` is the store time; no ``born_host`` is the store host.
    """

    topic: str
    queue_id: int
    body: bytes
    properties: Mapping[str, str] = attrs.field(factory=dict)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] | None = None
    reconsume_times: int = 0
    #: A committed transactional message's half message (its commit-log offset).
    prepared_transaction_offset: int = 0


@attrs.frozen
class EscapeResult:
    """How a put through a bridge ended: RocketMQ's response code and remark, and
    where the message went when it was stored (a flush or replication timeout
    still stores it)."""

    code: int
    remark: str | None = None
    msg_id: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None

    @property
    def ok(self) -> bool:
        """Stored, flushed and replicated as the master's policy asks."""
        return self.code == ResponseCode.SUCCESS

    @property
    def stored(self) -> bool:
        """On a master's log (``ok``, or a timeout after the append)."""
        return self.msg_id is not None

    @classmethod
    def of_response(cls, response: RemotingCommand) -> EscapeResult:
        """The result a put's answer (SEND_MESSAGE_V2's ``extFields``) says."""
        fields = response.ext_fields
        queue_id, queue_offset = fields.get("queueId"), fields.get("queueOffset")
        return cls(code=response.code, remark=response.remark, msg_id=fields.get("msgId"),
                   queue_id=int(queue_id) if queue_id is not None else None,
                   queue_offset=int(queue_offset) if queue_offset is not None else None)


class EscapeBridge(Protocol):
    """Puts a broker's own messages on some master."""

    async def put_message(self, message: EscapedMessage) -> EscapeResult:
        """Put ``message`` on a master; the result says whether and where it was stored.
        Refusals are results, never exceptions."""
        ...


class LocalEscapeBridge:
    """A put through this broker's put flow (``BrokerProcessor.put_own``): a master's."""

    def __init__(self, put_own: Callable[[EscapedMessage], Awaitable[RemotingCommand]]) -> None:
        self._put_own = put_own

    async def put_message(self, message: EscapedMessage) -> EscapeResult:
        return EscapeResult.of_response(await self._put_own(message))


class Fallback:
    """The order a fallback tries its bridges in (pure): the next one while none stored
    the message.

    A bridge that stored it (even if a flush or replication wait then timed
    out) ends the search: trying the next one would store it twice. Refused
    everywhere, the answer is the last refusal, its remark naming each.
    """

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)  # at least one
        self._refusals: list[str] = []

    def first(self) -> int:
        """The index of the bridge to try first."""
        return 0

    def tried(self, result: EscapeResult) -> int | EscapeResult:
        """The result of the bridge tried last: the index of the next one, or the answer."""
        if result.stored:
            return result
        self._refusals.append(f"{self.names[len(self._refusals)]}: {result.remark or result.code}")
        if len(self._refusals) < len(self.names):
            return len(self._refusals)
        return attrs.evolve(result, remark="; ".join(self._refusals))


class FallbackEscapeBridge:
    """Puts through the first of ``bridges`` that stores the message (``Fallback``)."""

    def __init__(self, bridges: Sequence[tuple[str, EscapeBridge]]) -> None:
        if not bridges:
            raise ValueError("a fallback escape bridge needs at least one bridge")
        self.bridges = tuple(bridges)

    async def put_message(self, message: EscapedMessage) -> EscapeResult:
        order = Fallback([name for name, _ in self.bridges])
        step: int | EscapeResult = order.first()
        while isinstance(step, int):
            step = order.tried(await self.bridges[step][1].put_message(message))
        return step
