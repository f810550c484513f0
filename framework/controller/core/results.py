"""What a controller request produces: a response and the events to commit.

Every request method of ``ReplicasInfoManager`` returns a
``ControllerResult``: the response code and remark for the caller, the
events the active controller must append to the Raft log (empty for reads
and rejections), and a typed response payload. The payload describes the
state *after* the events apply (e.g. the new epochs); the controller
service answers the request only once they are committed.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import attrs

from triomq.controller.core.codes import ResponseCode
from triomq.controller.core.events import Event

P = TypeVar("P")


@attrs.frozen
class ControllerResult(Generic[P]):
    """Response code, remark, events to commit, and the response payload."""

    code: ResponseCode
    remark: str = ""
    events: tuple[Event, ...] = ()
    payload: P | None = None

    @property
    def ok(self) -> bool:
        """Whether the request succeeded."""
        return self.code == ResponseCode.SUCCESS


@attrs.frozen
class Replica:
    """A replica's id and address, as responses show it (``alive``: in GET_SYNC_STATE_DATA,
    whether its heartbeats are current)."""

    broker_id: int
    address: str
    alive: bool = False


@attrs.frozen
class NextBrokerIdResponse:
    """GET_NEXT_BROKER_ID: the id a new replica of the group should apply for."""

    cluster_name: str
    broker_name: str
    next_broker_id: int


@attrs.frozen
class ApplyBrokerIdResponse:
    """APPLY_BROKER_ID: the id the replica now owns."""

    cluster_name: str
    broker_name: str
    broker_id: int


@attrs.frozen
class RegisterBrokerResponse:
    """REGISTER_BROKER: the group's master (only when alive) and epochs.

    ``master_broker_id`` is ``None`` when the group has no alive master; the
    broker then asks for an election.
    """

    cluster_name: str
    broker_name: str
    broker_id: int
    master_broker_id: int | None
    master_address: str | None
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int


@attrs.frozen
class AlterSyncStateSetResponse:
    """ALTER_SYNC_STATE_SET: the accepted SyncStateSet and its new epoch."""

    broker_name: str
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int


@attrs.frozen
class ElectMasterResponse:
    """ELECT_MASTER: the group's master after the election and its epochs.

    ``possible_message_loss`` is set when the master was elected from
    outside the SyncStateSet (unclean election): messages acknowledged by
    the old SyncStateSet may be missing on it. ``replicas`` is the group's
    membership (RocketMQ's BrokerMemberGroup), for notifying its brokers.
    """

    broker_name: str
    master_broker_id: int | None
    master_address: str | None
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int
    replicas: tuple[Replica, ...]
    possible_message_loss: bool = False


@attrs.frozen
class ReplicaInfoResponse:
    """GET_REPLICA_INFO: master, epochs and SyncStateSet of one group."""

    broker_name: str
    master_broker_id: int | None
    master_address: str | None
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int


@attrs.frozen
class SyncStateData:
    """GET_SYNC_STATE_DATA, per group: replicas in and out of the SyncStateSet."""

    broker_name: str
    master_broker_id: int | None
    master_address: str | None
    master_epoch: int
    sync_state_set_epoch: int
    in_sync_replicas: tuple[Replica, ...]
    not_in_sync_replicas: tuple[Replica, ...]
