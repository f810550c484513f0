"""The simulated broker's consume side: pulls, held pulls, consumer offsets, the slave's copy.

A pump of the broker's pure rules over the simulated log (``MemLog``, whose
consume queues the store's indexing rule derives from its records), as
``framework/broker/consume/pull_service.py`` and ``offset_service.py`` pump them
over trio:

- PULL_MESSAGE (and LITE_PULL_MESSAGE): the broker's pull flow,
  ``triomq.broker.consume.core.pull_flow.BrokerPullFlow``, as the trio broker runs it
  (with the group's ``slave_read_enable`` and memory window, so a pull far
  behind is pointed at a slave in some seeds; every consumer group known,
  none registered by heartbeat); its held pulls are woken every step, as
  their queues may have grown and their time may have run out, and when the
  broker's role changes;
- QUERY_CONSUMER_OFFSET / UPDATE_CONSUMER_OFFSET / GET_ALL_CONSUMER_OFFSET:
  ``triomq.broker.consume.core.consumer_offsets``;
- the table is written to its file (``saved``, which survives a crash)
  every ``flush_consumer_offset_interval``, and a crash loses what changed
  since; every ``slave_synchronize_period`` a slave asks its master for the
  table and adopts it, so a new master after a failover has the (possibly
  stale) offsets.

Requests and answers are datagrams (``ConsumerRequest`` /
``ConsumerResponse``) of the simulation's network.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import attrs

from triomq.broker.consume.core.consumer_offsets import (
    ConsumerOffsetTable,
    OffsetHeader,
    answer_query,
    parse_offset_header,
    update_refusal,
)
from triomq.broker.consume.core.pull import PullLimits
from triomq.broker.consume.core.pull_flow import (
    BrokerPullFlow,
    BrokerPullSettings,
    CommitOffset,
    LookUp,
    PullEffect,
    PullRole,
    Refuse,
    Respond,
)
from triomq.broker.consume.core.subscription import Subscription
from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.broker.core.headers import HeaderError
from triomq.protocol.route import RouteDataError, TopicConfig
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


#: A pull as the simulation knows it: who asked and the request id.
Asker = tuple[str, int]


class _Tables:
    """The simulated broker's tables as the pull flow reads them."""

    def __init__(self, side: SimConsumeSide) -> None:
        self._side = side

    def topic(self, name: str) -> TopicConfig | None:
        return self._side.broker.topics.get(name)

    def group_known(self, group: str) -> bool:
        return True

    def registered(self, group: str, topic: str) -> Subscription | None:
        return None

    def take_reset(self, group: str, topic: str, queue_id: int) -> int | None:
        return self._side.table.take_reset(group, topic, queue_id)


class SimConsumeSide:
    """One broker's pulls and consumer offsets; ``saved`` (the offsets file) survives crashes."""

    def __init__(self, broker: SimBroker) -> None:
        self.broker = broker
        self.saved = ConsumerOffsetTable().encode()

    def start(self) -> None:
        """A (re)start: the offsets from their file, nothing held."""
        self.table = ConsumerOffsetTable.decode(self.saved)
        self._saved_revision = self.table.revision
        self._pulls: BrokerPullFlow[Asker] | None = None
        now = self.broker.now_ms()
        settings = self.broker.settings
        self.next_flush = now + settings.flush_consumer_offset_interval
        self.next_copy = now + settings.slave_synchronize_period
        self.copy_id = -1

    @property
    def pulls(self) -> BrokerPullFlow[Asker]:
        """The broker's pull flow (made at the first use: the brokers start before the
        consumer group whose settings it takes)."""
        if self._pulls is None:
            group = self.broker.sim.group
            self._pulls = BrokerPullFlow(BrokerPullSettings(
                broker_name=GROUP, limits=PullLimits(memory_window=group.memory_window),
                slave_read_enable=group.slave_read_enable), _Tables(self))
        return self._pulls

    # -- requests ------------------------------------------------------------------

    def receive(self, src: str, request: ConsumerRequest) -> None:
        """A request arrived: answer it (or hold it)."""
        if request.code in (RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE):
            self._do([self.pulls.receive((src, request.id), request.code, request.fields,
                                         self.broker.now_ms(), self._role())])
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

    def _do(self, effects: Iterable[PullEffect[Asker]]) -> None:
        """Carry out the pull flow's effects, and those they lead to."""
        pending = list(effects)
        while pending:
            effect = pending.pop(0)
            if isinstance(effect, Refuse):
                self._refuse(effect.pull[0], effect.pull[1], effect.code, effect.remark)
            elif isinstance(effect, LookUp):
                pending[:0] = self.pulls.looked_up(effect, effect.run(self.broker.log),
                                                   self.broker.now_ms())
            elif isinstance(effect, CommitOffset):
                self._commit(effect.group, effect.topic, effect.queue_id, effect.offset)
            elif isinstance(effect, Respond):
                self._answer(effect)

    def _answer(self, effect: Respond[Asker]) -> None:
        (dst, rid), answer = effect.pull, effect.answer
        self.broker.sim.group.answered(self.broker, effect.header, answer)
        body = b"".join(self.broker.log.read(offset, size) for offset, size in answer.ranges)
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

    def _role(self) -> PullRole:
        return PullRole(self.broker.term.role == "master", self._master_online(),
                        self._confirmed())

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
        if self._pulls is not None:
            self._do(self._pulls.timer(now, self._role()))
            self._do(self._pulls.appended(broker.log, self._role()))
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

    def role_changed(self) -> None:
        """Every held pull is answered (its consumer then follows the new suggestion)."""
        if self._pulls is not None:
            self._do(self._pulls.role_changed(self._role()))

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
