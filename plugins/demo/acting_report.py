"""What ``triomq demo --acting-master`` saw (``ActingRun``), and its report.

The scenario (``acting``) fills an ``ActingRun`` from what the nodes say:
the name server's routes, the brokers' consumer offsets (QUERY_CONSUMER_OFFSET),
the returning master's pre-online, and which broker group each consumed
message came from. ``report`` turns it into the lines the demo prints and
``problems`` into its verdict: an acknowledged message never consumed, a
queue's consumer offset that went back, or a wait that ran out.
"""

from __future__ import annotations

import itertools
from collections import Counter

import attrs

__all__ = ["OFFSET_MOMENTS", "ActingRun", "problems", "report"]

#: When the demo reads broker-a's consumer offsets, in order: none may be behind the one before.
OFFSET_MOMENTS = ("at the kill", "while acting", "after the return")


@attrs.define
class ActingRun:
    """One run of the acting-master scenario, as the nodes told it."""

    #: Group broker-a's master, and the group the acting slave escapes to.
    master: str = "a0"
    other_group: str = "broker-b"
    #: Every acknowledged message: its msg id -> (kind, the broker group that stored it).
    acked: dict[str, tuple[str, str]] = attrs.Factory(dict)
    #: Sends that failed or were not acknowledged SEND_OK (the report holds nobody to them).
    unacknowledged: int = 0
    #: Delayed messages stored on broker-a that came due while its master was gone.
    due_in_outage: set[str] = attrs.Factory(set)
    #: msg id -> the broker group of each delivery the consumer group got.
    consumed: dict[str, list[str]] = attrs.Factory(dict)
    #: msg ids of broker-a's messages consumed while its slave acted.
    through_acting: set[str] = attrs.Factory(set)
    #: Sends acknowledged while the slave acted, by the broker group that took them.
    outage_sends: Counter[str] = attrs.Factory(Counter)
    #: The slave the name server routed as broker id 0 (node name, broker id, address).
    acting_slave: str | None = None
    acting_id: int | None = None
    acting_address: str = ""
    #: Seconds from the kill to the route naming the slave broker id 0 with perm 4, and
    #: to the first slave's acting term (the node that began it).
    rewrite_after: float | None = None
    acting_after: float | None = None
    acting_term: str | None = None
    #: The returning master's pre-online: (table kind, slave address) taken, how it ended
    #: (None: no pre-online ran, as with skip_pre_online), and seconds from the master's
    #: start to the route naming it broker id 0 with perm 6.
    adopted: list[tuple[str, str]] = attrs.Factory(list)
    pre_online: str | None = None
    registered_after: float | None = None
    #: broker-a's consumer offsets of the demo's group, per queue, at each of OFFSET_MOMENTS.
    offsets: dict[str, dict[int, int]] = attrs.Factory(dict)
    #: What a wait gave up on, if one did.
    stalled: str | None = None

    @property
    def lost(self) -> list[str]:
        """Acknowledged, never consumed."""
        return sorted(self.acked.keys() - self.consumed.keys())

    @property
    def duplicates(self) -> int:
        return sum(len(groups) - 1 for groups in self.consumed.values())

    @property
    def escaped(self) -> list[str]:
        """Delayed messages due in the outage that the other group delivered."""
        return sorted(m for m in self.due_in_outage
                      if self.other_group in self.consumed.get(m, ()))

    def offsets_back(self) -> list[tuple[int, str, int, int]]:
        """(queue, moment, offset before, offset then) for each offset behind the one read
        before it."""
        back = []
        read = [(moment, self.offsets[moment]) for moment in OFFSET_MOMENTS
                if moment in self.offsets]
        for (_, before), (moment, then) in itertools.pairwise(read):
            for queue, offset in sorted(before.items()):
                if then.get(queue, -1) < offset:
                    back.append((queue, moment, offset, then.get(queue, -1)))
        return back


def problems(run: ActingRun) -> list[str]:
    """What makes the run fail: none when every acknowledged message was consumed, no
    offset of broker-a went back and the slave the route named is the one that acted."""
    found = []
    if run.stalled is not None:
        found.append(f"gave up waiting for {run.stalled}")
    if run.acting_term != run.acting_slave:
        found.append(f"the route names {run.acting_slave or 'no slave'} broker id 0 but "
                     f"{run.acting_term or 'no slave'} acts")
    if run.lost:
        found.append(f"{len(run.lost)} acknowledged message(s) never consumed")
    for queue, moment, before, then in run.offsets_back():
        found.append(f"queue {queue}'s offset went back {moment}: {before} -> {then}")
    return found


def _ms(seconds: float | None) -> str:
    return "not seen" if seconds is None else f"{seconds * 1000:.0f} ms"


def _adopted(adopted: list[tuple[str, str]]) -> str:
    by_slave: dict[str, list[str]] = {}
    for kind, address in adopted:
        by_slave.setdefault(address, []).append(kind)
    return "; ".join(f"took {', '.join(kinds)} from {address}"
                     for address, kinds in by_slave.items()) or "took nothing"


def report(run: ActingRun) -> list[str]:
    """The report's lines, as the demo prints them."""
    kinds = Counter(kind for kind, _ in run.acked.values())
    slave = run.acting_slave or "no slave"
    due = run.due_in_outage
    rows = [
        ("messages acknowledged", f"{len(run.acked)} ("
         + ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items())) + ")"),
        ("sends not acknowledged", f"{run.unacknowledged}"),
        ("messages consumed", f"{len(run.consumed)}"),
        ("acknowledged, never consumed", f"{len(run.lost)} (lost)"),
        ("consumed more than once", f"{run.duplicates}"),
        ("acting slave", slave + ("" if run.acting_id is None
                                  else f" (broker id {run.acting_id})")),
        ("kill -> route rewritten",
         f"{_ms(run.rewrite_after)} (broker id 0 -> {run.acting_address or '?'}, perm 4)"),
        ("kill -> acting term", f"{_ms(run.acting_after)} ({run.acting_term or 'none'})"),
        (f"consumed through {slave}", f"{len(run.through_acting)} message(s) of broker-a"),
        (f"sent while {slave} acted", f"{sum(run.outage_sends.values())} acknowledged ("
         + (", ".join(f"{n} by {group}" for group, n in sorted(run.outage_sends.items()))
            or "none") + ")"),
        ("delayed, due in the outage",
         f"{len(due)} stored on broker-a, {len(run.escaped)} delivered by "
         f"{run.other_group} (escaped), {len(due - run.consumed.keys())} lost"),
        (f"pre-online of {run.master}", f"{_adopted(run.adopted)} "
         f"({run.pre_online or 'no pre-online ran'})"),
        ("restart -> registered",
         f"{_ms(run.registered_after)} (broker id 0 -> {run.master}, perm 6)"),
        ("broker-a's consumer offsets", ", ".join(OFFSET_MOMENTS)),
    ]
    queues = sorted({q for offsets in run.offsets.values() for q in offsets})
    for queue in queues:
        seen = [run.offsets.get(moment, {}).get(queue) for moment in OFFSET_MOMENTS]
        rows.append((f"  queue {queue}",
                     ", ".join("?" if offset is None else str(offset) for offset in seen)))
    rows.append(("offsets gone back", f"{len(run.offsets_back())}"))
    rows.extend(("PROBLEM", problem) for problem in problems(run))
    return ["report", *(f"  {label:<28} {value}" for label, value in rows)]
