"""The simulated broker's consume side: pulls, held pulls, consumer offsets, the slave's copy.

A pump of the broker's pure rules over the simulated log (``MemLog``, whose
consume queues the store's indexing rule derives from its records), as
``framework/broker/pull_service.py`` and ``offset_service.py`` pump them
over trio:

- PULL_MESSAGE: ``triomq.broker.pull`` and ``pull_lookup`` (header, the
  slave's refusal, the checks, the look-up up to the confirm offset, the
  answer; with the group's ``slave_read_enable`` and memory window, so a
  pull far behind is pointed at a slave in some seeds); the commit
  flag stores the consumer's offset (on any role); a pull that finds
  nothing new with the suspend flag is held in a ``HoldTable`` and looked up
  again when its queue grows (checked every step), its time runs out, or the
  broker's role changes;
- QUERY_CONSUMER_OFFSET / UPDATE_CONSUMER_OFFSET / GET_ALL_CONSUMER_OFFSET:
  ``triomq.broker.consumer_offsets``;
- the table is written to its file (``saved``, which survives a crash)
  every ``flush_consumer_offset_interval``, and a crash loses what changed
  since; every ``slave_synchronize_period`` a slave asks its master for the
  table and adopts it, so a new master after a failover has the (possibly
  stale) offsets.

Requests and answers are datagrams (``ConsumerRequest`` /
``ConsumerResponse``) of the simulation's network.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs

from triomq.broker.codes import RequestCode, ResponseCode
from triomq.broker.consumer_offsets import (
    ConsumerOffsetTable,
    OffsetHeader,
    answer_query,
    parse_offset_header,
    update_refusal,
)
from triomq.broker.headers import HeaderError
from triomq.broker.pull import (
    PullAnswer,
    PullHeader,
    PullLimits,
    PullRefused,
    admit,
    parse_pull_header,
)
from triomq.broker.pull_hold import HoldTable
from triomq.broker.pull_lookup import confirmed_queue_max, look_up, slave_refusal
from triomq.broker.subscription import Subscription
from triomq.protocol.route import RouteDataError
from triomq.testing.clustersim_parts import GROUP

if TYPE_CHECKING:
    from triomq.testing.clustersim_broker import SimBroker



@attrs.frozen
class ConsumerRequest:
    """A consumer's (or a slave's) request to a broker: a RocketMQ request code and header."""

    id: int
    code: int
    fields: Mapping[str, str] = attrs.field(factory=dict, hash=False)


@attrs.frozen
class ConsumerResponse:
    """A broker's answer to request ``id``."""

    id: int
    code: int
    remark: str | None = None
    fields: Mapping[str, str] = attrs.field(factory=dict, hash=False)
    body: bytes = b""


#: A held pull: who asked, the request id, the header and the subscription to filter by.
Held = tuple[str, int, PullHeader, Subscription]


