"""The simple consumer: RocketMQ 5's ``SimpleConsumer`` (pop consumption) over remoting.

::

    consumer = SimpleConsumer("reports", ["10.0.0.1:9876"], invisible_duration=30.0)
    consumer.subscribe("orders", "*")
    async with consumer.start(node.connect):
        for received in await consumer.receive(max_messages=16, await_duration=5.0):
            ...                                   # received.message is a MessageExt
            await consumer.ack(received)          # or let it come back after 30 s
            # await consumer.change_invisible_duration(received, 60.0)

Nothing is assigned and no offset is kept here: ``receive`` pops from the
masters holding the subscribed topics, in turn (POP_MESSAGE, queueId -1,
waiting up to ``await_duration`` on the broker), and each message stays
invisible to the group for ``invisible_duration`` unless acked
(ACK_MESSAGE) or given more time (CHANGE_MESSAGE_INVISIBLETIME); un-acked,
the broker's revive puts it back, with its reconsume times one higher. The
requests and handles are ``triomq.client.core.pop`` (pure). The consumer sends
no heartbeat: the broker creates the group on its first pop, as RocketMQ's
does for a pop consumer, and an orderly (FIFO) pop is not built.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from triomq.client.core.codes import RequestCode as Req
from triomq.client.core.errors import BrokerError, ClientError, NoRouteError
from triomq.client.core.pop import (
    Received,
    ack_fields,
    change_fields,
    changed_handle,
    pop_fields,
    popped,
)
from triomq.client.instance import ClientInstance, default_instance_name, local_ip
from triomq.protocol.remoting import ROCKETMQ_VERSION
from triomq.protocol.route import PERM_READ
from triomq.rpc import Connect, open_rpc_client

__all__ = ["Received", "SimpleConsumer"]


class SimpleConsumer:
    """Pops messages for the application, which acks each (see the module)."""

    def __init__(self, group: str, namesrv_addr: Sequence[str], *,
                 invisible_duration: float = 30.0, await_duration: float = 5.0,
                 timeout: float = 3.0) -> None:
        self.group = group
        self.namesrv_addr = list(namesrv_addr)
        self.invisible_duration = invisible_duration
        self.await_duration = await_duration
        self.timeout = timeout
        self.client_id = f"{local_ip()}@{default_instance_name()}"
        self.subscriptions: dict[str, str] = {}
        self._instance: ClientInstance | None = None
        self._turn = 0

    def subscribe(self, topic: str, expression: str = "*") -> None:
        """Receive ``topic``'s messages that match ``expression`` (tags joined by ``||``)."""
        self.subscriptions[topic] = expression

    @property
    def instance(self) -> ClientInstance:
        if self._instance is None:
            raise ClientError("the consumer is not started (use `async with consumer.start(...)`)")
        return self._instance

    @asynccontextmanager
    async def start(self, connect: Connect) -> AsyncIterator[SimpleConsumer]:
        if self._instance is not None:
            raise ClientError("the consumer is already started")
        async with open_rpc_client(connect, version=ROCKETMQ_VERSION) as rpc:
            self._instance = ClientInstance(rpc, self.namesrv_addr, self.client_id,
                                            timeout=self.timeout)
            try:
                yield self
            finally:
                self._instance = None

    async def _targets(self) -> list[tuple[str, str, str]]:
        """``(topic, broker name, master address)`` of every readable queue group."""
        targets = []
        for topic in sorted(self.subscriptions):
            route = await self.instance.update_route(topic)
            if route is None:
                continue
            for queues in route.queue_datas:
                address = self.instance.master_address(queues.broker_name)
                if address is not None and queues.perm & PERM_READ and queues.read_queue_nums:
                    targets.append((topic, queues.broker_name, address))
        if not targets:
            raise NoRouteError(f"no master holds {', '.join(sorted(self.subscriptions))}")
        return targets

    async def receive(self, max_messages: int = 16, *, invisible_duration: float | None = None,
                      await_duration: float | None = None) -> list[Received]:
        """Up to ``max_messages`` (1 to 32) from one broker, the next one each call;
        ``[]`` when it had none within ``await_duration`` seconds."""
        if not self.subscriptions:
            raise ClientError("subscribe to a topic before receiving")
        invisible = self.invisible_duration if invisible_duration is None else invisible_duration
        wait = self.await_duration if await_duration is None else await_duration
        targets = await self._targets()
        topic, broker_name, address = targets[self._turn % len(targets)]
        self._turn += 1
        fields = pop_fields(self.group, topic, self.subscriptions[topic],
                            max_messages=max_messages, invisible_ms=round(invisible * 1000),
                            poll_ms=round(wait * 1000), born_ms=time.time_ns() // 1_000_000)
        answer = await self.instance.invoke(address, Req.POP_MESSAGE, fields,
                                            timeout=wait + self.timeout)
        return popped(answer.code, answer.remark, answer.ext_fields, answer.body,
                      address=address, broker_name=broker_name, group=self.group)

    async def ack(self, received: Received) -> None:
        """The message is consumed: it does not come back. ``BrokerError`` if the broker
        refuses the handle (its invisible time ran out, for one)."""
        await self.instance.checked(received.address, Req.ACK_MESSAGE, ack_fields(received))

    async def change_invisible_duration(self, received: Received, duration: float
                                        ) -> Received:
        """Keep the message invisible ``duration`` seconds from now; the message with its
        new handle (ack that one)."""
        answer = await self.instance.checked(
            received.address, Req.CHANGE_MESSAGE_INVISIBLETIME,
            change_fields(received, round(duration * 1000)))
        try:
            return changed_handle(received, answer.ext_fields, received.handle.split(" ")[5])
        except (KeyError, IndexError) as exc:
            raise BrokerError(received.address, answer.code,
                              f"change answer unreadable: {exc}") from None
