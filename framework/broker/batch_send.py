"""SEND_BATCH_MESSAGE 320: several messages of one queue stored with one append.

The header is the ``SendMessageRequestHeaderV2`` of a single send (its
``batch`` field true); the body is RocketMQ's batch encoding
(``triomq.broker.batch``). The batch passes the single send's checks
(``BrokerProcessor.check_send``: master, the whole body within
``max_message_size``, the topic, the queue id, the SyncStateSet), and, as
in RocketMQ, a batch to a retry topic is refused. Every message is then
checked (its fields, its properties with the header's added, its stored
size within a commit-log segment) before anything is stored: a bad one is
MESSAGE_ILLEGAL naming its index and field, and nothing of the batch is
stored. The records take the header's topic, queue, sysFlag, born time
and reconsume times, each its own flag, body and properties (the
header's properties added to each, the message's own winning: a Java
client puts the batch's own UNIQ_KEY there, and each message has its own),
and the broker's cluster name as ``CLUSTER``, as RocketMQ 5 stores it.

The records go in with one ``append_batch`` and the answer, after the
flush and the replication a single put waits for, carries ``msgId``: the
records' offset message ids joined by commas, ``queueOffset``: the first
record's, as RocketMQ answers.
"""

from __future__ import annotations

import time

from triomq.broker.batch import BatchError, decode_batch
from triomq.broker.codes import RequestCode, ResponseCode
from triomq.broker.headers import HeaderError, SendHeader, parse_send_header
from triomq.broker.processor import BrokerProcessor, host_port
from triomq.protocol.message import (
    MAX_PROPERTIES_LENGTH,
    MIN_RECORD_SIZE,
    PROPERTY_CLUSTER,
    MessageRecord,
    RecordError,
    pack_ip,
    properties_to_bytes,
)
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.topic_rules import RETRY_GROUP_TOPIC_PREFIX
from triomq.rpc import RpcConnection, RpcServer

__all__ = ["BatchSendHandler"]


def _stored_size(record: MessageRecord, properties: bytes) -> int:
    """The size of ``record`` in the commit log (``message.encode``'s arithmetic)."""
    topic = len(record.topic.encode())
    hosts = sum(12 for host in (record.born_host, record.store_host)
                if len(pack_ip(host[0])) == 16)
    return (MIN_RECORD_SIZE + hosts + len(record.body) + topic + (1 if topic > 127 else 0)
            + len(properties))


class BatchSendHandler:
    """Serves SEND_BATCH_MESSAGE through the broker's put path."""

    def __init__(self, processor: BrokerProcessor) -> None:
        self.processor = processor

    def register(self, server: RpcServer) -> None:
        server.register(RequestCode.SEND_BATCH_MESSAGE, self.send_batch)

    async def send_batch(self, request: RemotingCommand, peer: RpcConnection
                         ) -> RemotingCommand:
        processor = self.processor
        try:
            header = parse_send_header(request.ext_fields)
        except HeaderError as exc:
            return RemotingCommand.response(ResponseCode.MESSAGE_ILLEGAL, remark=str(exc))
        if header.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return RemotingCommand.response(
                ResponseCode.MESSAGE_ILLEGAL,
                remark=f"batch request does not support retry group {header.topic}")
        refusal = processor.check_send(header, len(request.body), request.ext_fields)
        if refusal is not None:
            return refusal
        try:
            records = self._records(header, request.body, host_port(peer.peer))
        except BatchError as exc:
            return RemotingCommand.response(ResponseCode.MESSAGE_ILLEGAL, remark=str(exc))
        return await processor.put(header.topic, header.queue_id,
                                   lambda: processor.log.append_batch(records))

    def _records(self, header: SendHeader, body: bytes, born_host: tuple[str, int]
                 ) -> list[MessageRecord]:
        """The records of a batch, every one checked; ``BatchError`` names a bad one."""
        processor = self.processor
        store_timestamp = time.time_ns() // 1_000_000
        records = []
        for index, message in enumerate(decode_batch(body)):
            properties = {**header.properties, **message.properties,
                          PROPERTY_CLUSTER: processor.config.cluster_name}
            record = MessageRecord(
                topic=header.topic, body=message.body, queue_id=header.queue_id,
                flag=message.flag, sys_flag=header.sys_flag,
                born_timestamp=header.born_timestamp, born_host=born_host,
                store_timestamp=store_timestamp, store_host=processor.store_host,
                reconsume_times=header.reconsume_times, properties=properties)
            too_large = processor.inflates_too_large(header.sys_flag, message.body)
            if too_large is not None:
                raise BatchError(index, message.position, "body", too_large)
            try:
                raw = properties_to_bytes(properties)
            except RecordError as exc:
                raise BatchError(index, message.position, "properties", exc.reason) from None
            if len(raw) > MAX_PROPERTIES_LENGTH:
                raise BatchError(index, message.position, "properties",
                                 f"{len(raw)} bytes with the header's, at most "
                                 f"{MAX_PROPERTIES_LENGTH}")
            size = _stored_size(record, raw)
            if size > processor.log.segment_size:
                raise BatchError(index, message.position, "body",
                                 f"the stored message would take {size} bytes, more than a "
                                 f"commit-log segment ({processor.log.segment_size})")
            records.append(record)
        return records
