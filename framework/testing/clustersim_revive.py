"""The broker's pop revive flow, pumped a step at a time over a simulated broker.

``SimRevive`` runs one ``triomq.broker.pop.core.revive.ReviveQueue`` as
``triomq.broker.pop.revive_service`` runs it over trio, one simulation step
at a time: it hands the flow what it asked to read, waits (across steps) for
each revive put's answer and for its wake-up time. What a read finds, where a
put goes and where the revive offset is kept are the simulation's: a
subclass says (``clustersim_pop``'s controller-mode masters,
``clustersim_acting_pops``'s static brokers). A popped message no longer
stored where it was popped is a violation in every simulation.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from triomq.broker.core.escape_bridge import EscapedMessage, EscapeResult
from triomq.broker.pop.core.remote_read import Unread
from triomq.broker.pop.core.revive import (
    NotRevived,
    ReadMessage,
    ReadRevive,
    Revive,
    ReviveAction,
    ReviveQueue,
    ReviveRecord,
    StoreReviveOffset,
    WakeAt,
)
from triomq.protocol.message import MessageRecord

__all__ = ["SimRevive"]


class SimRevive:
    """One revive flow and what it waits for; ``violation`` reports a broken rule."""

    def __init__(self, flow: ReviveQueue, now_ms: int, violation: Callable[[str], None],
                 name: str) -> None:
        self.flow = flow
        self.violation = violation
        self.name = name
        self.actions: deque[ReviveAction] = deque(flow.start(now_ms))
        self.wake_at: int | None = None
        self.waiting: list[EscapeResult] | None = None
        self.put: Revive | None = None

    # -- what the subclass says --------------------------------------------------------

    def read_revive(self, read: ReadRevive) -> list[ReviveRecord]:
        raise NotImplementedError

    def read_message(self, read: ReadMessage) -> MessageRecord | Unread | None:
        """The popped message (None, or ``Unread.GONE``: no longer stored;
        ``Unread.NOT_HERE``: no replica holding it could be reached now)."""
        raise NotImplementedError

    def put_message(self, message: EscapedMessage, done: Callable[[EscapeResult], None]
                    ) -> None:
        raise NotImplementedError

    def put_answered(self, put: Revive, result: EscapeResult) -> None:
        """A revive put's answer, before the flow hears of it."""

    def reviving(self, put: Revive) -> None:
        """A revive about to be put: the subclass checks it."""

    def store_offset(self, store: StoreReviveOffset) -> None:
        raise NotImplementedError

    # -- the pump ----------------------------------------------------------------------

    def pump(self, now: int) -> None:
        """Carry the flow on as far as it goes at ``now`` (a broker's clock)."""
        flow = self.flow
        if self.waiting is not None:
            if not self.waiting:
                return
            result = self.waiting[0]
            self.waiting = None
            assert self.put is not None
            self.put_answered(self.put, result)
            self.actions.extend(flow.put_done(result.ok, now))
        if self.wake_at is not None:
            if now < self.wake_at:
                return
            self.wake_at = None
            self.actions.extend(flow.woke(now))
        while self.actions:
            action = self.actions.popleft()
            if isinstance(action, ReadRevive):
                self.actions.extend(flow.records_read(self.read_revive(action), now))
            elif isinstance(action, ReadMessage):
                found = self.read_message(action)
                if found is Unread.NOT_HERE:
                    self.actions.extend(flow.read_failed(now))
                else:
                    self.actions.extend(flow.message_read(
                        None if found is Unread.GONE else found, now))
            elif isinstance(action, Revive):
                self.reviving(action)
                self.put, self.waiting = action, []
                self.put_message(action.message, self.waiting.append)
                return
            elif isinstance(action, StoreReviveOffset):
                self.store_offset(action)
            elif isinstance(action, NotRevived):
                if "no longer stored" in action.reason:
                    self.violation(f"{self.name}: {action.reason}")
            elif isinstance(action, WakeAt):
                self.wake_at = action.at_ms
                return
