"""triomq's client: producers and consumers that speak RocketMQ's protocol, on trio.

The names are those of RocketMQ's Java client::

    producer = Producer("orders-producer", namesrv_addr=["10.0.0.1:9876"])
    async with producer.start(node.connect):
        result = await producer.send(Message("orders", b"...", tags="paid", keys="o-1"))

    consumer = PushConsumer("orders-consumer", namesrv_addr=["10.0.0.1:9876"])
    consumer.subscribe("orders", "paid || refunded")
    consumer.register_message_listener(MessageListenerConcurrently(handle))
    async with consumer.start(node.connect):
        ...

Each client runs inside an ``async with client.start(connect)`` block, where
``connect`` opens a stream to an address (a node's ``connect``, which picks
the transport by scheme). Name servers are given as RocketMQ gives them
(``host:port``, TCP) or with a scheme (``inproc://ns``).

The modules, each one concept; the pure ones (no I/O, no clock) hold the
rules, the others drive them:

- ``message``: ``Message``, ``MessageExt``, ``MessageQueue``, ``SendResult``,
  pulled bodies and batch bodies (pure); ``unique_id``: ``UNIQ_KEY`` (pure).
- ``producer``: ``Producer``, on ``publish`` (publish info, queue selection,
  retry rules; pure); ``transaction_producer``: ``TransactionProducer``
  (RocketMQ's transactional messages), on ``transaction`` (pure).
- ``push_consumer``: ``PushConsumer``; ``lite_pull_consumer``:
  ``LitePullConsumer``; both on ``consumer_base`` (membership, rebalancing,
  pulling, locks) and ``offset_store``, which drive the pure ``allocate``,
  ``pull``, ``process_queue``, ``consume_from``, ``subscription``, ``wire``,
  ``listener`` and ``consume_retry``; ``simple_consumer``: ``SimpleConsumer``
  (pop consumption: receive, ack, change the invisible time), on ``pop`` (pure).
- ``instance``: routes and connections a client shares; ``codes`` and
  ``errors``.
"""

from triomq.client.core.consume_from import ConsumeFromWhere
from triomq.client.core.errors import BrokerError, ClientError, NoRouteError
from triomq.client.core.listener import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyStatus,
    MessageListenerConcurrently,
    MessageListenerOrderly,
    consume_concurrently_context,
)
from triomq.client.core.message import (
    Message,
    MessageDecodeError,
    MessageExt,
    MessageQueue,
    SendResult,
    SendStatus,
)
from triomq.client.core.pull import PullThresholds
from triomq.client.core.transaction import (
    LocalTransactionState,
    TransactionListener,
    TransactionSendResult,
)
from triomq.client.lite_pull_consumer import LitePullConsumer
from triomq.client.producer import Producer
from triomq.client.push_consumer import PushConsumer
from triomq.client.simple_consumer import Received, SimpleConsumer
from triomq.client.transaction_producer import TransactionProducer

__all__ = [
    "BrokerError",
    "ClientError",
    "ConsumeConcurrentlyContext",
    "ConsumeConcurrentlyStatus",
    "ConsumeFromWhere",
    "ConsumeOrderlyStatus",
    "LitePullConsumer",
    "LocalTransactionState",
    "Message",
    "MessageDecodeError",
    "MessageExt",
    "MessageListenerConcurrently",
    "MessageListenerOrderly",
    "MessageQueue",
    "NoRouteError",
    "Producer",
    "PullThresholds",
    "PushConsumer",
    "Received",
    "SendResult",
    "SendStatus",
    "SimpleConsumer",
    "TransactionListener",
    "TransactionProducer",
    "TransactionSendResult",
    "consume_concurrently_context",
]
