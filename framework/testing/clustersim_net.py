"""Plumbing of the cluster simulation: cooperative tasks, a lossy network, HA streams.

Everything here is deterministic given the ``random.Random`` it is handed
and the virtual time the simulation passes in (``now`` in ms).

- ``Tasks``: a node's concurrent activities as generators (a tiny,
  deterministic stand-in for a trio nursery). A task yields a predicate and
  is resumed once it holds; ``sleep_until`` and ``wait_for`` build them.
  Crashing a node drops its tasks, as a process death would.
- ``Network``: datagrams between named endpoints (RPCs, Raft messages) with
  seeded drop, delay (hence reordering) and cuttable links; and ``Stream``s
  (HA connections, TCP-like: ordered, lossless, delayed) that break when a
  link between their ends is cut or an end crashes.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Callable, Generator
from typing import Any

import attrs

#: What a task yields: resume me once this holds.
Waiting = Callable[[], bool]
TaskGen = Generator[Waiting, None, Any]


def wait_for(condition: Waiting) -> TaskGen:
    """Suspend the calling task until ``condition()`` holds."""
    if not condition():
        yield condition


class Tasks:
    """A node's running tasks, advanced in spawn order until each one blocks."""

    def __init__(self) -> None:
        self._tasks: list[tuple[int, TaskGen, Waiting | None]] = []
        self._seq = 0

    def spawn(self, task: TaskGen) -> int:
        """Start ``task`` (it first runs at the next ``run``); return its handle."""
        self._seq += 1
        self._tasks.append((self._seq, task, None))
        return self._seq

    def cancel(self, handle: int) -> None:
        """Drop a task; it never resumes."""
        for index, (seq, task, _) in enumerate(self._tasks):
            if seq == handle:
                _close(task)
                del self._tasks[index]
                return

    def alive(self, handle: int) -> bool:
        """Whether the task ``handle`` is still running."""
        return any(seq == handle for seq, _, _ in self._tasks)

    def clear(self) -> None:
        """Drop every task (the node crashed)."""
        for _, task, _ in self._tasks:
            _close(task)
        self._tasks = []

    def run(self, budget: int = 1000) -> None:
        """Resume every task whose condition holds, until none can move."""
        moved = True
        while moved and budget > 0:
            moved = False
            for entry in list(self._tasks):
                if entry not in self._tasks:
                    continue
                seq, task, waiting = entry
                if waiting is not None and not waiting():
                    continue
                budget -= 1
                moved = True
                try:
                    condition = task.send(None)
                except StopIteration:
                    if entry in self._tasks:
                        self._tasks.remove(entry)
                    continue
                if entry not in self._tasks:
                    # Dropped while it ran (it crashed its own node, or cancelled itself).
                    task.close()
                    continue
                # Where it is now: the tasks it spawned or cancelled may have moved it.
                self._tasks[self._tasks.index(entry)] = (seq, task, condition)


def _close(task: TaskGen) -> None:
    """Close a dropped task, unless it is the one running (``run`` closes it once it
    yields)."""
    if not task.gi_running:
        task.close()


@attrs.define
class NetFaults:
    """Datagram fault rates (zero once the network heals)."""

    drop: float = 0.0
    max_delay_ms: int = 0


class Stream:
    """One HA connection: two ordered, delayed byte pipes between ``client`` and ``server``."""

    def __init__(self, stream_id: int, client: str, server: str) -> None:
        self.id = stream_id
        self.client = client
        self.server = server
        self.closed = False
        #: Cut without either end noticing (``Network.stall``): bytes wait in flight.
        self.stalled = False
        self._pipes: dict[str, deque[tuple[int, bytes]]] = {client: deque(), server: deque()}
        self._last_due: dict[str, int] = {client: 0, server: 0}

    def send(self, sender: str, data: bytes, now: int, delay: int) -> None:
        """Queue ``data`` from ``sender`` to the other end (kept in order)."""
        if self.closed or not data:
            return
        receiver = self.server if sender == self.client else self.client
        due = max(now + delay, self._last_due[receiver])
        self._last_due[receiver] = due
        self._pipes[receiver].append((due, bytes(data)))

    def receive(self, receiver: str, now: int) -> bytes:
        """The bytes due at ``receiver`` by ``now`` (b"" if none, or while stalled)."""
        if self.stalled:
            return b""
        pipe = self._pipes[receiver]
        out = bytearray()
        while pipe and pipe[0][0] <= now:
            out += pipe.popleft()[1]
        return bytes(out)


