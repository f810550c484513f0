"""One put on a broker, from its request to its answer (sans-I/O).

A put is a client's send (SEND_MESSAGE_V2, SEND_MESSAGE, SEND_BATCH_MESSAGE:
``start``) or a message the broker writes itself (the escape bridge's:
``start_own``). Its driver (``triomq.broker.send.processor`` over trio, the
cluster simulation's broker over virtual time) feeds it the request, the
broker's state, what the store and the replicas did and the clock, and
does what it returns:

1. the checks (``triomq.broker.send.core.put_checks``), in RocketMQ's order: the
   header (MESSAGE_ILLEGAL), for a batch its topic not a retry topic; the
   master role, the size, the topic and queue id (a topic created on the
   way is a ``TopicCreated``: the driver saves the table), the producer
   group, the SyncStateSet; a compressed body's inflated size; a batch's
   every message. Any refusal is the ``PutReply``, and nothing is stored;
   then where it is stored (``triomq.broker.secondary.core.schedule_put``: a delayed
   message waits under ``SCHEDULE_TOPIC_XXXX``, a timer message under
   ``rmq_sys_wheel_timer``; a bad ``DELAY`` or timer time, or a delayed or
   timer batch, is refused);
2. ``Append``: the records, with the store's fields set (store host and
   time, the ``CLUSTER`` property, a ``UNIQ_KEY`` made here when a single
   message has none, laid out as a client's, as RocketMQ 5's broker does);
   a single message with ``TRAN_MSG`` is stored as a half message
   (``triomq.broker.secondary.core.transaction``; NO_PERMISSION with
   ``reject_transaction_message``), and so is a broker's own put with
   ``TRAN_MSG`` and sysFlag PREPARED (a half message an acting slave escapes);
3. ``WaitFlushed`` (unless the flush policy is ``"none"``) and then
   ``WaitReplicated`` (``allAckInSyncStateSet`` or ``minInSyncReplicas``,
   the HA ``sync_replication`` rule), both within ``sync_flush_timeout``
   of the put's arrival;
4. the ``PutReply``: SUCCESS, FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, or
   SERVICE_NOT_AVAILABLE when the broker stopped being master first. Once
   stored, it always names where the records went (``msgId``: their offset
   ids joined by commas, ``queueId``, ``queueOffset``: the first's): a
   timed-out put is on the master and may still reach the slaves.

SEND_MESSAGE's header spells the V2 header's fields out
(``producerGroup`` for ``a``... ``maxReconsumeTimes`` for ``l``); it is
read as the V2 one and its ``batch`` field decides between a single and a
batch put, as RocketMQ's ``SendMessageProcessor`` does.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Mapping, Sequence

import attrs

from triomq.broker.core.codes import SEND_V2_FIELDS, RequestCode, ResponseCode
from triomq.broker.core.escape_bridge import EscapedMessage
from triomq.broker.core.headers import HeaderError, SendHeader, offset_msg_id, parse_send_header
from triomq.broker.metadata.core.topic_table import TopicTable
from triomq.broker.secondary.core import transaction
from triomq.broker.secondary.core.schedule_put import check_batch, route_put
from triomq.broker.send.core.batch import BatchError
from triomq.broker.send.core.put_checks import (
    BrokerState,
    PutSettings,
    batch_records,
    check_group,
    check_in_sync,
    check_master,
    check_size,
    check_topic,
    host_port,
    inflates_too_large,
)
from triomq.ha.core.sync_replication import ReplicationStatus
from triomq.protocol.message import (
    PROPERTY_CLUSTER,
    PROPERTY_UNIQ_KEY,
    MessageRecord,
    RecordError,
)
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.topic_rules import RETRY_GROUP_TOPIC_PREFIX

__all__ = ["Append", "PutAction", "PutFlow", "PutReply", "TopicCreated", "WaitFlushed",
           "WaitReplicated", "v2_fields"]

#: ``SendMessageRequestHeader``'s names of the V2 header's one-letter keys (RocketMQ's
#: ``createSendMessageRequestHeaderV1`` maps ``l`` to ``maxReconsumeTimes``).
_V1_NAMES = {**{name: key for key, name in SEND_V2_FIELDS.items()
                if key not in ("l", "n")}, "maxReconsumeTimes": "l"}

_REPLICATION_CODES = {
    ReplicationStatus.PUT_OK: (ResponseCode.SUCCESS, None),
    ReplicationStatus.FLUSH_SLAVE_TIMEOUT: (
        ResponseCode.FLUSH_SLAVE_TIMEOUT, "wait for the slaves' acks timed out"),
    ReplicationStatus.IN_SYNC_REPLICAS_NOT_ENOUGH: (
        ResponseCode.SYSTEM_ERROR, "in-sync replicas not enough"),
}


def v2_fields(fields: Mapping[str, str]) -> dict[str, str]:
    """A ``SendMessageRequestHeader``'s fields under the V2 header's keys (others as
    they are)."""
    return {_V1_NAMES.get(name, name): value for name, value in fields.items()}


@attrs.frozen
class TopicCreated:
    """The put created its topic in the table: save and announce it; then ``resume``."""

    topic: str


@attrs.frozen
class Append:
    """Append ``records`` to the commit log (``batch``: in one ``append_batch``); then
    ``appended`` with where they landed, or ``append_failed``."""

    records: tuple[MessageRecord, ...]
    batch: bool


@attrs.frozen
class WaitFlushed:
    """Wait until the log is flushed to ``offset``, at most until ``deadline``; then
    ``flushed``."""

    offset: int
    deadline: float


@attrs.frozen
class WaitReplicated:
    """Wait until enough replicas hold the bytes before ``offset``, at most
    ``timeout_ms``; then ``replicated``."""

    offset: int
    timeout_ms: int


@attrs.frozen
class PutReply:
    """The put is over: answer ``response``."""

    response: RemotingCommand


PutAction = TopicCreated | Append | WaitFlushed | WaitReplicated | PutReply

#: Where a record landed: ``(physical offset, size, queue offset, ...)`` (the store's
#: ``AppendResult``, or ``pack_records``' placement).
Placed = Sequence[int]


def _illegal(remark: str) -> PutReply:
    return PutReply(RemotingCommand.response(ResponseCode.MESSAGE_ILLEGAL, remark=remark))


class PutFlow:
    """One put, arrived at ``now`` (the driver's clock, in seconds)."""

    def __init__(self, settings: PutSettings, *, now: float) -> None:
        self.settings = settings
        self.deadline = now + settings.sync_flush_timeout / 1000
        self._arrived_ms = round(now * 1000)
        self._created = False
        #: The records' topic and queue, once the checks name them.
        self.topic = ""
        self.queue_id = 0
        self._resumed: PutAction | None = None
        self._end = 0
        self._fields: dict[str, str] = {}

    # -- the request ---------------------------------------------------------------

    def start(self, request: RemotingCommand, peer: str, broker: BrokerState,
              topics: TopicTable, *, store_ms: int, new_id: Callable[[int], str]
              ) -> PutAction:
        """A client's send from ``peer``; ``store_ms`` is the store time, ``new_id`` makes
        a message id from it."""
        fields = request.ext_fields
        batch = request.code == RequestCode.SEND_BATCH_MESSAGE
        if request.code == RequestCode.SEND_MESSAGE:
            fields = v2_fields(fields)
            # Java's Boolean.parseBoolean: "true" in any case, anything else is false.
            batch = fields.get("m", "").lower() == "true"
        try:
            header = parse_send_header(fields)
        except HeaderError as exc:
            return _illegal(str(exc))
        if batch and header.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return _illegal(f"batch request does not support retry group {header.topic}")
        self.topic, self.queue_id = header.topic, header.queue_id
        action = self._checked(header, request.body, fields, peer, broker, topics,
                               store_ms, new_id, batch)
        if self._created:
            self._resumed = action
            return TopicCreated(header.topic)
        return action

    def resume(self) -> PutAction:
        """After ``TopicCreated``: the put's next action."""
        action, self._resumed = self._resumed, None
        assert action is not None, "resume() follows a TopicCreated"
        return action

    def _checked(self, header: SendHeader, body: bytes, fields: Mapping[str, str], peer: str,
                 broker: BrokerState, topics: TopicTable, store_ms: int,
                 new_id: Callable[[int], str], batch: bool) -> PutAction:
        settings = self.settings
        refusal = check_master(settings, broker) or check_size(settings, len(body))
        if refusal is None:
            refusal, self._created = check_topic(settings, topics, header.topic,
                                                 header.queue_id, fields, self._arrived_ms)
        refusal = (refusal or check_group(header.producer_group)
                   or check_in_sync(settings, broker))
        if refusal is not None:
            return PutReply(refusal)
        born_host = host_port(peer)
        if batch:
            try:
                records = batch_records(settings, header, body, born_host, store_ms)
            except BatchError as exc:
                return _illegal(str(exc))
            refusal = check_batch((r.properties for r in records), timer=settings.timer)
            return PutReply(refusal) if refusal is not None else Append(tuple(records), batch=True)
        too_large = inflates_too_large(settings, header.sys_flag, body)
        if too_large is not None:
            return _illegal(too_large)
        record = MessageRecord(
            topic=header.topic, body=body, queue_id=header.queue_id, flag=header.flag,
            sys_flag=header.sys_flag, born_timestamp=header.born_timestamp,
            born_host=born_host, store_timestamp=store_ms, store_host=settings.store_host,
            reconsume_times=header.reconsume_times,
            properties=self._properties(header.properties, store_ms, new_id))  # type: ignore[arg-type]
        routed = route_put(record.topic, record.queue_id, record.properties, record.sys_flag,
                           max_delay_level=settings.max_delay_level, timer=settings.timer,
                           now_ms=store_ms)
        if isinstance(routed, RemotingCommand):
            return PutReply(routed)
        if transaction.is_prepared(record.properties, record.reconsume_times):
            if settings.reject_transaction_message:
                return PutReply(transaction.reject_response(settings.store_host[0]))
            # A half message is not delayed; its DELAY rides along to the commit's put.
            return Append((transaction.half_message(record),), batch=False)
        return Append((attrs.evolve(
            record, topic=routed.topic, queue_id=routed.queue_id,
            properties=routed.properties),), batch=False)  # type: ignore[arg-type]

    def start_own(self, message: EscapedMessage, broker: BrokerState, *, store_ms: int,
                  new_id: Callable[[int], str]) -> PutAction:
        """A message the broker writes itself: the store's checks (master, size, in-sync
        replicas), none of a client's send's (topic table, producer group)."""
        settings = self.settings
        self.topic, self.queue_id = message.topic, message.queue_id
        refusal = (check_master(settings, broker) or check_size(settings, len(message.body))
                   or check_in_sync(settings, broker))
        if refusal is not None:
            return PutReply(refusal)
        routed = route_put(message.topic, message.queue_id, message.properties,
                           message.sys_flag, max_delay_level=settings.max_delay_level,
                           timer=settings.timer, now_ms=store_ms, own=True)
        if isinstance(routed, RemotingCommand):
            return PutReply(routed)
        record = MessageRecord(
            topic=routed.topic, body=message.body, queue_id=routed.queue_id,
            flag=message.flag, sys_flag=message.sys_flag,
            born_timestamp=message.born_timestamp or store_ms,
            born_host=message.born_host or settings.store_host, store_timestamp=store_ms,
            store_host=settings.store_host, reconsume_times=message.reconsume_times,
            prepared_transaction_offset=message.prepared_transaction_offset,
            properties=self._properties(routed.properties, store_ms, new_id))  # type: ignore[arg-type]
        if transaction.is_own_half(message.properties, message.sys_flag):
            # An acting slave's escaped half message: a half here, checked by this master.
            if settings.reject_transaction_message:
                return PutReply(transaction.reject_response(settings.store_host[0]))
            record = transaction.half_message(record)
        return Append((record,), batch=False)

    def _properties(self, properties: Mapping[str, str], store_ms: int,
                    new_id: Callable[[int], str]) -> dict[str, str]:
        stored = {**properties, PROPERTY_CLUSTER: self.settings.cluster_name}
        if not stored.get(PROPERTY_UNIQ_KEY):
            stored[PROPERTY_UNIQ_KEY] = new_id(store_ms)
        return stored

    # -- the store and the replicas ------------------------------------------------

    def appended(self, placed: Sequence[Placed], now: float) -> PutAction:
        """The records landed at ``placed`` (one per record, in order)."""
        store_host = self.settings.store_host
        last = placed[-1]
        self._end = last[0] + last[1]
        self._fields = {
            "msgId": ",".join(offset_msg_id(store_host, p[0]) for p in placed),
            "queueId": str(self.queue_id),
            "queueOffset": str(placed[0][2]),
        }
        if self.settings.flush_policy == "none":
            return self._wait_replicated(now)
        return WaitFlushed(self._end, self.deadline)

    def append_failed(self, error: RecordError | OSError, *, out_of_resources: bool = False
                      ) -> PutReply:
        """The store refused the records: a record it cannot encode, or an OS error
        (``out_of_resources``: out of descriptors or disk, the broker keeps serving
        what it holds). The store's own words name its files: they stay out of the
        answer."""
        if isinstance(error, RecordError):
            return _illegal(error.reason)
        if out_of_resources:
            short_of = errno.errorcode.get(error.errno or 0, "resources")
            return PutReply(RemotingCommand.response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"the broker is out of {short_of}: the put was not stored; retry "
                       f"later or elsewhere"))
        reason = errno.errorcode.get(error.errno or 0, type(error).__name__)
        return PutReply(RemotingCommand.response(
            ResponseCode.SYSTEM_ERROR,
            remark=f"the store refused the message ({reason}); see the broker's log"))

    def flushed(self, flushed_offset: int, now: float) -> PutAction:
        """The flush wait is over with the log flushed to ``flushed_offset``."""
        if flushed_offset < self._end:
            return PutReply(RemotingCommand.response(
                ResponseCode.FLUSH_DISK_TIMEOUT, remark="flush to disk timed out",
                ext_fields=self._fields))
        return self._wait_replicated(now)

    def _wait_replicated(self, now: float) -> WaitReplicated:
        return WaitReplicated(self._end, max(0, round((self.deadline - now) * 1000)))

    def replicated(self, status: ReplicationStatus | None) -> PutReply:
        """How the replication wait ended (None: the broker is no longer master)."""
        if status is None:
            return PutReply(RemotingCommand.response(
                ResponseCode.SERVICE_NOT_AVAILABLE,
                remark="the broker stopped being master before the put was replicated",
                ext_fields=self._fields))
        code, remark = _REPLICATION_CODES[status]
        return PutReply(RemotingCommand.response(code, remark=remark, ext_fields=self._fields))