class SimConsumeSide:
    """One broker's pulls and consumer offsets; ``saved`` (the offsets file) survives crashes."""

    def __init__(self, broker: SimBroker) -> None:
        self.broker = broker
        self.saved = ConsumerOffsetTable().encode()

    def start(self) -> None:
        """A (re)start: the offsets from their file, nothing held."""
        self.table = ConsumerOffsetTable.decode(self.saved)
        self._saved_revision = self.table.revision
        self.holds: HoldTable[Held] = HoldTable()
        now = self.broker.now_ms()
        settings = self.broker.settings
        self.next_flush = now + settings.flush_consumer_offset_interval
        self.next_copy = now + settings.slave_synchronize_period
        self.copy_id = -1

    # -- requests ------------------------------------------------------------------

    def receive(self, src: str, request: ConsumerRequest) -> None:
        """A request arrived: answer it (or hold it)."""
        if request.code == RequestCode.PULL_MESSAGE:
            self._pull(src, request)
        elif request.code == RequestCode.QUERY_CONSUMER_OFFSET:
            self._query(src, request)
        elif request.code == RequestCode.UPDATE_CONSUMER_OFFSET:
            self._update(src, request)
        elif request.code == RequestCode.GET_ALL_CONSUMER_OFFSET:
            self._reply(src, ConsumerResponse(request.id, ResponseCode.SUCCESS,
                                              body=self.table.encode()))

    def _reply(self, dst: str, response: ConsumerResponse) -> None:
        self.broker.sim.network.send(self.broker.name, dst, response, self.broker.sim.now)

    def _refuse(self, dst: str, rid: int, code: int, remark: str) -> None:
        self._reply(dst, ConsumerResponse(rid, code, remark))

    def _pull(self, src: str, request: ConsumerRequest) -> None:
        broker = self.broker
        try:
            header = parse_pull_header(request.fields)
        except HeaderError as exc:
            self._refuse(src, request.id, ResponseCode.INVALID_PARAMETER, str(exc))
            return
        refusal = slave_refusal(GROUP, is_master=self._is_master(),
                                slave_read_enable=broker.sim.group.slave_read_enable,
                                master_online=self._master_online())
        try:
            if refusal is not None:
                raise refusal
            subscription = admit(header, broker.topics.get(header.topic), group_known=True,
                                 registered=lambda group, topic: None)
        except PullRefused as exc:
            self._refuse(src, request.id, exc.code, exc.remark)
            return
        answer = self._look_up(header, subscription, allow_suspend=True)
        if header.commits_offset:
            self._commit(header.consumer_group, header.topic, header.queue_id,
                         header.commit_offset)
        if answer.hold:
            now = broker.now_ms()
            self.holds.hold(header.topic, header.queue_id, header.queue_offset, now,
                            max(0, header.suspend_timeout_millis),
                            (src, request.id, header, subscription))
            return
        self._answer(src, request.id, header, answer)

    def _look_up(self, header: PullHeader, subscription: Subscription, *,
                 allow_suspend: bool) -> PullAnswer:
        broker = self.broker
        group = broker.sim.group
        return look_up(broker.log, header, subscription,
                       limits=PullLimits(memory_window=group.memory_window),
                       topic=broker.topics.get(header.topic), is_master=self._is_master(),
                       master_online=self._master_online(),
                       slave_read_enable=group.slave_read_enable,
                       offset_check_in_slave=False, allow_suspend=allow_suspend,
                       confirm_offset=self._confirmed())

    def _answer(self, dst: str, rid: int, header: PullHeader, answer: PullAnswer) -> None:
        log = self.broker.log
        self.broker.sim.group.answered(self.broker, header, answer)
        body = b"".join(log.read(offset, size) for offset, size in answer.ranges)
        self._reply(dst, ConsumerResponse(rid, answer.code, answer.remark, answer.fields, body))

    def _offset_header(self, src: str, request: ConsumerRequest, *, commit: bool
                       ) -> OffsetHeader | None:
        try:
            return parse_offset_header(request.fields, commit=commit)
        except HeaderError as exc:
            self._refuse(src, request.id, ResponseCode.INVALID_PARAMETER, str(exc))
            return None

    def _query(self, src: str, request: ConsumerRequest) -> None:
        header = self._offset_header(src, request, commit=False)
        if header is None:
            return
        answer = answer_query(self.table, header, self.broker.log, memory_window=1 << 62)
        fields = {"offset": str(answer.offset)} if answer.offset is not None else {}
        self._reply(src, ConsumerResponse(request.id, answer.code, answer.remark, fields))

    def _update(self, src: str, request: ConsumerRequest) -> None:
        header = self._offset_header(src, request, commit=True)
        if header is None:
            return
        refusal = update_refusal(header, self.broker.topics.get(header.topic), group_known=True)
        if refusal is not None:
            self._refuse(src, request.id, *refusal)
            return
        assert header.commit_offset is not None
        self._commit(header.consumer_group, header.topic, header.queue_id, header.commit_offset)
        self._reply(src, ConsumerResponse(request.id, ResponseCode.SUCCESS))

    def _commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.table.commit(group, topic, queue_id, offset, self.broker.now_ms())

    # -- the broker's state, as the broker service tells the pull driver -------------

    def _is_master(self) -> bool:
        return self.broker.term.role == "master"

    def _master_online(self) -> bool:
        """On a slave: whether its group has a master (as the broker service's controller
        mode says: the controllers name one)."""
        return self.broker.term.role == "slave" and self.broker.flow.group_has_master

    def _confirmed(self) -> int:
        return self.broker.term.confirmed(self.broker.log.max_offset)

    # -- time ----------------------------------------------------------------------

    def step(self) -> None:
        """Held pulls whose queue grew or whose time ran out; the file; the slave's copy."""
        broker = self.broker
        now = broker.now_ms()
        released = self.holds.tick(now)
        for topic, queue_id in self.holds.queues():
            released += self.holds.arrived(topic, queue_id, self._readable(topic, queue_id))
        self._run_again([hold.payload for hold in released])
        if now >= self.next_flush:
            self.next_flush = now + broker.settings.flush_consumer_offset_interval
            if self.table.revision != self._saved_revision:
                self.saved = self.table.encode()
                self._saved_revision = self.table.revision
        if now >= self.next_copy:
            self.next_copy = now + broker.settings.slave_synchronize_period
            if broker.term.role == "slave":
                self.copy_id = broker.sim.next_request_id()
                broker.sim.network.send(broker.name, broker.term.master, ConsumerRequest(
                    self.copy_id, RequestCode.GET_ALL_CONSUMER_OFFSET), broker.sim.now)

    def _readable(self, topic: str, queue_id: int) -> int:
        """Where a pull of the queue ends now: the queue's confirmed end."""
        return confirmed_queue_max(self.broker.log, topic, queue_id, self._confirmed())

    def _run_again(self, held: list[Held]) -> None:
        for src, rid, header, subscription in held:
            self._answer(src, rid, header,
                         self._look_up(header, subscription, allow_suspend=False))

    def role_changed(self) -> None:
        """Every held pull is answered (its consumer then follows the new suggestion)."""
        self._run_again([hold.payload for hold in self.holds.release_all()])

    def answered(self, response: ConsumerResponse) -> None:
        """The master's table arrived (a slave's copy): adopt it while still a slave."""
        if response.id != self.copy_id or self.broker.term.role != "slave":
            return
        if response.code != ResponseCode.SUCCESS:
            return
        try:
            master = ConsumerOffsetTable.decode(response.body)
        except RouteDataError:
            return
        self.table.adopt_master(master)
