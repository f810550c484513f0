"""What the Raft driver keeps for callers waiting on it: waiters and their deadlines.

A ``Waiter`` stands for one proposal or read: a parked task or a callback,
finished once. ``Deadlines`` holds their timeouts for the driver's single
timer task.
"""

from __future__ import annotations

import collections
import logging
import math
from collections.abc import Callable
from typing import Any

import trio

__all__ = ["Deadlines", "ProposalCallback", "Waiter"]

#: What ``propose_nowait`` calls once a proposal's fate is known: ``(result, None)``
#: with ``apply``'s result, or ``(None, error)``.
ProposalCallback = Callable[[Any, BaseException | None], None]


class Waiter:
    """A caller waiting for an entry (proposals) or a read point (reads).

    Either a task, which parks itself and ``finish`` reschedules (no Event
    per proposal, as this is paid once per command), or a callback, which
    ``finish`` calls.
    """

    __slots__ = ("callback", "done", "error", "index", "result", "task", "term")

    def __init__(self, term: int = 0, index: int = 0,
                 callback: ProposalCallback | None = None) -> None:
        self.term = term
        self.index = index
        self.callback = callback
        self.done = False
        self.task: trio.lowlevel.Task | None = None
        self.result: Any = None
        self.error: BaseException | None = None

    def finish(self, result: Any = None, error: BaseException | None = None) -> None:
        if self.done:
            return
        self.done = True
        callback = self.callback
        if callback is not None:
            try:
                callback(result, error)
            except Exception:
                # The driver calls this from its own loop: a caller's bug must not stop it.
                logging.getLogger("triomq.raft").exception(
                    "proposal callback for entry %d failed", self.index)
            return
        self.result, self.error = result, error
        task = self.task
        if task is not None:
            self.task = None
            trio.lowlevel.reschedule(task)

    async def wait(self) -> Any:
        """Until finished (cancellable); then its result, or raise its error."""
        if self.done:
            await trio.lowlevel.checkpoint()
        else:
            self.task = trio.lowlevel.current_task()

            def abort(_: Any) -> trio.lowlevel.Abort:
                # Cancelled: a command still queued is then not proposed.
                self.task = None
                self.done = True
                return trio.lowlevel.Abort.SUCCEEDED

            await trio.lowlevel.wait_task_rescheduled(abort)
        if self.error is not None:
            raise self.error
        return self.result


class Deadlines:
    """Waiters' deadlines, for one timer: one FIFO per timeout value.

    Deadlines of one timeout value come in time order, so adding is an
    append and finished waiters leave from the front; no heap holding every
    waiter until its deadline.
    """

    def __init__(self) -> None:
        self._queues: dict[float, collections.deque[tuple[float, Waiter]]] = {}

    def add(self, waiter: Waiter, now: float, timeout: float) -> float:
        """Give ``waiter`` until ``now + timeout``; return that deadline."""
        deadline = now + timeout
        queue = self._queues.get(timeout)
        if queue is None:
            queue = self._queues[timeout] = collections.deque()
        while queue and queue[0][1].done:
            queue.popleft()
        queue.append((deadline, waiter))
        return deadline

    def next(self) -> float:
        """The earliest deadline held (``math.inf`` if none)."""
        return min((queue[0][0] for queue in self._queues.values() if queue),
                   default=math.inf)

    def expired(self, now: float) -> list[Waiter]:
        """Remove and return the unfinished waiters whose deadline is ``now`` or past
        (finished ones at the front go too)."""
        out = []
        for queue in self._queues.values():
            while queue and (queue[0][0] <= now or queue[0][1].done):
                waiter = queue.popleft()[1]
                if not waiter.done:
                    out.append(waiter)
        return out
