"""POP_MESSAGE 200050, ACK_MESSAGE 200051, CHANGE_MESSAGE_INVISIBLETIME 200053 and
BATCH_ACK_MESSAGE 200151 at run time.

The rules are in ``triomq.broker.pop.core`` (``pop``: the header, the
refusals and what a pop takes; ``receipt``: the handles; ``checkpoint``: the
revive topic's records). This driver reads the queues, moves the group's
pop offsets (its consumer offsets, which slaves copy) past what it took,
writes each pop's checkpoints and each ack to the revive topic
``rmq_sys_REVIVE_LOG_<cluster>`` through the escape bridge (a checkpoint
not stored drops its queue's messages from the answer and moves the pop
offset back to where they start) and answers with the records back to
back, as a pull does. A message of the
group's pop retry topic is answered re-encoded under the popped topic with
its ``POP_CK`` handle, as RocketMQ does; the others carry none, and a
client builds their handles from ``startOffsetInfo``/``msgOffsetInfo``.

A pop that finds nothing waits up to its ``pollTime`` for records to land
(``appended``), then answers POLLING_TIMEOUT. ``bornTime`` is not compared
with the broker's clock (RocketMQ refuses a pop older than its pollTime
plus 500 ms): clients' clocks are their own.

BATCH_ACK_MESSAGE 200151 (``core.batch_ack``) writes one batch ack per
checkpoint it names, once every offset of every ack passes the checks a
single ack's handle does (one refusal refuses the request: nothing is
stored). A master pops with its own bridge. A slave acting for its absent
master (seed 003; ``acting``, set for its acting term) serves the four
requests too, reading its own replica of the queues and moving its own
offsets, its checkpoints and acks escaped through the acting bridge to one
master of another group, which revives them (``revive_service``); it writes
nothing to its own log. Any other slave refuses them with
SERVICE_NOT_AVAILABLE.

Pop times are the broker's clock (``triomq.clock.EpochClock``), so a test's
mock clock moves them too.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterator

import attrs
import trio

from triomq.broker.components import ComponentView
from triomq.broker.config import BrokerConfig
from triomq.broker.consume.core.pull_lookup import confirmed_queue_max
from triomq.broker.consume.core.subscription_groups import SubscriptionGroupConfig
from triomq.broker.consume.offset_service import ConsumerOffsetService
from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.broker.core.escape_bridge import EscapeBridge
from triomq.broker.metadata.core.topic_table import TopicRefused
from triomq.broker.metadata.topics import TopicService
from triomq.broker.pop.core.batch_ack import BatchAck, parse_batch_ack
from triomq.broker.pop.core.checkpoint import AckMsg, CheckPoint, revive_message
from triomq.broker.pop.core.pop import (
    PopHeader,
    PopPlan,
    PopRefused,
    QueuePick,
    admit_pop,
    parse_pop_header,
    plan_pop,
)
from triomq.broker.pop.core.receipt import (
    PROPERTY_POP_CK,
    Receipt,
    ReceiptRefused,
    parse_receipt,
    pop_retry_topic,
    receipt_refusal,
    revive_topic,
    topic_kind,
)
from triomq.clock import EpochClock
from triomq.protocol.header_fields import INT32, INT64, HeaderFields
from triomq.protocol.message import PROPERTY_TAGS, encode
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.route import PERM_READ, PERM_WRITE, TopicConfig
from triomq.rpc import RpcConnection, RpcServer
from triomq.store import CommitLog, StoreError

__all__ = ["PopService", "pop_retry_topic_config"]

log = logging.getLogger("triomq.broker")


def pop_retry_topic_config(name: str) -> TopicConfig:
    """A pop retry topic as RocketMQ creates it: one queue, read and write."""
    return TopicConfig(name, read_queue_nums=1, write_queue_nums=1,
                       perm=PERM_READ | PERM_WRITE)


def _refused(code: int, remark: str) -> RemotingCommand:
    return RemotingCommand.response(code, remark=remark)


class PopService:
    """The pop requests of a broker (a master's: a slave refuses them)."""

    def __init__(self, *, config: BrokerConfig, log: CommitLog, topics: TopicService,
                 offsets: ConsumerOffsetService,
                 find_group: Callable[[str], SubscriptionGroupConfig | None],
                 bridge: EscapeBridge, broker: ComponentView, clock: EpochClock) -> None:
        self.config = config
        self.log = log
        self.topics = topics
        self.offsets = offsets
        self.find_group = find_group
        self.bridge = bridge
        self.broker = broker
        self.clock = clock
        self.revive_topic = revive_topic(config.cluster_name)
        #: The acting term's escape bridge (None: no acting term runs).
        self.acting: EscapeBridge | None = None
        self._revive_counter = 0
        self._appended = trio.Event()

    def register(self, server: RpcServer) -> None:
        # Not inline: a pop waits for its checkpoints' puts and may wait for messages.
        server.register(RequestCode.POP_MESSAGE, self.pop_message)
        server.register(RequestCode.ACK_MESSAGE, self.ack_message)
        server.register(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, self.change_invisible_time)
        server.register(RequestCode.BATCH_ACK_MESSAGE, self.batch_ack_message)

    def appended(self) -> None:
        """Records landed in the log: waiting pops look again."""
        self._appended.set()
        self._appended = trio.Event()

    def _bridge(self, what: str) -> EscapeBridge | RemotingCommand:
        """Where this request's checkpoints and acks go; a refusal when this broker
        neither is master nor acts for one."""
        if self.broker.is_master:
            return self.bridge
        if self.acting is not None:
            return self.acting
        return _refused(ResponseCode.SERVICE_NOT_AVAILABLE,
                        f"{what}: broker {self.config.broker_name} is not master; "
                        f"pop from its master")

    async def acting_term(self, bridge: EscapeBridge, *,
                          task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                          ) -> None:
        """An acting term's task: pops are served through ``bridge`` until it ends."""
        self.acting = bridge
        try:
            task_status.started()
            await trio.sleep_forever()
        finally:
            self.acting = None

    # -- POP_MESSAGE ---------------------------------------------------------------

    async def pop_message(self, request: RemotingCommand, peer: RpcConnection
                          ) -> RemotingCommand:
        bridge = self._bridge("POP_MESSAGE")
        if isinstance(bridge, RemotingCommand):
            return bridge
        try:
            header = parse_pop_header(request.ext_fields)
            topic = self.topics.table.get(header.topic)
            subscription = admit_pop(header, topic, self.find_group(header.consumer_group))
        except PopRefused as exc:
            return _refused(exc.code, exc.remark)
        assert topic is not None  # admit_pop refuses an unknown topic
        revive_qid = self._revive_counter % self.config.revive_queue_num
        self._revive_counter += 1
        deadline = trio.current_time() + header.poll_time / 1000
        while True:
            waiter = self._appended
            pop_time = self.clock()
            plan = plan_pop(
                self.log, header, subscription, topic=topic,
                retry=self.topics.table.get(pop_retry_topic(header.topic,
                                                            header.consumer_group)),
                random_q=random.randrange(100),
                pop_offset=lambda name, queue_id: self.offsets.table.query(
                    header.consumer_group, name, queue_id),
                confirm_offset=self.broker.confirm_offset,
                pop_from_retry_probability=self.config.pop_from_retry_probability,
                scan_limit=max(header.max_msg_nums, self.config.max_filter_message_size // 20))
            if plan.found or trio.current_time() >= deadline:
                break
            with trio.move_on_at(deadline):
                await waiter.wait()
        # The pop takes its offsets now, before its checkpoints are stored (no await since
        # the plan): a concurrent pop of the queue reads on from there, where RocketMQ's
        # queue lock has it pass the queue over.
        group = header.consumer_group
        for pick in plan.picks:
            if self.offsets.table.query(group, pick.topic, pick.queue_id) != pick.next_offset:
                self.offsets.commit(group, pick.topic, pick.queue_id, pick.next_offset)
        taken = await self._check_in(header, plan.picks, pop_time, revive_qid, bridge)
        fields = {"popTime": str(pop_time), "invisibleTime": str(header.invisible_time),
                  "reviveQid": str(revive_qid), "restNum": str(plan.rest())}
        if not any(pick.entries for pick in taken):
            return RemotingCommand.response(ResponseCode.POLLING_TIMEOUT,
                                            remark="NO_MESSAGE_IN_QUEUE", ext_fields=fields)
        fields["startOffsetInfo"], fields["msgOffsetInfo"] = PopPlan(tuple(taken)).offset_infos()
        try:
            body = b"".join(self._bodies(header, taken, pop_time, revive_qid))
        except (StoreError, OSError) as exc:
            log.error("popping from %s failed: %s", header.topic, exc)
            return _refused(ResponseCode.SYSTEM_ERROR,
                            "the store could not be read; see the broker's log")
        return RemotingCommand.response(ResponseCode.SUCCESS, remark="FOUND",
                                        ext_fields=fields, body=body)

    async def _check_in(self, header: PopHeader, picks: tuple[QueuePick, ...], pop_time: int,
                        revive_qid: int, bridge: EscapeBridge) -> list[QueuePick]:
        """Store each pick's checkpoint; the picks whose checkpoint is stored. One that is
        not moves the group's pop offset back to where the pick started: its messages are
        popped again, and so are those later pops took meanwhile (at least once)."""
        kept: list[QueuePick] = []
        group = header.consumer_group
        for pick in picks:
            if not pick.entries:
                continue
            if await self._put_revive(pick.checkpoint(header, pop_time, self.config.broker_name),
                                      revive_qid, bridge):
                kept.append(pick)
                continue
            now = self.offsets.table.query(group, pick.topic, pick.queue_id)
            if now is None or now > pick.start_offset:
                self.offsets.commit(group, pick.topic, pick.queue_id, pick.start_offset)
        return kept

    async def _put_revive(self, record: CheckPoint | AckMsg, revive_qid: int,
                          bridge: EscapeBridge) -> bool:
        message = revive_message(record, self.revive_topic, revive_qid)
        result = await bridge.put_message(message)
        if not result.stored:
            log.warning("a pop's %s not stored in %s: %d %s", message.properties[PROPERTY_TAGS],
                        self.revive_topic, result.code, result.remark)
        return result.stored

    def _bodies(self, header: PopHeader, picks: list[QueuePick], pop_time: int,
                revive_qid: int) -> Iterator[bytes]:
        for pick in picks:
            retried = pick.topic != header.topic
            for queue_offset, physical, size, _ in pick.entries:
                if not retried:
                    yield self.log.read(physical, size)
                    continue
                record = self.log.read_record(physical)
                handle = Receipt(pick.start_offset, pop_time, header.invisible_time,
                                 revive_qid, topic_kind(pick.topic), self.config.broker_name,
                                 pick.queue_id, queue_offset).encode()
                properties = dict(record.properties)
                properties.setdefault(PROPERTY_POP_CK, handle)
                yield encode(attrs.evolve(record, topic=header.topic, properties=properties))

    # -- ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME --------------------------------

    def _receipt(self, request: RemotingCommand, what: str
                 ) -> tuple[HeaderFields, Receipt] | RemotingCommand:
        """The request's header and handle once they pass the checks; else the refusal."""
        def error(message: str) -> Exception:
            return PopRefused(ResponseCode.INVALID_PARAMETER, message)
        read = HeaderFields(request.ext_fields, what, error=error)
        try:
            group, topic_name = read.string("consumerGroup"), read.string("topic")
            queue_id = read.integer("queueId", (-1, INT32[1]))
            offset = read.integer("offset", INT64)
            extra = read.string("extraInfo")
        except PopRefused as exc:
            return _refused(exc.code, exc.remark)
        topic = self.topics.table.get(topic_name)
        if topic is None:
            return _refused(ResponseCode.TOPIC_NOT_EXIST,
                            f"topic[{topic_name[:80]}] not exist, apply first please!")
        if not 0 <= queue_id < topic.read_queue_nums:
            return _refused(ResponseCode.MESSAGE_ILLEGAL,
                            f"queueId[{queue_id}] is illegal, topic:[{topic_name[:80]}] "
                            f"topicConfig.readQueueNums:[{topic.read_queue_nums}]")
        queue_min = self.log.queue_min_offset(topic_name, queue_id)
        queue_max = confirmed_queue_max(self.log, topic_name, queue_id,
                                        self.broker.confirm_offset)
        if not queue_min <= offset < queue_max:
            return _refused(ResponseCode.NO_MESSAGE,
                            f"offset is illegal, key:{topic_name[:80]}@{queue_id}, "
                            f"commit:{offset}, store:{queue_min}~{queue_max}")
        receipt = parse_receipt(extra)
        if not isinstance(receipt, ReceiptRefused):
            refusal = receipt_refusal(receipt, topic=topic_name, group=group,
                                      queue_id=queue_id, offset=offset, now_ms=self.clock(),
                                      revive_queue_num=self.config.revive_queue_num)
            receipt = refusal if refusal is not None else receipt
        if isinstance(receipt, ReceiptRefused):
            return _refused(receipt.code, f"{what}: {receipt.remark}")
        return read, receipt

    def _ack_of(self, read: HeaderFields, receipt: Receipt) -> AckMsg:
        fields = read.fields
        return AckMsg(topic=fields["topic"], group=fields["consumerGroup"],
                      queue_id=receipt.queue_id, start_offset=receipt.ck_offset,
                      pop_time=receipt.pop_time, broker_name=receipt.broker_name,
                      offsets=(int(fields["offset"]),))

    async def ack_message(self, request: RemotingCommand, peer: RpcConnection
                          ) -> RemotingCommand:
        bridge = self._bridge("ACK_MESSAGE")
        if isinstance(bridge, RemotingCommand):
            return bridge
        checked = self._receipt(request, "ACK_MESSAGE")
        if isinstance(checked, RemotingCommand):
            return checked
        read, receipt = checked
        if not await self._put_revive(self._ack_of(read, receipt), receipt.revive_queue_id,
                                      bridge):
            return _refused(ResponseCode.SYSTEM_ERROR,
                            f"ACK_MESSAGE: the ack could not be stored in {self.revive_topic}")
        return RemotingCommand.response()

    async def change_invisible_time(self, request: RemotingCommand, peer: RpcConnection
                                    ) -> RemotingCommand:
        bridge = self._bridge("CHANGE_MESSAGE_INVISIBLETIME")
        if isinstance(bridge, RemotingCommand):
            return bridge
        checked = self._receipt(request, "CHANGE_MESSAGE_INVISIBLETIME")
        if isinstance(checked, RemotingCommand):
            return checked
        read, receipt = checked
        try:
            invisible_time = read.integer("invisibleTime", INT64)
        except PopRefused as exc:
            return _refused(exc.code, exc.remark)
        ack = self._ack_of(read, receipt)
        # Later than the pop, so that the new checkpoint's key (which holds its pop time)
        # is not the old one's, which the ack names, even within the same millisecond.
        now = max(self.clock(), receipt.pop_time + 1)
        # A new checkpoint of the one message from now, then the ack of the old one:
        # RocketMQ's order, so a failure between them revives the message rather than
        # loses it.
        ck = CheckPoint(topic=ack.topic, group=ack.group, queue_id=ack.queue_id,
                        start_offset=ack.offsets[0], pop_time=now, invisible_time=invisible_time,
                        broker_name=self.config.broker_name, offset_diffs=(0,))
        if not await self._put_revive(ck, receipt.revive_queue_id, bridge):
            return _refused(ResponseCode.SYSTEM_ERROR, "CHANGE_MESSAGE_INVISIBLETIME: the new "
                            f"checkpoint could not be stored in {self.revive_topic}")
        await self._put_revive(ack, receipt.revive_queue_id, bridge)
        return RemotingCommand.response(ext_fields={
            "popTime": str(now), "invisibleTime": str(invisible_time),
            "reviveQid": str(receipt.revive_queue_id)})

    async def batch_ack_message(self, request: RemotingCommand, peer: RpcConnection
                                ) -> RemotingCommand:
        bridge = self._bridge("BATCH_ACK_MESSAGE")
        if isinstance(bridge, RemotingCommand):
            return bridge
        try:
            broker_name, acks = parse_batch_ack(request.body)
        except PopRefused as exc:
            return _refused(exc.code, exc.remark)
        broker_name = broker_name or self.config.broker_name
        records: list[tuple[AckMsg, int]] = []
        now = self.clock()
        for index, ack in enumerate(acks):
            refusal = self._batch_refusal(ack, broker_name, now)
            if refusal is not None:
                return _refused(refusal.code, f"BATCH_ACK_MESSAGE: ack {index}: {refusal.remark}")
            queue_min = self.log.queue_min_offset(ack.topic, ack.queue_id)
            queue_max = self.log.queue_max_offset(ack.topic, ack.queue_id)
            # RocketMQ passes over the offsets its queue does not hold.
            offsets = [o for o in ack.offsets if queue_min <= o < queue_max]
            if offsets:
                records.append((AckMsg(ack.topic, ack.group, ack.queue_id, ack.start_offset,
                                       ack.pop_time, broker_name, offsets, batch=True),
                                ack.revive_queue_id))
        for record, revive_qid in records:
            if not await self._put_revive(record, revive_qid, bridge):
                return _refused(ResponseCode.SYSTEM_ERROR, "BATCH_ACK_MESSAGE: an ack could "
                                f"not be stored in {self.revive_topic}")
        return RemotingCommand.response()

    def _batch_refusal(self, ack: BatchAck, broker_name: str, now: int
                       ) -> ReceiptRefused | None:
        topic = self.topics.table.get(ack.topic)
        if topic is None:
            return ReceiptRefused(ResponseCode.TOPIC_NOT_EXIST,
                                  f"topic[{ack.topic[:80]}] not exist, apply first please!")
        if ack.queue_id >= topic.read_queue_nums:
            return ReceiptRefused(ResponseCode.MESSAGE_ILLEGAL,
                                  f"queueId[{ack.queue_id}] is illegal, topic:"
                                  f"[{ack.topic[:80]}]")
        for offset in ack.offsets:
            refusal = receipt_refusal(ack.receipt(broker_name, offset), topic=ack.topic,
                                      group=ack.group, queue_id=ack.queue_id, offset=offset,
                                      now_ms=now, revive_queue_num=self.config.revive_queue_num)
            if refusal is not None:
                return refusal
        return None

    def ensure_revive_topic(self) -> None:
        """Create the revive topic when missing, ``revive_queue_num`` queues, as RocketMQ's
        broker does at its start (a master's: slaves copy its topics)."""
        self._ensure(TopicConfig(self.revive_topic, self.config.revive_queue_num,
                                 self.config.revive_queue_num, perm=PERM_READ | PERM_WRITE))

    def ensure_retry_topic(self, name: str) -> bool:
        """Create the pop retry topic ``name`` when missing (False: it cannot be)."""
        return self._ensure(pop_retry_topic_config(name))

    def _ensure(self, config: TopicConfig) -> bool:
        if config.topic_name in self.topics.table:
            return True
        try:
            self.topics.table.update(config, self.clock(), system=True)
        except TopicRefused as exc:
            log.warning("topic %s not created: %s", config.topic_name, exc.remark)
            return False
        self.topics.changed()
        return True
