"""A simulated broker's puts: the broker's own put core pumped over virtual time.

Every put a producer sends (a SEND_MESSAGE_V2 request) runs
``triomq.broker.send.core.put_flow.PutFlow``, as the broker's processor runs it over
trio: the same checks in the same order (a slave, a SyncStateSet smaller
than ``min_in_sync_replicas``... refuse before anything is stored), the
same records and the same answers. The pump carries out what it asks: the
append (``MemLog``; a crash may tear it), the flush (``MemLog`` flushes
synchronously) and the wait for the replicas, which the master term's
``SyncReplication`` completes (``triomq.ha.core.master_term``). A put completed
with PUT_OK is reported to the invariants (``Simulation.on_acked``) before
it is answered. The topics live in memory and survive crashes, so a topic
a put creates needs no saving. The broker's own puts (the escape bridge's:
``put_own``, the delayed messages' delivery and the transactions') run the
same core's ``start_own`` and answer a callback.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from triomq.broker.core.escape_bridge import EscapedMessage, EscapeResult
from triomq.broker.send.core.put_checks import BrokerState, PutSettings, host_port
from triomq.broker.send.core.put_flow import (
    Append,
    PutAction,
    PutFlow,
    PutReply,
    TopicCreated,
    WaitFlushed,
    WaitReplicated,
)
from triomq.ha.core.sync_replication import PutResult, ReplicationStatus
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.unique_id import UniqueIdGenerator
from triomq.testing.clustersim_parts import CLUSTER, GROUP, PutRequest, PutResponse, Term

if TYPE_CHECKING:
    from triomq.testing.clustersim_broker import SimBroker

#: ``BrokerConfig``'s defaults where the simulation sets nothing.
_MAX_MESSAGE_SIZE = 4 * 1024 * 1024
_AUTO_CREATE_TOPIC_LIMIT = 1024
_DEFAULT_TOPIC_QUEUE_NUMS = 8


class SimPuts:
    """The puts of one simulated broker."""

    def __init__(self, broker: SimBroker) -> None:
        self.broker = broker
        settings = broker.settings
        self.settings = PutSettings(
            broker_name=GROUP, cluster_name=CLUSTER, max_message_size=_MAX_MESSAGE_SIZE,
            min_in_sync_replicas=settings.master.min_in_sync_replicas,
            auto_create_topic_enable=True, auto_create_topic_limit=_AUTO_CREATE_TOPIC_LIMIT,
            default_topic_queue_nums=_DEFAULT_TOPIC_QUEUE_NUMS,
            sync_flush_timeout=settings.put_timeout, flush_policy="group",
            store_host=host_port(broker.name), segment_size=broker.log.segment_size)
        # Fixed inputs: a seed replays the same ids.
        self.unique_ids = UniqueIdGenerator("127.0.0.1", 1, sum(broker.name.encode()))

    def _state(self, term: Term) -> BrokerState:
        master = term.master_term
        return BrokerState(
            broker_id=self.broker.broker_id, role=term.role, is_master=master is not None,
            in_sync_replicas=(len(master.tracker.effective_sync_state_set)
                              if master is not None else 0))

    def receive(self, src: str, put: PutRequest) -> None:
        """A producer's put arrived."""
        broker = self.broker
        flow = PutFlow(self.settings, now=broker.now_ms() / 1000)
        action = flow.start(put.command, src, self._state(broker.term), broker.topics,
                            store_ms=broker.now_ms(), new_id=self.unique_ids.next_id)
        self._pump(lambda response: self._send(src, PutResponse(put.id, response)), flow,
                   action)

    def put_own(self, message: EscapedMessage, done: Callable[[EscapeResult], None]) -> None:
        """A message the broker writes itself (the local escape bridge's put): ``done``
        hears how it ended, as ``LocalEscapeBridge.put_message`` answers."""
        broker = self.broker
        flow = PutFlow(self.settings, now=broker.now_ms() / 1000)
        action = flow.start_own(message, self._state(broker.term), store_ms=broker.now_ms(),
                                new_id=self.unique_ids.next_id)
        self._pump(lambda response: done(EscapeResult.of_response(response)), flow, action)

    def _pump(self, reply: Callable[[RemotingCommand], None], flow: PutFlow,
              action: PutAction) -> None:
        """Carry out the put's actions until it waits for the replicas or is answered."""
        broker = self.broker
        term, log = broker.term, broker.log
        stored: list[tuple[int, bytes]] = []
        while not isinstance(action, PutReply):
            now = broker.now_ms()
            if isinstance(action, TopicCreated):
                action = flow.resume()
            elif isinstance(action, Append):
                start = log.max_offset
                placed, data = log.pack(action.records)
                if broker.sim.maybe_crash_writing(broker, data):
                    return  # the broker is down: no answer
                log.append_raw(start, data)
                stored = [(at, data[at - start:at - start + size]) for at, size, _ in placed]
                action = flow.appended(placed, now / 1000)
            elif isinstance(action, WaitFlushed):
                action = flow.flushed(log.max_offset, now / 1000)
            elif isinstance(action, WaitReplicated):
                master = term.master_term
                assert master is not None, "a put is stored only by a master"
                waiter = object()
                failed = master.add_put(waiter, action.offset, now + action.timeout_ms)
                if failed is not None:
                    action = flow.replicated(failed)
                    continue
                term.waiters[waiter] = (reply, flow, stored)
                broker.update_puts(term)
                return
        reply(action.response)

    def answer(self, term: Term, results: list[PutResult]) -> None:
        """The replication waits that ended: PUT_OK ones to the invariants, then all
        answered."""
        broker = self.broker
        for outcome in results:
            reply, flow, stored = term.waiters.pop(outcome.waiter)
            if outcome.status is ReplicationStatus.PUT_OK:
                assert term.master_term is not None
                members = term.master_term.tracker.effective_sync_state_set
                for offset, record in stored:
                    broker.sim.on_acked(broker, term, offset, record, members)
            reply(flow.replicated(outcome.status).response)

    def _send(self, dst: str, response: PutResponse) -> None:
        broker = self.broker
        broker.sim.network.send(broker.name, dst, response, broker.sim.now)

    def abandon(self, term: Term, waiters: list[object]) -> None:
        """The term ended: its waiting puts hear that this broker is no longer master."""
        for waiter in waiters:
            reply, flow, _ = term.waiters.pop(waiter)
            reply(flow.replicated(None).response)
