"""The transactional producer: RocketMQ's ``TransactionMQProducer`` on trio.

::

    class Orders:
        async def execute_local_transaction(self, message, arg):
            await db.insert_order(arg)
            return LocalTransactionState.COMMIT_MESSAGE

        async def check_local_transaction(self, message):
            return (LocalTransactionState.COMMIT_MESSAGE
                    if await db.has_order(message.keys[0]) else
                    LocalTransactionState.ROLLBACK_MESSAGE)

    producer = TransactionProducer("orders-tx", namesrv_addr=[...],
                                   transaction_listener=Orders())
    async with producer.start(node.connect):
        result = await producer.send_message_in_transaction(Message("orders", b"..."), order)

``send_message_in_transaction`` sends the half message (the ``Producer``'s
send flow, with ``triomq.client.core.transaction``'s header), runs the
listener's local transaction and sends END_TRANSACTION (oneway) with its
state: consumers of the topic see the message once it is committed, never
when rolled back. A state left ``UNKNOW`` (or an END_TRANSACTION lost on
the way) is asked about later: the broker sends CHECK_TRANSACTION_STATE to a
producer of the group, which calls ``check_local_transaction`` and answers
with END_TRANSACTION (``fromTransactionCheck``). The producer heartbeats
its group to the brokers it sends to (at its first send to each, then every
``heartbeat_broker_interval``), so they know where to send checks.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Sequence
from contextlib import asynccontextmanager

import trio

from triomq.client.core.codes import RequestCode
from triomq.client.core.errors import BrokerError, ClientError, NoRouteError
from triomq.client.core.message import (
    PROPERTY_UNIQ_KEY,
    Message,
    MessageDecodeError,
    decode_messages,
)
from triomq.client.core.transaction import (
    PREPARED_SYS_FLAG,
    PROPERTY_PRODUCER_GROUP,
    LocalTransactionState,
    TransactionListener,
    TransactionSendResult,
    check_end_fields,
    end_fields,
    half_message,
    local_state,
)
from triomq.client.producer import Producer, now_ms
from triomq.protocol.heartbeat import HeartbeatData
from triomq.protocol.remoting import RemotingCommand
from triomq.rpc import Connect, Handler, RpcConnection, RpcError

__all__ = ["TransactionProducer"]

log = logging.getLogger("triomq.client")


async def _state(answer: LocalTransactionState | Awaitable[LocalTransactionState]
                 ) -> LocalTransactionState:
    state = await answer if inspect.isawaitable(answer) else answer
    if not isinstance(state, LocalTransactionState):
        raise ClientError(f"a transaction listener returned {state!r}, not a "
                          "LocalTransactionState")
    return state


class TransactionProducer(Producer):
    """A ``Producer`` that also sends messages in transactions (see the module)."""

    def __init__(self, group: str = "DEFAULT_PRODUCER", namesrv_addr: Sequence[str] = (), *,
                 transaction_listener: TransactionListener | None = None,
                 heartbeat_broker_interval: float = 30.0, **options: object) -> None:
        super().__init__(group, namesrv_addr, **options)  # type: ignore[arg-type]
        self.transaction_listener = transaction_listener
        #: Seconds between heartbeats to the brokers (heartbeatBrokerInterval).
        self.heartbeat_broker_interval = heartbeat_broker_interval
        self._heartbeated: set[str] = set()

    def _handlers(self) -> dict[int, Handler]:
        return {RequestCode.CHECK_TRANSACTION_STATE: self._check_transaction_state}

    @asynccontextmanager
    async def start(self, connect: Connect) -> AsyncIterator[TransactionProducer]:
        """Run the producer until the block ends."""
        if self.transaction_listener is None:
            raise ClientError("a TransactionProducer needs a transaction_listener")
        async with super().start(connect), trio.open_nursery() as nursery:
            nursery.start_soon(self._heartbeat_loop)
            try:
                yield self
            finally:
                nursery.cancel_scope.cancel()
        self._heartbeated.clear()

    # -- heartbeats ----------------------------------------------------------------

    def _masters(self) -> list[str]:
        brokers = self.instance.broker_addresses(list(self._publish))
        return sorted(addresses[0] for addresses in brokers.values() if 0 in addresses)

    async def _heartbeat(self, addresses: Sequence[str]) -> None:
        body = HeartbeatData(self.client_id, (self.group,)).encode()
        for address in addresses:
            try:
                await self.instance.checked(address, RequestCode.HEART_BEAT, {}, body)
            except (RpcError, BrokerError) as exc:
                self._heartbeated.discard(address)
                log.info("heartbeat to %s: %s", address, exc)
            else:
                self._heartbeated.add(address)

    async def _heartbeat_loop(self) -> None:
        while True:
            await trio.sleep(self.heartbeat_broker_interval)
            await self._heartbeat(self._masters())

    # -- the transaction ----------------------------------------------------------------

    async def send_message_in_transaction(self, message: Message, arg: object = None
                                          ) -> TransactionSendResult:
        """Send ``message`` in a transaction: its half message, the listener's
        ``execute_local_transaction(message, arg)``, then END_TRANSACTION."""
        listener = self.transaction_listener
        if listener is None:
            raise ClientError("a TransactionProducer needs a transaction_listener")
        half = half_message(message, self.group)
        await self._info(half.topic)
        unknown = [address for address in self._masters() if address not in self._heartbeated]
        if unknown:
            await self._heartbeat(unknown)
        unique_id = self._ids.next_id(now_ms())
        header = self._header(half.topic, half.flag,
                              {**half.wire_properties(), PROPERTY_UNIQ_KEY: unique_id})
        header["f"] = str(PREPARED_SYS_FLAG)
        result = await self._send(RequestCode.SEND_MESSAGE_V2, half.topic, header,
                                  half.body, unique_id, None)
        state = local_state(result)
        if state is None:
            try:
                state = await _state(listener.execute_local_transaction(half, arg))
            except Exception as exc:
                log.warning("the local transaction of message %s raised: %r", unique_id, exc)
                state = LocalTransactionState.UNKNOW
        await self._end_transaction(result.message_queue.broker_name,
                                    end_fields(result, state, self.group))
        return TransactionSendResult(result, state, unique_id)

    async def _end_transaction(self, broker_name: str, fields: dict[str, str]) -> None:
        address = self.instance.master_address(broker_name)
        try:
            if address is None:
                raise NoRouteError(f"no master known for {broker_name}")
            connection = await self.instance.connection(address)
            await connection.invoke_oneway(RequestCode.END_TRANSACTION, fields,
                                           timeout=self.send_msg_timeout)
        except (RpcError, ClientError) as exc:
            # The broker asks about the transaction later.
            log.warning("END_TRANSACTION of %s not sent: %s", fields["msgId"], exc)

    async def _check_transaction_state(self, request: RemotingCommand,
                                       connection: RpcConnection) -> None:
        """A broker's CHECK_TRANSACTION_STATE: ask the listener, answer END_TRANSACTION."""
        listener = self.transaction_listener
        try:
            messages = decode_messages(request.body)
        except MessageDecodeError as exc:
            log.warning("CHECK_TRANSACTION_STATE from %s: %s", connection.peer, exc)
            return
        if listener is None or len(messages) != 1:
            return
        message = messages[0]
        if message.properties.get(PROPERTY_PRODUCER_GROUP) != self.group:
            log.warning("CHECK_TRANSACTION_STATE from %s for group %r: not this producer's",
                        connection.peer, message.properties.get(PROPERTY_PRODUCER_GROUP))
            return
        try:
            state = await _state(listener.check_local_transaction(message))
        except Exception as exc:
            log.warning("checking the local transaction of message %s raised: %r",
                        message.msg_id, exc)
            state = LocalTransactionState.UNKNOW
        try:
            await connection.invoke_oneway(
                RequestCode.END_TRANSACTION,
                check_end_fields(request.ext_fields, message, state, self.group),
                timeout=self.send_msg_timeout)
        except RpcError as exc:
            log.info("END_TRANSACTION answering a check from %s: %s", connection.peer, exc)
