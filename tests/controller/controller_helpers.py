"""Helpers for the controller's pure-core tests: a live-info table, a group builder, strategies."""

from __future__ import annotations

import attrs
from hypothesis import strategies as st

from triomq.controller import (
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    BrokerGroup,
    BrokerLiveInfo,
    CleanBrokerDataEvent,
    ControllerResult,
    ElectMasterEvent,
    ReplicasInfoManager,
    ResponseCode,
    UpdateBrokerAddressEvent,
)
from triomq.controller.core._json import MAX_INT

CLUSTER = "DefaultCluster"
GROUP = "broker-a"


def address(broker_id: int) -> str:
    return f"10.0.0.{broker_id}:10911"


def check_code(broker_id: int) -> str:
    return f"{address(broker_id)};{1700000000000 + broker_id}"


class LiveTable:
    """A hand-set live-info lookup: ``live(broker_id)`` as the controller would see it."""

    def __init__(self) -> None:
        self.infos: dict[int, BrokerLiveInfo] = {}

    def up(self, broker_id: int, **fields: int) -> None:
        self.infos[broker_id] = BrokerLiveInfo(broker_id, True, **fields)

    def down(self, broker_id: int) -> None:
        old = self.infos.get(broker_id, BrokerLiveInfo(broker_id, True))
        self.infos[broker_id] = attrs.evolve(old, alive=False)

    def __call__(self, broker_id: int) -> BrokerLiveInfo | None:
        return self.infos.get(broker_id)


class Harness:
    """A manager, its live-info table, and the broker-side registration flow."""

    def __init__(self) -> None:
        self.manager = ReplicasInfoManager()
        self.live = LiveTable()

    def commit(self, result: ControllerResult) -> ControllerResult:
        """Apply a result's events as Raft would once they are committed."""
        for event in result.events:
            assert self.manager.apply(event), event
        return result

    def join(self, broker_name: str = GROUP, cluster: str = CLUSTER) -> int:
        """A new broker: GetNextBrokerId, ApplyBrokerId, RegisterBroker; it is alive."""
        next_id = self.manager.get_next_broker_id(cluster, broker_name).payload.next_broker_id
        applied = self.commit(self.manager.apply_broker_id(
            cluster, broker_name, next_id, address(next_id), check_code(next_id)
        ))
        assert applied.ok, applied
        self.live.up(next_id)
        registered = self.commit(self.manager.register_broker(
            cluster, broker_name, next_id, address(next_id), self.live
        ))
        assert registered.ok, registered
        return next_id

    def group(self, broker_name: str = GROUP) -> BrokerGroup:
        group = self.manager.group(broker_name)
        assert group is not None
        return group

    def build(self, replicas: int = 3, broker_name: str = GROUP) -> BrokerGroup:
        """A group of ``replicas`` alive brokers, master 1, all in the SyncStateSet."""
        ids = [self.join(broker_name) for _ in range(replicas)]
        elected = self.commit(self.manager.elect_master(broker_name, self.live, broker_id=ids[0]))
        assert elected.ok, elected
        if replicas > 1:
            group = self.group(broker_name)
            altered = self.commit(self.manager.alter_sync_state_set(
                broker_name, ids[0], group.master_epoch, ids, group.sync_state_set_epoch,
                self.live,
            ))
            assert altered.ok, altered
        return self.group(broker_name)

    def assert_rejected(self, result: ControllerResult, code: ResponseCode) -> None:
        """A rejection: the code, a remark, and no events to commit."""
        assert result.code == code, result
        assert result.remark
        assert result.events == ()


names = st.text(max_size=12)
ids = st.integers(min_value=0, max_value=MAX_INT)
id_sets = st.frozensets(ids, max_size=5)

events = st.one_of(
    st.builds(ApplyBrokerIdEvent, names, names, ids, names, names),
    st.builds(UpdateBrokerAddressEvent, names, names, ids, names),
    st.builds(AlterSyncStateSetEvent, names, ids, id_sets, ids),
    st.builds(ElectMasterEvent, names, st.none() | ids, ids, ids),
    st.builds(CleanBrokerDataEvent, names, st.none() | id_sets),
)
