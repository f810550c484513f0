"""Controller events: log-entry encoding round trips, canonical form, and bad entries."""

from __future__ import annotations

import json

import pytest
from controller_helpers import events
from hypothesis import given
from hypothesis import strategies as st

from triomq.controller import (
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    CleanBrokerDataEvent,
    ElectMasterEvent,
    EventDecodeError,
    UpdateBrokerAddressEvent,
    decode_event,
    encode_event,
)


@given(events)
def test_round_trip(event):
    data = encode_event(event)
    assert decode_event(data) == event
    assert encode_event(decode_event(data)) == data


def test_encoding_is_canonical_and_tagged():
    event = ElectMasterEvent("broker-a", 2, master_epoch=3, sync_state_set_epoch=5)
    assert encode_event(event) == (
        b'{"broker_name":"broker-a","master_epoch":3,"new_master_broker_id":2,'
        b'"sync_state_set_epoch":5,"type":"ElectMaster"}'
    )
    assert encode_event(AlterSyncStateSetEvent("b", 1, {3, 1, 2}, 4)) == (
        b'{"broker_name":"b","master_epoch":1,"sync_state_set":[1,2,3],'
        b'"sync_state_set_epoch":4,"type":"AlterSyncStateSet"}'
    )


@pytest.mark.parametrize("event", [
    ApplyBrokerIdEvent("c", "b", 1, "h:1", "h:1;5"),
    UpdateBrokerAddressEvent("c", "b", 1, "h:2"),
    AlterSyncStateSetEvent("b", 1, frozenset({1}), 2),
    ElectMasterEvent("b", None, 4, 2),
    CleanBrokerDataEvent("b", None),
    CleanBrokerDataEvent("b", frozenset({2, 3})),
])
def test_each_type_round_trips(event):
    assert decode_event(encode_event(event)) == event


def test_no_master_form():
    event = ElectMasterEvent("b", None, 4, 2)
    assert not event.new_master_elected
    assert ElectMasterEvent("b", 3, 4, 3).new_master_elected


def _entry(**fields):
    return json.dumps(fields).encode()


GOOD = {"type": "ElectMaster", "broker_name": "b", "new_master_broker_id": 2,
        "master_epoch": 3, "sync_state_set_epoch": 5}


@pytest.mark.parametrize(("data", "fragment"), [
    (b"", "not valid JSON"),
    (b"\xff\xfe", "not valid JSON"),
    (b"[1, 2]", "expected a JSON object"),
    (b"[" * 100_000, "not valid JSON"),
    (_entry(type="Vote"), "unknown type 'Vote'"),
    (_entry(broker_name="b"), "unknown type None"),
    (_entry(**{**GOOD, "extra": 1}), "unknown keys ['extra']"),
    (_entry(**{k: v for k, v in GOOD.items() if k != "master_epoch"}),
     "missing keys ['master_epoch']"),
    (_entry(**{**GOOD, "master_epoch": "3"}), "'master_epoch' must be an integer"),
    (_entry(**{**GOOD, "master_epoch": True}), "'master_epoch' must be an integer"),
    (_entry(**{**GOOD, "master_epoch": 1.0}), "'master_epoch' must be an integer"),
    (_entry(**{**GOOD, "master_epoch": -1}), "'master_epoch' out of range"),
    (_entry(**{**GOOD, "master_epoch": 2**63}), "'master_epoch' out of range"),
    (_entry(**{**GOOD, "broker_name": 7}), "'broker_name' must be a string"),
    (_entry(**{**GOOD, "new_master_broker_id": [2]}), "must be an integer"),
    (_entry(type="CleanBrokerData", broker_name="b", broker_ids=[3, 1]),
     "must be strictly increasing"),
    (_entry(type="CleanBrokerData", broker_name="b", broker_ids=[1, 1]),
     "must be strictly increasing"),
    (_entry(type="CleanBrokerData", broker_name="b", broker_ids="1"), "must be a list"),
    (_entry(type="AlterSyncStateSet", broker_name="b", master_epoch=1, sync_state_set=None,
            sync_state_set_epoch=1), "must be a list"),
])
def test_bad_entries_are_rejected_with_what_and_where(data, fragment):
    with pytest.raises(EventDecodeError, match="event") as info:
        decode_event(data)
    assert fragment in str(info.value)


def test_non_bytes_rejected():
    with pytest.raises(EventDecodeError, match="expected bytes"):
        decode_event("{}")  # type: ignore[arg-type]


def test_encode_rejects_non_events():
    with pytest.raises(TypeError, match="not a controller event"):
        encode_event("ElectMaster")  # type: ignore[arg-type]


@given(st.binary(max_size=200))
def test_fuzz_arbitrary_bytes(data):
    try:
        event = decode_event(data)
    except EventDecodeError:
        return
    assert decode_event(encode_event(event)) == event


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=3),
    max_leaves=8,
)


@given(
    st.sampled_from(["ApplyBrokerId", "UpdateBrokerAddress", "AlterSyncStateSet",
                     "ElectMaster", "CleanBrokerData"]),
    st.dictionaries(
        st.sampled_from(["cluster_name", "broker_name", "broker_id", "broker_address",
                         "register_check_code", "master_epoch", "sync_state_set",
                         "sync_state_set_epoch", "new_master_broker_id", "broker_ids"]),
        json_values,
    ),
)
def test_fuzz_structured_entries(tag, fields):
    data = json.dumps({**fields, "type": tag}).encode()
    try:
        event = decode_event(data)
    except EventDecodeError:
        return
    assert decode_event(encode_event(event)) == event
