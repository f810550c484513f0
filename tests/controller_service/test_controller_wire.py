"""Wire encodings (fuzzed), the Raft state-machine adapter, configs and the identity file."""

from __future__ import annotations

import contextlib
import json

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from triomq.broker.config import BrokerConfig
from triomq.broker.replication.controller_mode import (
    IDENTITY_FILE,
    BrokerIdentity,
    load_identity,
    save_identity,
)
from triomq.controller import ApplyBrokerIdEvent, ElectMasterEvent, encode_event
from triomq.controller.core.config import ControllerConfig, from_properties, to_properties
from triomq.controller.core.results import Replica, SyncStateData
from triomq.controller.core.state_machine import ReplicasStateMachine
from triomq.controller.core.wire import (
    BrokerEpochCache,
    ControllerMetadata,
    EpochRange,
    ReplicaInfo,
    WireError,
    decode_epoch_cache,
    decode_sync_state_data,
    elect_fields,
    encode_elect_body,
    encode_epoch_cache,
    encode_sync_state_data,
    encode_sync_state_set,
    metadata_fields,
    read_elect_answer,
    read_metadata,
    read_replica_info,
    read_sync_state_set,
    replica_info_fields,
)
from triomq.errors import ConfigError
from triomq.settings import from_mapping

ids = st.integers(0, 2**63 - 1)
names = st.text(min_size=1, max_size=12)

# RocketMQ's shapes write TCP addresses as host:port and read them back as tcp://.
tcp_addresses = st.text(min_size=1, max_size=20).filter(lambda a: "://" not in a).map(
    lambda a: f"tcp://{a}")

replica_infos = st.builds(
    ReplicaInfo,
    broker_name=names,
    master_broker_id=st.none() | ids,
    master_address=st.none() | tcp_addresses,
    master_epoch=ids,
    sync_state_set=st.frozensets(ids, max_size=4),
    sync_state_set_epoch=ids,
)


@given(replica_infos)
def test_replica_info_round_trips(info):
    """REGISTER_BROKER's and GET_REPLICA_INFO's answers and NOTIFY_BROKER_ROLE_CHANGED."""
    body = encode_sync_state_set(info.sync_state_set, info.sync_state_set_epoch)
    assert read_replica_info(replica_info_fields(info), body, info.broker_name, "x") == info


# RocketMQ's shapes write TCP addresses as host:port; these round-trip as they are.
plain_addresses = st.text(max_size=20).filter(lambda a: not a.startswith("tcp://"))
replica_lists = st.dictionaries(ids, st.tuples(plain_addresses, st.booleans()),
                                max_size=3).map(
    lambda d: tuple(Replica(i, a, alive) for i, (a, alive) in sorted(d.items())))
sync_state_data = st.dictionaries(names, st.builds(
    SyncStateData, broker_name=st.just(""), master_broker_id=st.none() | ids,
    master_address=st.none() | plain_addresses, master_epoch=ids, sync_state_set_epoch=ids,
    in_sync_replicas=replica_lists, not_in_sync_replicas=replica_lists), max_size=3).map(
    lambda d: tuple(attrs.evolve(data, broker_name=name) for name, data in sorted(d.items())))


@given(sync_state_data)
def test_sync_state_data_round_trips(groups):
    assert decode_sync_state_data(encode_sync_state_data(groups)) == groups


@given(st.builds(ControllerMetadata, group=st.none() | names,
                 leader_id=st.none() | st.from_regex(r"[0-9]{1,3}", fullmatch=True),
                 leader_address=st.none() | plain_addresses, is_leader=st.booleans(),
                 peers=st.lists(st.tuples(st.from_regex(r"[0-9]{1,3}", fullmatch=True),
                                          plain_addresses.filter(lambda a: ";" not in a)),
                                max_size=3).map(tuple)))
def test_metadata_round_trips(metadata):
    assert read_metadata(metadata_fields(metadata)) == metadata


@given(st.builds(BrokerEpochCache, cluster_name=names, broker_name=names, broker_id=ids,
                 max_offset=ids,
                 epochs=st.lists(st.builds(EpochRange, ids, ids, ids), max_size=4)))
def test_epoch_cache_round_trips(cache):
    assert decode_epoch_cache(encode_epoch_cache(cache)) == cache


@given(names, st.builds(
    ReplicaInfo, broker_name=names, master_broker_id=st.none() | ids,
    master_address=st.none() | tcp_addresses, master_epoch=ids,
    sync_state_set=st.frozensets(ids, max_size=4), sync_state_set_epoch=ids,
    replicas=st.dictionaries(ids, tcp_addresses, max_size=4).map(
        lambda d: tuple(sorted(d.items()))),
    possible_message_loss=st.booleans()))
def test_elect_answer_round_trips(cluster_name, info):
    assert read_elect_answer(elect_fields(info), encode_elect_body(cluster_name, info),
                             info.broker_name) == info


def read_elect_body(data: bytes) -> ReplicaInfo:
    return read_elect_answer({"masterEpoch": "1", "syncStateSetEpoch": "1"}, data, "g")


def read_replica_info_body(data: bytes) -> ReplicaInfo:
    return read_replica_info({"masterEpoch": "1"}, data, "g", "replica info")


def read_sync_state_set_body(data: bytes) -> tuple[frozenset[int], int]:
    return read_sync_state_set(data, "sync state set")


@given(st.dictionaries(st.sampled_from(["group", "controllerLeaderId", "peers", "isLeader"]),
                       st.text(max_size=20)))
def test_metadata_headers_read_or_name_the_problem(fields):
    with contextlib.suppress(WireError):
        read_metadata(fields)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=20)