class Network:
    """Datagrams in flight, delivered by due time then send order; HA streams."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.faults = NetFaults()
        self.blocked: set[tuple[str, str]] = set()
        self.down: set[str] = set()
        self.streams: dict[int, Stream] = {}
        self._queue: list[tuple[int, int, str, str, object]] = []
        self._seq = 0
        self._stream_seq = 0

    def cut(self, src: str, dst: str) -> bool:
        """Whether ``src`` cannot reach ``dst``."""
        return (src, dst) in self.blocked

    def delay(self) -> int:
        """One seeded delay in ms."""
        top = self.faults.max_delay_ms
        return self.rng.randint(0, top) if top else 0

    def send(self, src: str, dst: str, payload: object, now: int) -> None:
        """Send one datagram; it may be dropped or delayed."""
        if self.cut(src, dst) or src in self.down:
            return
        if self.faults.drop and self.rng.random() < self.faults.drop:
            return
        self._seq += 1
        heapq.heappush(self._queue, (now + 1 + self.delay(), self._seq, src, dst, payload))

    def due(self, now: int) -> list[tuple[str, str, object]]:
        """Datagrams due by ``now`` whose receiver is up and reachable."""
        out = []
        while self._queue and self._queue[0][0] <= now:
            _, _, src, dst, payload = heapq.heappop(self._queue)
            if dst not in self.down and not self.cut(src, dst):
                out.append((src, dst, payload))
        return out

    # -- streams -------------------------------------------------------------

    def connect(self, client: str, server: str) -> Stream | None:
        """Open an HA stream, or ``None`` when the server is down or unreachable."""
        if server in self.down or self.cut(client, server) or self.cut(server, client):
            return None
        self._stream_seq += 1
        stream = Stream(self._stream_seq, client, server)
        self.streams[stream.id] = stream
        return stream

    def close(self, stream: Stream) -> None:
        """Close a stream (both ends see it closed)."""
        stream.closed = True
        self.streams.pop(stream.id, None)

    def break_streams(self) -> None:
        """Close the streams whose end is down, or whose link is cut unless they are
        stalled (a reset)."""
        for stream in list(self.streams.values()):
            ends = (stream.client, stream.server)
            if any(end in self.down for end in ends) or (not stream.stalled and (
                self.cut(stream.client, stream.server)
                or self.cut(stream.server, stream.client)
            )):
                self.close(stream)

    # -- partitions ------------------------------------------------------------

    def partition(self, group: set[str], others: set[str], one_way: bool = False) -> None:
        """Cut ``group`` from ``others`` (only group -> others when ``one_way``)."""
        for a in group:
            for b in others - group:
                self.blocked.add((a, b))
                if not one_way:
                    self.blocked.add((b, a))
        self.break_streams()

    def stall(self, name: str) -> None:
        """Cut ``name``'s HA streams as a link cut that TCP has not noticed yet: both
        ends keep them open, and what is sent waits until ``heal``."""
        for stream in self.streams.values():
            if name in (stream.client, stream.server):
                stream.stalled = True

    def heal(self) -> None:
        """Restore every link (and stalled stream) and stop the datagram faults."""
        for stream in self.streams.values():
            stream.stalled = False
        self.blocked.clear()
        self.faults = NetFaults()
