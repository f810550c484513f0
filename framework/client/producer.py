"""The producer: RocketMQ's ``DefaultMQProducer`` on trio.

::

    producer = Producer("orders-producer", namesrv_addr=["10.0.0.1:9876"])
    async with producer.start(node.connect):
        result = await producer.send(Message("orders", b"...", tags="paid", keys="o-1"))
        producer.send_async(Message("orders", b"..."), on_success=print)
        await producer.send_oneway(Message("orders", b"..."))
        await producer.send_batch([Message("orders", b"1"), Message("orders", b"2")])

Routes come from the name servers (``triomq.client.instance``); a send
picks the next writable queue in turn (``triomq.client.core.publish``) and goes
to its group's master. Within ``send_msg_timeout`` a send rides through a
failover (``triomq.client.core.send_flow``): no answer, or an answer saying the
route is stale (a slave, a missing topic), fetches the route and tries
again, waiting while the group has no master routed; other retriable
refusals are tried again on another group up to
``retry_times_when_send_failed`` times; a send fails sooner only for a
refusal RocketMQ does not retry, and each failure carries its reason. A topic no name server
knows is sent where the default topic ``TBW102`` goes, and a broker that
auto-creates topics creates it (RocketMQ's autoCreateTopicEnable). A message the master
stored but could not flush or replicate in time is a ``SendResult`` with
that status, not an error. Each message gets a client-side id (``UNIQ_KEY``,
``SendResult.msg_id``) and its born timestamp.

``send`` waits for the answer. ``send_async`` returns at once and runs the
send in the producer's own task group, calling ``on_success(result)`` or
``on_exception(error)`` when it ends (RocketMQ's ``SendCallback``); the
producer's block waits for sends in flight before it ends. ``send_oneway``
writes the request and waits for nothing (no result, no retry).

Requests declare RocketMQ 5.3.3's version, as a 5.3.3 Java producer's do
(the admin tool's connection lists show it).
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

import trio

from triomq.client.core.codes import RequestCode
from triomq.client.core.errors import ClientError, NoRouteError
from triomq.client.core.message import (
    PROPERTY_UNIQ_KEY,
    Message,
    MessageQueue,
    SendResult,
    encode_batch,
)
from triomq.client.core.publish import (
    AUTO_CREATE_TOPIC,
    QueueSelector,
    TopicPublishInfo,
    publish_info,
)
from triomq.client.core.send_flow import FetchRoute, SendAttempt, SendFlow, Sent, WaitForRetry
from triomq.client.instance import (
    ClientInstance,
    default_instance_name,
    dial_address,
    local_ip,
)
from triomq.clock import epoch_ms
from triomq.protocol.message import properties_to_bytes
from triomq.protocol.remoting import ROCKETMQ_VERSION
from triomq.protocol.unique_id import UniqueIdGenerator
from triomq.rpc import Connect, Handler, RpcError, open_rpc_client

__all__ = ["Producer"]

log = logging.getLogger("triomq.client")


def now_ms() -> int:
    """Epoch milliseconds on the run's ``EpochClock``: born timestamps and ids are
    compared across hosts, and with the brokers' store times (a transaction's age)."""
    return epoch_ms()


class Producer:
    """Sends messages of producer group ``group`` through the name servers' routes.

    Configure it, then run it with ``async with producer.start(connect)``
    (``connect`` opens a stream to an address, e.g. ``node.connect``).
    """

    def __init__(self, group: str = "DEFAULT_PRODUCER", namesrv_addr: Sequence[str] = (), *,
                 send_msg_timeout: float = 3.0, retry_times_when_send_failed: int = 2,
                 default_topic_queue_nums: int = 4,
                 poll_name_server_interval: float = 30.0, instance_name: str | None = None,
                 client_ip: str | None = None) -> None:
        self.group = group
        self.namesrv_addr = list(namesrv_addr)
        #: Seconds one send may take, retries included (sendMsgTimeout).
        self.send_msg_timeout = send_msg_timeout
        #: Attempts after the first (retryTimesWhenSendFailed).
        self.retry_times_when_send_failed = retry_times_when_send_failed
        #: Queues per group of a topic created by a send (defaultTopicQueueNums).
        self.default_topic_queue_nums = default_topic_queue_nums
        #: Seconds between route refreshes (pollNameServerInterval).
        self.poll_name_server_interval = poll_name_server_interval
        self.client_ip = client_ip or local_ip()
        self.instance_name = instance_name or default_instance_name()
        self.client_id = f"{self.client_ip}@{self.instance_name}"
        self._ids = UniqueIdGenerator(self.client_ip, os.getpid(),
                                      random.getrandbits(32))
        self._selector = QueueSelector(random.randrange(1 << 16))
        self._publish: dict[str, TopicPublishInfo] = {}
        # Route fetches done per topic by ``_refresh``, and the lock that makes them one.
        self._fetches: dict[str, int] = {}
        self._fetching: dict[str, trio.Lock] = {}
        self._instance: ClientInstance | None = None
        self._nursery: trio.Nursery | None = None

    @asynccontextmanager
    async def start(self, connect: Connect) -> AsyncIterator[Producer]:
        """Run the producer until the block ends (then wait for ``send_async`` sends)."""
        if self._instance is not None:
            raise ClientError("the producer is already started")
        async with open_rpc_client(connect, handlers=self._handlers(),
                                   version=ROCKETMQ_VERSION) as rpc, \
                trio.open_nursery() as nursery:
            self._instance = ClientInstance(rpc, self.namesrv_addr, self.client_id,
                                            timeout=self.send_msg_timeout)
            refresh = trio.CancelScope()

            async def refresh_routes() -> None:
                with refresh:
                    await self._refresh_loop()

            nursery.start_soon(refresh_routes)
            self._nursery = nursery
            try:
                yield self
            finally:
                refresh.cancel()
                self._nursery = None
        self._instance = None

    def _handlers(self) -> dict[int, Handler] | None:
        """What the producer answers of the requests brokers send it: none."""
        return None

    @property
    def instance(self) -> ClientInstance:
        if self._instance is None:
            raise ClientError("the producer is not started (use `async with producer.start(...)`)")
        return self._instance

    async def _refresh_loop(self) -> None:
        while True:
            await trio.sleep(self.poll_name_server_interval)
            for topic in list(self._publish):
                try:
                    await self._update(topic)
                except (RpcError, ClientError) as exc:
                    log.warning("route of %s not refreshed: %s", topic, exc)

    async def _update(self, topic: str) -> TopicPublishInfo:
        route = await self.instance.update_route(topic)
        if route is not None:
            info = publish_info(topic, route)
        else:
            # An unknown topic goes where the default topic does; its broker creates it.
            default = await self.instance.update_route(AUTO_CREATE_TOPIC)
            if default is None:
                self._publish.pop(topic, None)
                raise NoRouteError(f"no route to topic {topic!r}: no name server knows it, "
                                   f"nor the default topic {AUTO_CREATE_TOPIC}")
            info = publish_info(topic, default, self.default_topic_queue_nums)
        self._publish[topic] = info
        return info

    async def _info(self, topic: str) -> TopicPublishInfo:
        info = self._publish.get(topic)
        return info if info is not None and info.ok else await self._update(topic)

    async def fetch_publish_message_queues(self, topic: str) -> list[MessageQueue]:
        """The queues of ``topic`` a send may go to now."""
        return list((await self._update(topic)).message_queues)

    # -- sending ---------------------------------------------------------------

    async def send(self, message: Message, queue: MessageQueue | None = None) -> SendResult:
        """Send ``message`` and return where it was stored.

        With ``queue``, to that queue only, without retries (as RocketMQ's
        ``send(msg, mq)``). Raises ``BrokerError`` for a refusal,
        ``NoRouteError`` if no name server knows the topic or no master was
        routed for it within ``send_msg_timeout``, and the RPC errors when
        the last attempt got no answer.
        """
        unique_id = self._ids.next_id(now_ms())
        header = self._header(message.topic, message.flag,
                              {**message.wire_properties(), PROPERTY_UNIQ_KEY: unique_id})
        return await self._send(RequestCode.SEND_MESSAGE_V2, message.topic, header,
                                message.body, unique_id, queue)

    async def send_batch(self, messages: Sequence[Message],
                         queue: MessageQueue | None = None) -> SendResult:
        """Send ``messages`` (one topic, no delay levels) in one SEND_BATCH_MESSAGE.

        The result's ``msg_id`` and ``offset_msg_id`` list every message's,
        comma-separated; its ``queue_offset`` is the first's.
        """
        if not messages:
            raise ValueError("a batch needs at least one message")
        topic = messages[0].topic
        if any(m.topic != topic for m in messages):
            raise ValueError("the messages of a batch must share one topic")
        if any(m.delay_time_level > 0 for m in messages):
            raise ValueError("delay levels are not supported in a batch")
        if any(m.wait_store_msg_ok != messages[0].wait_store_msg_ok for m in messages):
            raise ValueError("the messages of a batch must share wait_store_msg_ok")
        ids = [self._ids.next_id(now_ms()) for _ in messages]
        props = {} if messages[0].wait_store_msg_ok else {"WAIT": "false"}
        header = self._header(topic, 0, props)
        header["m"] = "true"  # SendMessageRequestHeaderV2.batch
        return await self._send(RequestCode.SEND_BATCH_MESSAGE, topic, header,
                                encode_batch(messages, ids), ",".join(ids), queue)

    def send_async(self, message: Message,
                   on_success: Callable[[SendResult], object] | None = None,
                   on_exception: Callable[[Exception], object] | None = None,
                   queue: MessageQueue | None = None) -> None:
        """Start sending ``message``; the outcome goes to the callbacks (see the module)."""
        if self._nursery is None:
            raise ClientError("the producer is not started (use `async with producer.start(...)`)")

        async def run() -> None:
            try:
                result = await self.send(message, queue)
            except (RpcError, ClientError, ValueError) as exc:
                if on_exception is None:
                    log.warning("async send to %s failed: %s", message.topic, exc)
                else:
                    on_exception(exc)
                return
            if on_success is not None:
                on_success(result)

        self._nursery.start_soon(run)

    async def send_oneway(self, message: Message, queue: MessageQueue | None = None) -> None:
        """Write ``message`` to a queue's master without waiting for an answer."""
        info = await self._info(message.topic)
        if queue is None:
            queue = self._selector.select(info)
        address = info.masters.get(queue.broker_name)
        if address is None:
            raise NoRouteError(f"no master known for {queue.broker_name}")
        unique_id = self._ids.next_id(now_ms())
        header = self._header(message.topic, message.flag,
                              {**message.wire_properties(), PROPERTY_UNIQ_KEY: unique_id})
        header.update(e=str(queue.queue_id), n=queue.broker_name)
        connection = await self.instance.connection(dial_address(address))
        await connection.invoke_oneway(RequestCode.SEND_MESSAGE_V2, header, message.body,
                                       timeout=self.send_msg_timeout)

    def _header(self, topic: str, flag: int, properties: dict[str, str]) -> dict[str, str]:
        # SendMessageRequestHeaderV2's one-letter keys; queue id (e) and broker name (n)
        # are set per attempt. The default topic (c, d) is what a broker creates an
        # unknown topic from.
        return {"a": self.group, "b": topic, "c": AUTO_CREATE_TOPIC,
                "d": str(self.default_topic_queue_nums), "f": "0", "g": str(now_ms()),
                "h": str(flag), "i": properties_to_bytes(properties).decode(), "j": "0"}

    async def _send(self, code: int, topic: str, header: dict[str, str], body: bytes,
                    unique_id: str, queue: MessageQueue | None) -> SendResult:
        """Run one send's ``SendFlow``: its attempts, route fetches and pauses."""
        flow = SendFlow(topic, unique_id, self._publish.get(topic), self._selector,
                        now=trio.current_time(), send_msg_timeout=self.send_msg_timeout,
                        retry_times_when_send_failed=self.retry_times_when_send_failed,
                        queue=queue)
        action = flow.start(trio.current_time())
        while True:
            if isinstance(action, SendAttempt):
                header.update(e=str(action.queue.queue_id), n=action.queue.broker_name)
                try:
                    answer = await self.instance.invoke(
                        dial_address(action.address), code, header, body,
                        timeout=action.timeout)
                except RpcError as exc:
                    log.info("send to %s got no answer: %s", action.address, exc)
                    action = flow.unanswered(exc, trio.current_time())
                else:
                    action = flow.answered(action.address, answer, trio.current_time())
            elif isinstance(action, FetchRoute):
                try:
                    info = await self._refresh(topic)
                except (RpcError, ClientError) as exc:
                    action = flow.not_routed(exc, trio.current_time())
                else:
                    action = flow.routed(info, trio.current_time())
            elif isinstance(action, WaitForRetry):
                await trio.sleep_until(action.until)
                action = flow.timer(trio.current_time())
            elif isinstance(action, Sent):
                return action.result
            else:
                raise action.error

    async def _refresh(self, topic: str) -> TopicPublishInfo:
        """The topic's route fetched again, once for all the sends that ask while one
        fetch is under way (a failover makes every send in flight ask)."""
        asked = self._fetches.get(topic, 0)
        async with self._fetching.setdefault(topic, trio.Lock()):
            info = self._publish.get(topic)
            if self._fetches.get(topic, 0) != asked and info is not None:
                return info  # fetched while this send waited for the lock
            info = await self._update(topic)
            self._fetches[topic] = asked + 1
            return info