DECODERS = [read_replica_info_body, read_sync_state_set_body, decode_sync_state_data,
            decode_epoch_cache, read_elect_body]


@pytest.mark.parametrize("decode", DECODERS)
@given(data=st.binary(max_size=200))
def test_decoders_refuse_arbitrary_bytes_with_wire_errors(decode, data):
    with contextlib.suppress(WireError):
        decode(data)


@pytest.mark.parametrize("decode", DECODERS)
@given(value=json_values)
def test_decoders_refuse_arbitrary_json_with_wire_errors(decode, value):
    try:
        decode(json.dumps(value).encode())
    except WireError as exc:
        assert str(exc)


@given(info=replica_infos, key=st.sampled_from(["syncStateSet", "syncStateSetEpoch"]),
       value=json_values)
def test_a_sync_state_set_with_one_bad_field(info, key, value):
    obj = json.loads(encode_sync_state_set(info.sync_state_set, info.sync_state_set_epoch))
    obj[key] = value
    try:
        read_replica_info({}, json.dumps(obj).encode(), "g", "replica info")
    except WireError as exc:
        assert "replica info body" in str(exc)


def test_state_machine_applies_events_and_ignores_other_entries():
    machine = ReplicasStateMachine()
    event = ApplyBrokerIdEvent("c", "g", 1, "inproc://a", "code")
    assert machine.apply(1, encode_event(event)) is True
    assert machine.apply(2, encode_event(event)) is False  # already applied: no change
    assert machine.apply(3, b"not an event") is False
    assert machine.undecodable_entries == 1
    assert machine.apply(4, encode_event(ElectMasterEvent("g", 1, 1, 1))) is True
    copy = ReplicasStateMachine()
    copy.restore(machine.snapshot())
    assert copy.manager.group("g") == machine.manager.group("g")
    assert copy.manager.group("g").master_broker_id == 1


def test_controller_config():
    config = from_mapping(ControllerConfig, {
        "node_id": 2, "peers": {"1": "tcp://a:1", "2": "tcp://b:2"},
        "raft": {"tick_interval_ms": 10}})
    raft = config.raft_config()
    assert (raft.node_id, raft.peers, raft.tick_interval_ms) == (
        2, {1: "tcp://a:1", 2: "tcp://b:2"}, 10)
    with pytest.raises(ConfigError, match=r"controller\.node_id"):
        ControllerConfig(node_id=3, peers={1: "tcp://a:1"}).raft_config()
    with pytest.raises(ConfigError, match=r"controller.raft.bogus: unknown key"):
        ControllerConfig(node_id=1, peers={1: "tcp://a:1"}, raft={"bogus": 1}).raft_config()
    with pytest.raises(ConfigError, match=r"peers.x: controller id 'x'"):
        from_mapping(ControllerConfig, {"peers": {"x": "tcp://a:1"}})
    with pytest.raises(ConfigError, match=r"peers\.1: expected 'scheme://location'"):
        from_mapping(ControllerConfig, {"peers": {"1": "a:1"}})
    with pytest.raises(ConfigError, match="broker_not_active_timeout"):
        from_mapping(ControllerConfig, {"broker_not_active_timeout": 0})


def test_controller_config_as_properties():
    """RocketMQ's ControllerConfig names; controllerDLegerPeers as RocketMQ writes it."""
    values = {"node_id": 2, "peers": {1: "tcp://10.0.0.1:9878", 2: "inproc://c2"},
              "group": "group1", "enable_elect_unclean_master": True,
              "scan_not_active_broker_interval": 5000}
    properties = to_properties(values)
    assert properties == {
        "controllerDLegerSelfId": "2", "controllerDLegerGroup": "group1",
        "controllerDLegerPeers": "1-10.0.0.1:9878;2-inproc://c2",
        "enableElectUncleanMaster": "true", "scanNotActiveBrokerInterval": "5000"}
    assert from_properties(properties) == {
        **values, "peers": {"1": "tcp://10.0.0.1:9878", "2": "inproc://c2"}}
    assert from_properties({"enableElectUncleanMaster": "FALSE"}) == {
        "enable_elect_unclean_master": False}
    with pytest.raises(ConfigError, match="no property name for \\['raft'\\]"):
        to_properties({"raft": {}})
    for bad, message in (({"rocketmqHome": "/x"}, "unknown property 'rocketmqHome'"),
                         ({"requestTimeout": "3s"}, "requestTimeout: expected an integer"),
                         ({"requestTimeout": "٣"}, "expected an integer"),
                         ({"notifyBrokerRoleChanged": "yes"}, "expected true or false"),
                         ({"controllerDLegerPeers": "n0-a:1"}, "expected id-host:port")):
        with pytest.raises(ConfigError, match=message):
            from_properties(bad)


def test_broker_config_in_controller_mode():
    config = BrokerConfig(enable_controller_mode=True, broker_id=3,
                          controller_addresses=("tcp://c1:9878",))
    assert config.ha_master_address == ""
    with pytest.raises(ConfigError, match="controller_addresses: required in controller mode"):
        BrokerConfig(enable_controller_mode=True)
    with pytest.raises(ConfigError, match="controller_addresses"):
        from_mapping(BrokerConfig, {"enable_controller_mode": True,
                                    "controller_addresses": ["c1:9878"]})


def test_broker_identity_file(tmp_path):
    assert load_identity(str(tmp_path)) is None
    identity = BrokerIdentity("c", "g", 3, "tcp://a:1;123")
    save_identity(identity, str(tmp_path))
    assert load_identity(str(tmp_path)) == identity
    (tmp_path / IDENTITY_FILE).write_text("{not json")
    with pytest.raises(ConfigError, match="damaged"):
        load_identity(str(tmp_path))
