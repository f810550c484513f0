"""The replicas-info state machine (RocketMQ 5's ReplicasInfoManager), pure.

It holds a ``BrokerGroup`` per broker name and works in two halves:

- **Requests** (on the active controller only): ``get_next_broker_id``,
  ``apply_broker_id``, ``register_broker``, ``check_heartbeat``,
  ``alter_sync_state_set``, ``elect_master``, ``clean_broker_data`` and the
  reads ``get_replica_info``, ``get_sync_state_data``, ``get_metadata``.
  They validate against the current state, never change it, and return a
  ``ControllerResult``: code, remark, events to commit, payload.
- **Events** (on every controller, in log order): ``apply(event)``.

The controller service is then a thin loop::

    result = manager.elect_master(name, live_info)     # leader only
    for event in result.events:
        await raft.propose(encode_event(event))        # wait for commit
    ...
    manager.apply(decode_event(entry))                 # every replica, per committed entry
    reply(result)

Requests are checked against the applied state, which may lag proposals
still in flight; so every event names the epochs it was computed for and
``apply`` ignores (returns ``False``) an event whose epochs no longer match.
Two elections proposed from the same state therefore take effect once.
Aliveness is an input (``LiveInfoLookup``, see ``triomq.controller.core.election``);
nothing here reads a clock or does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType

from triomq.controller.core import snapshot as _snapshot
from triomq.controller.core.codes import ResponseCode
from triomq.controller.core.election import (
    ElectionPolicy,
    LiveInfoLookup,
    default_election_policy,
    is_alive,
)
from triomq.controller.core.events import (
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    CleanBrokerDataEvent,
    ElectMasterEvent,
    Event,
    UpdateBrokerAddressEvent,
)
from triomq.controller.core.group import FIRST_BROKER_ID, BrokerGroup
from triomq.controller.core.results import (
    AlterSyncStateSetResponse,
    ApplyBrokerIdResponse,
    ControllerResult,
    ElectMasterResponse,
    NextBrokerIdResponse,
    RegisterBrokerResponse,
    Replica,
    ReplicaInfoResponse,
    SyncStateData,
)
from triomq.controller.core.transitions import apply_event

Code = ResponseCode


def _fail(code: ResponseCode, remark: str) -> ControllerResult:
    return ControllerResult(code, remark)


def _ids(ids: Iterable[int]) -> list[int]:
    return sorted(ids)


def _check_cluster(group: BrokerGroup, cluster_name: str) -> ControllerResult | None:
    if group.cluster_name == cluster_name:
        return None
    return _fail(
        Code.CONTROLLER_INVALID_REQUEST,
        f"broker group {group.broker_name!r} belongs to cluster {group.cluster_name!r}, "
        f"not {cluster_name!r}",
    )


class ReplicasInfoManager:
    """Replica info of every broker group, with request validation and event application."""

    def __init__(self) -> None:
        self._groups: dict[str, BrokerGroup] = {}

    @property
    def groups(self) -> Mapping[str, BrokerGroup]:
        """Broker name -> group (read-only view)."""
        return MappingProxyType(self._groups)

    def group(self, broker_name: str) -> BrokerGroup | None:
        """The group named ``broker_name``, if registered."""
        return self._groups.get(broker_name)

    def _find(
        self, cluster_name: str | None, broker_name: str, missing: ResponseCode
    ) -> BrokerGroup | ControllerResult:
        """The group, or a rejection (``missing`` if unknown, INVALID_REQUEST if wrong
        cluster; ``cluster_name`` None: any)."""
        group = self._groups.get(broker_name)
        if group is None:
            return _fail(missing, f"broker group {broker_name!r} is not registered")
        if cluster_name is None:
            return group
        return _check_cluster(group, cluster_name) or group

    # ------------------------------------------------------------------
    # Registration: GetNextBrokerId, ApplyBrokerId, RegisterBroker, heartbeat.
    # ------------------------------------------------------------------

    def get_next_broker_id(
        self, cluster_name: str, broker_name: str
    ) -> ControllerResult[NextBrokerIdResponse]:
        """The id a new replica should apply for (``FIRST_BROKER_ID`` for a new group)."""
        group = self._groups.get(broker_name)
        if group is None:
            next_id = FIRST_BROKER_ID
        else:
            mismatch = _check_cluster(group, cluster_name)
            if mismatch is not None:
                return mismatch
            next_id = group.next_broker_id
        return ControllerResult(
            Code.SUCCESS, payload=NextBrokerIdResponse(cluster_name, broker_name, next_id)
        )

    def apply_broker_id(
        self,
        cluster_name: str,
        broker_name: str,
        broker_id: int,
        broker_address: str,
        register_check_code: str,
    ) -> ControllerResult[ApplyBrokerIdResponse]:
        """Claim ``broker_id`` in a group, proven by ``register_check_code``.

        A new group's first replica must take ``FIRST_BROKER_ID``. An id
        already owned by a replica with another check code is refused with
        CONTROLLER_BROKER_ID_INVALID; claiming one's own id again succeeds
        without an event.
        """
        response = ApplyBrokerIdResponse(cluster_name, broker_name, broker_id)
        event = ApplyBrokerIdEvent(
            cluster_name, broker_name, broker_id, broker_address, register_check_code
        )
        group = self._groups.get(broker_name)
        if group is None:
            if broker_id != FIRST_BROKER_ID:
                return _fail(
                    Code.CONTROLLER_BROKER_ID_INVALID,
                    f"broker group {broker_name!r} is not registered, so the first replica "
                    f"must apply for id {FIRST_BROKER_ID}, not {broker_id}",
                )
            return ControllerResult(Code.SUCCESS, events=(event,), payload=response)
        mismatch = _check_cluster(group, cluster_name)
        if mismatch is not None:
            return mismatch
        if broker_id < FIRST_BROKER_ID:
            return _fail(
                Code.CONTROLLER_BROKER_ID_INVALID,
                f"broker id {broker_id} is below the first id {FIRST_BROKER_ID}",
            )
        member = group.member(broker_id)
        if member is None:
            return ControllerResult(Code.SUCCESS, events=(event,), payload=response)
        if member.register_check_code == register_check_code:
            return ControllerResult(Code.SUCCESS, payload=response)
        return _fail(
            Code.CONTROLLER_BROKER_ID_INVALID,
            f"broker id {broker_id} of group {broker_name!r} is owned by another broker "
            "(register check code mismatch)",
        )

    def register_broker(
        self,
        cluster_name: str,
        broker_name: str,
        broker_id: int,
        broker_address: str,
        live_info: LiveInfoLookup,
    ) -> ControllerResult[RegisterBrokerResponse]:
        """A replica that owns ``broker_id`` (re)joins: tell it the alive master, if any.

        A changed address yields an ``UpdateBrokerAddressEvent``.
        """
        found = self._find(cluster_name, broker_name, Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED)
        if isinstance(found, ControllerResult):
            return found
        group = found
        member = group.member(broker_id)
        if member is None:
            return _fail(
                Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                f"broker id {broker_id} is not registered in group {broker_name!r}",
            )
        master = group.master_broker_id
        if master is not None and not is_alive(live_info, master):
            master = None
        events: tuple[Event, ...] = ()
        if member.address != broker_address:
            events = (
                UpdateBrokerAddressEvent(cluster_name, broker_name, broker_id, broker_address),
            )
        master_address = broker_address if master == broker_id else group.address_of(master)
        return ControllerResult(
            Code.SUCCESS,
            events=events,
            payload=RegisterBrokerResponse(
                cluster_name, broker_name, broker_id, master, master_address,
                group.master_epoch, group.sync_state_set, group.sync_state_set_epoch,
            ),
        )

    def check_heartbeat(
        self, cluster_name: str, broker_name: str, broker_id: int
    ) -> ControllerResult[None]:
        """Whether a heartbeat comes from a registered replica (else reject and ignore it)."""
        found = self._find(cluster_name, broker_name, Code.CONTROLLER_BROKER_METADATA_NOT_EXIST)
        if isinstance(found, ControllerResult):
            return found
        if found.member(broker_id) is None:
            return _fail(
                Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                f"broker id {broker_id} is not registered in group {broker_name!r}",
            )
        return ControllerResult(Code.SUCCESS)

    # ------------------------------------------------------------------
    # AlterSyncStateSet and ElectMaster.
    # ------------------------------------------------------------------

    def alter_sync_state_set(
        self,
        broker_name: str,
        master_broker_id: int,
        master_epoch: int,
        sync_state_set: Iterable[int],
        sync_state_set_epoch: int,
        live_info: LiveInfoLookup,
    ) -> ControllerResult[AlterSyncStateSetResponse]:
        """The master proposes a new SyncStateSet (shrink or expand).

        Checked in order: the group exists; ``master_epoch`` is current
        (else CONTROLLER_FENCED_MASTER_EPOCH); ``sync_state_set_epoch`` is
        current (else CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH); the sender is
        the master; the set changes, holds only registered (INVALID_REPLICAS)
        and alive (BROKER_NOT_ALIVE) replicas, and contains the master.
        """
        new_set = frozenset(sync_state_set)
        group = self._groups.get(broker_name)
        if group is None:
            return _fail(
                Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                f"broker group {broker_name!r} is not registered",
            )
        if master_epoch != group.master_epoch:
            return _fail(
                Code.CONTROLLER_FENCED_MASTER_EPOCH,
                f"group {broker_name!r} is at master epoch {group.master_epoch}, "
                f"not {master_epoch}",
            )
        if sync_state_set_epoch != group.sync_state_set_epoch:
            return _fail(
                Code.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                f"group {broker_name!r} is at SyncStateSet epoch {group.sync_state_set_epoch}, "
                f"not {sync_state_set_epoch}",
            )
        if master_broker_id != group.master_broker_id:
            return _fail(
                Code.CONTROLLER_INVALID_MASTER,
                f"the master of group {broker_name!r} is {group.master_broker_id}, "
                f"not {master_broker_id}",
            )
        if new_set == group.sync_state_set:
            return _fail(
                Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                f"SyncStateSet {_ids(new_set)} of group {broker_name!r} is unchanged",
            )
        unknown = new_set - group.broker_ids
        if unknown:
            return _fail(
                Code.CONTROLLER_INVALID_REPLICAS,
                f"brokers {_ids(unknown)} are not registered in group {broker_name!r}",
            )
        dead = [broker_id for broker_id in _ids(new_set) if not is_alive(live_info, broker_id)]
        if dead:
            return _fail(
                Code.CONTROLLER_BROKER_NOT_ALIVE,
                f"brokers {dead} of group {broker_name!r} are not alive",
            )
        if master_broker_id not in new_set:
            return _fail(
                Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                f"new SyncStateSet {_ids(new_set)} lacks the master {master_broker_id}",
            )
        new_epoch = group.sync_state_set_epoch + 1
        return ControllerResult(
            Code.SUCCESS,
            events=(AlterSyncStateSetEvent(broker_name, master_epoch, new_set, new_epoch),),
            payload=AlterSyncStateSetResponse(broker_name, new_set, new_epoch),
        )

    def elect_master(
        self,
        broker_name: str,
        live_info: LiveInfoLookup,
        *,
        broker_id: int | None = None,
        designate: bool = False,
        policy: ElectionPolicy = default_election_policy,
        enable_elect_unclean_master: bool = False,
    ) -> ControllerResult[ElectMasterResponse]:
        """Elect a master for ``broker_name`` through ``policy``.

        Who asks: the controller itself when a master went silent
        (``broker_id=None``); a broker that found no master (its own
        ``broker_id``); an administrator designating ``broker_id``
        (``designate=True``). The group's very first election (master epoch
        0) makes the given ``broker_id`` master without asking the policy.

        Outcomes: SUCCESS with an ``ElectMasterEvent`` (the payload flags
        ``possible_message_loss`` for an unclean choice);
        CONTROLLER_MASTER_STILL_EXIST when the policy keeps the current
        master; CONTROLLER_MASTER_NOT_AVAILABLE (controller-triggered) with
        a "no master elected" event that fences the dead master, or
        CONTROLLER_ELECT_MASTER_FAILED (broker or admin) without events.
        Whatever the policy says, a broker outside the SyncStateSet is only
        elected when unclean election is enabled.
        """
        group = self._groups.get(broker_name)
        if group is None:
            return _fail(
                Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                f"broker group {broker_name!r} is not registered",
            )
        if designate and broker_id is None:
            return _fail(Code.CONTROLLER_INVALID_REQUEST, "designated election without broker id")
        if broker_id is not None and group.member(broker_id) is None:
            return _fail(
                Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                f"broker id {broker_id} is not registered in group {broker_name!r}",
            )
        first_election = group.master_epoch == 0
        if first_election and broker_id is not None:
            # Nothing was ever written in this group: the first broker to ask
            # (or the one designated) becomes master, as in RocketMQ.
            new_master: int | None = broker_id
        else:
            new_master = policy(
                group, live_info, broker_id if designate else None, enable_elect_unclean_master
            )
        unclean = (
            new_master is not None
            and not first_election
            and new_master not in group.sync_state_set
        )
        if new_master is not None and group.member(new_master) is None:
            return _fail(
                Code.CONTROLLER_ELECT_MASTER_FAILED,
                f"the election policy chose {new_master}, not a replica of group {broker_name!r}",
            )
        if unclean and not enable_elect_unclean_master:
            return _fail(
                Code.CONTROLLER_ELECT_MASTER_FAILED,
                f"the election policy chose {new_master}, outside SyncStateSet "
                f"{_ids(group.sync_state_set)}, while unclean election is disabled",
            )
        if new_master is not None and new_master == group.master_broker_id:
            return ControllerResult(
                Code.CONTROLLER_MASTER_STILL_EXIST,
                f"master {new_master} of group {broker_name!r} is still alive",
                payload=self._elect_response(group, new_master, group.master_epoch,
                                             group.sync_state_set, group.sync_state_set_epoch),
            )
        if new_master is not None:
            master_epoch = group.master_epoch + 1
            sync_state_set_epoch = group.sync_state_set_epoch + 1
            remark = ""
            if unclean:
                remark = (
                    f"unclean election: broker {new_master} was not in SyncStateSet "
                    f"{_ids(group.sync_state_set)}; messages acknowledged by that set may be lost"
                )
            return ControllerResult(
                Code.SUCCESS,
                remark,
                events=(ElectMasterEvent(broker_name, new_master, master_epoch,
                                         sync_state_set_epoch),),
                payload=self._elect_response(group, new_master, master_epoch,
                                             frozenset({new_master}), sync_state_set_epoch,
                                             possible_message_loss=unclean),
            )
        reason = (
            f"no alive replica of group {broker_name!r} can be master: SyncStateSet "
            f"{_ids(group.sync_state_set)} has none alive"
        )
        if designate:
            reason = f"designated broker {broker_id} cannot be master of group {broker_name!r}"
        reason += (
            "; unclean election is enabled" if enable_elect_unclean_master
            else "; unclean election is disabled"
        )
        if broker_id is not None:
            return _fail(Code.CONTROLLER_ELECT_MASTER_FAILED, reason)
        master_epoch = group.master_epoch
        events: tuple[Event, ...] = ()
        if group.master_broker_id is not None:
            master_epoch += 1
            events = (ElectMasterEvent(broker_name, None, master_epoch,
                                       group.sync_state_set_epoch),)
        return ControllerResult(
            Code.CONTROLLER_MASTER_NOT_AVAILABLE,
            reason,
            events=events,
            payload=self._elect_response(group, None, master_epoch, group.sync_state_set,
                                         group.sync_state_set_epoch),
        )

    @staticmethod
    def _elect_response(
        group: BrokerGroup,
        master: int | None,
        master_epoch: int,
        sync_state_set: frozenset[int],
        sync_state_set_epoch: int,
        *,
        possible_message_loss: bool = False,
    ) -> ElectMasterResponse:
        return ElectMasterResponse(
            broker_name=group.broker_name,
            master_broker_id=master,
            master_address=group.address_of(master),
            master_epoch=master_epoch,
            sync_state_set=sync_state_set,
            sync_state_set_epoch=sync_state_set_epoch,
            replicas=tuple(Replica(m.broker_id, m.address) for m in group.members),
            possible_message_loss=possible_message_loss,
        )

    # ------------------------------------------------------------------
    # Reads and administration.
    # ------------------------------------------------------------------

    def get_replica_info(self, broker_name: str) -> ControllerResult[ReplicaInfoResponse]:
        """Master, epochs and SyncStateSet of one group."""
        group = self._groups.get(broker_name)
        if group is None:
            return _fail(
                Code.CONTROLLER_BROKER_METADATA_NOT_EXIST,
                f"broker group {broker_name!r} is not registered",
            )
        return ControllerResult(Code.SUCCESS, payload=ReplicaInfoResponse(
            broker_name, group.master_broker_id, group.master_address, group.master_epoch,
            group.sync_state_set, group.sync_state_set_epoch,
        ))

    def get_sync_state_data(
        self, broker_names: Iterable[str], live_info: Callable[[str, str], LiveInfoLookup]
    ) -> ControllerResult[tuple[SyncStateData, ...]]:
        """In-sync and out-of-sync replicas of the named groups (unknown names are skipped),
        each alive or not by ``live_info(cluster_name, broker_name)``."""
        data = []
        for name in sorted(set(broker_names)):
            group = self._groups.get(name)
            if group is None:
                continue
            live = live_info(group.cluster_name, name)
            replicas = [Replica(m.broker_id, m.address, is_alive(live, m.broker_id))
                        for m in group.members]
            data.append(SyncStateData(
                broker_name=name,
                master_broker_id=group.master_broker_id,
                master_address=group.master_address,
                master_epoch=group.master_epoch,
                sync_state_set_epoch=group.sync_state_set_epoch,
                in_sync_replicas=tuple(r for r in replicas if r.broker_id in group.sync_state_set),
                not_in_sync_replicas=tuple(
                    r for r in replicas if r.broker_id not in group.sync_state_set
                ),
            ))
        return ControllerResult(Code.SUCCESS, payload=tuple(data))

    def get_metadata(self) -> ControllerResult[tuple[BrokerGroup, ...]]:
        """Every group, sorted by broker name (the controller adds its own Raft membership)."""
        return ControllerResult(
            Code.SUCCESS, payload=tuple(self._groups[name] for name in sorted(self._groups))
        )

    def clean_broker_data(
        self,
        cluster_name: str | None,
        broker_name: str,
        live_info: LiveInfoLookup,
        *,
        broker_ids: Iterable[int] | None = None,
        clean_living_broker: bool = False,
    ) -> ControllerResult[None]:
        """Forget listed replicas of a group, or the whole group (``broker_ids=None``);
        ``cluster_name`` None (mqadmin's ``-l`` without ``-c``): whichever it is in.

        Unless ``clean_living_broker``, a group with a master cannot be
        forgotten whole and alive replicas cannot be forgotten
        (CONTROLLER_INVALID_CLEAN_BROKER_METADATA).
        """
        found = self._find(
            cluster_name, broker_name, Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
        )
        if isinstance(found, ControllerResult):
            return found
        group = found
        ids = None if broker_ids is None else frozenset(broker_ids)
        if ids is not None:
            if not ids:
                return _fail(Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA, "no broker ids given")
            unknown = ids - group.broker_ids
            if unknown:
                return _fail(
                    Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                    f"brokers {_ids(unknown)} are not registered in group {broker_name!r}",
                )
        if not clean_living_broker:
            if ids is None and group.master_broker_id is not None:
                return _fail(
                    Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                    f"group {broker_name!r} still has master {group.master_broker_id}",
                )
            alive = [i for i in _ids(ids or ()) if is_alive(live_info, i)]
            if alive:
                return _fail(
                    Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                    f"brokers {alive} of group {broker_name!r} are still alive",
                )
        return ControllerResult(Code.SUCCESS, events=(CleanBrokerDataEvent(broker_name, ids),))

    # ------------------------------------------------------------------
    # Applying committed events.
    # ------------------------------------------------------------------

    def apply(self, event: Event) -> bool:
        """Apply one committed event; return whether it changed the state.

        An event that no longer fits (stale epochs, unknown group or broker,
        an id already taken) is ignored. Every controller replica applies
        the same log and so ignores the same events.
        """
        return apply_event(self._groups, event)

    # ------------------------------------------------------------------
    # Snapshots for Raft log compaction.
    # ------------------------------------------------------------------

    def snapshot(self) -> bytes:
        """The whole state as bytes (see ``triomq.controller.core.snapshot``)."""
        return _snapshot.encode_groups(self._groups.values())

    def restore(self, data: bytes) -> None:
        """Replace the whole state with a snapshot; on ``SnapshotError`` nothing changes."""
        self._groups = _snapshot.decode_groups(data)

    @classmethod
    def from_snapshot(cls, data: bytes) -> ReplicasInfoManager:
        """A manager holding the state of a snapshot."""
        manager = cls()
        manager.restore(data)
        return manager
