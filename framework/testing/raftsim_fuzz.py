"""The simulation's message fuzzer: bad messages a Raft node must shrug off.

``mutate`` turns a real message into one that is malformed, from an
unknown node, from an old term, or names an impossible index. None of them
may crash a node or break an invariant. Lies a member could tell (a forged leader
message in the current term, a vote request misstating its log) are out of
scope: Raft does not tolerate Byzantine peers.
"""

from __future__ import annotations

import random

import attrs

from triomq.consensus.core.log import Entry
from triomq.consensus.core.messages import (
    HeartbeatRequest,
    InstallSnapshotResponse,
    PushRequest,
    PushResponse,
)

_HUGE = 2**62


def _malformed(rng: random.Random, message: object, victim: int) -> object:
    kind = rng.randrange(5)
    if kind == 0:
        return rng.choice([None, "VOTE", b"\x00\x01", 42, object()])
    if kind == 1:
        return attrs.evolve(message, dst=victim, term=-rng.randint(1, 5))
    if kind == 2:
        return attrs.evolve(message, dst=victim, src="node-1")
    if kind == 3 and isinstance(message, PushRequest):
        return attrs.evolve(message, entries=(), type=rng.choice(list(type(message.type))))
    return attrs.evolve(message, dst=victim, term=float(message.term))


def _impossible_index(rng: random.Random, message: object) -> object:
    """Indexes out of every log's reach: past the end, or past ``MAX_INDEX``."""
    far = rng.choice([_HUGE, 10**6]) + rng.randrange(1000)
    if isinstance(message, PushRequest):
        entries = tuple(Entry(e.index + far, e.term, e.data, e.kind) for e in message.entries)
        return attrs.evolve(message, index=message.index + far, entries=entries)
    if isinstance(message, PushResponse):
        return attrs.evolve(message, index=message.index + far, end_index=message.end_index + far)
    if isinstance(message, InstallSnapshotResponse):
        return attrs.evolve(message, index=message.index + far)
    if isinstance(message, HeartbeatRequest):
        return attrs.evolve(message, commit_index=_HUGE + far)
    return attrs.evolve(message, term=max(0, message.term - 1))


def mutate(rng: random.Random, message: object, victim: int) -> object:
    """A bad variant of ``message`` (addressed to its receiver or to ``victim``)."""
    kind = rng.randrange(4)
    if kind == 0:
        return _malformed(rng, message, victim)
    if kind == 1:
        return attrs.evolve(message, term=max(0, message.term - rng.randint(1, 3)))
    if kind == 2:
        return attrs.evolve(message, src=1000 + rng.randrange(10))
    return _impossible_index(rng, message)
