"""Master election policies: who becomes the master of a broker group.

A policy is a plain callable (pure: no I/O, no clock) with this signature::

    policy(group, live_info, designated_broker_id, enable_elect_unclean_master)
        -> broker id | None

- ``group``: the group's ``BrokerGroup`` (replicas, current or last master,
  SyncStateSet, epochs).
- ``live_info``: ``broker_id -> BrokerLiveInfo | None``, what the controller
  learnt from the broker's heartbeats; ``None`` means never heard of it and
  counts as not alive.
- ``designated_broker_id``: the broker an administrator asked for
  (``electMaster`` with a broker id), else ``None``.
- ``enable_elect_unclean_master``: whether a replica outside the SyncStateSet
  may be chosen (it may lack acknowledged messages).

It returns the broker id to make master (the current master's id to keep
it) or ``None`` when nobody can be. The replicas-info state machine turns
the answer into an ``ElectMasterEvent`` and reports an unclean choice.
Plugins provide policies by name through the ``triomq_election_policy``
hook; ``default_election_policy`` is RocketMQ's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

import attrs

from triomq.controller.core.group import BrokerGroup


@attrs.frozen
class BrokerLiveInfo:
    """What a broker's latest heartbeat said, and whether it is still alive.

    ``epoch`` is the broker's last master epoch (from its epoch file),
    ``max_offset`` the end of its commit log, ``confirm_offset`` the offset
    known replicated to the whole SyncStateSet; a smaller
    ``election_priority`` is preferred.
    """

    broker_id: int
    alive: bool
    epoch: int = 0
    max_offset: int = 0
    confirm_offset: int = 0
    election_priority: int = 0


#: ``broker_id -> BrokerLiveInfo | None`` for the replicas of one group.
LiveInfoLookup = Callable[[int], BrokerLiveInfo | None]


class ElectionPolicy(Protocol):
    """The election policy interface (see the module docstring)."""

    def __call__(
        self,
        group: BrokerGroup,
        live_info: LiveInfoLookup,
        designated_broker_id: int | None,
        enable_elect_unclean_master: bool,
    ) -> int | None: ...


def is_alive(live_info: LiveInfoLookup, broker_id: int) -> bool:
    """Whether ``live_info`` reports ``broker_id`` alive."""
    info = live_info(broker_id)
    return info is not None and info.alive


def _best(candidates: Iterable[BrokerLiveInfo]) -> int | None:
    # Highest epoch, then longest log, then smallest priority; the broker id
    # breaks remaining ties so every controller replica picks the same one.
    ranked = sorted(
        candidates,
        key=lambda info: (-info.epoch, -info.max_offset, info.election_priority, info.broker_id),
    )
    return ranked[0].broker_id if ranked else None


def _elect_among(
    brokers: Iterable[int],
    live_info: LiveInfoLookup,
    old_master: int | None,
    designated_broker_id: int | None,
) -> int | None:
    alive: dict[int, BrokerLiveInfo] = {}
    for broker_id in brokers:
        info = live_info(broker_id)
        if info is not None and info.alive:
            alive[broker_id] = info
    if not alive:
        return None
    if old_master in alive and designated_broker_id in (None, old_master):
        return old_master
    if designated_broker_id is not None:
        return designated_broker_id if designated_broker_id in alive else None
    return _best(alive.values())


def default_election_policy(
    group: BrokerGroup,
    live_info: LiveInfoLookup,
    designated_broker_id: int | None,
    enable_elect_unclean_master: bool,
) -> int | None:
    """RocketMQ's default policy.

    Two rounds: the alive replicas of the SyncStateSet, then (only when
    unclean election is enabled and the first round found nobody) all alive
    replicas. In each round:

    1. keep the old master if it is a candidate, unless another broker is designated;
    2. else the designated broker if it is a candidate; if it is not, the
       round finds nobody (an administrator's choice is never swapped for
       another broker);
    3. else the best candidate by epoch (desc), max_offset (desc),
       election_priority (asc), then the smallest broker id.
    """
    old_master = group.master_broker_id
    chosen = _elect_among(
        sorted(group.sync_state_set & group.broker_ids), live_info, old_master,
        designated_broker_id,
    )
    if chosen is None and enable_elect_unclean_master:
        chosen = _elect_among(
            sorted(group.broker_ids), live_info, old_master, designated_broker_id
        )
    return chosen
