"""The send header and offset message id codecs, fuzzed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from triomq.broker.core.headers import (
    HeaderError,
    SendHeader,
    encode_send_header,
    offset_msg_id,
    parse_offset_msg_id,
    parse_send_header,
)
from triomq.broker.send.core.put_checks import host_port

_text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)))


@given(st.dictionaries(st.sampled_from("abcdefghijklmn"), st.text(max_size=30)))
def test_parse_send_header_accepts_or_names_the_field(fields):
    try:
        header = parse_send_header(fields)
    except HeaderError as exc:
        assert exc.field in {"topic", "queueId", "sysFlag", "bornTimestamp", "flag",
                             "properties", "reconsumeTimes"}
    else:
        assert header.topic == fields["b"]
        assert header.queue_id >= 0


@given(
    topic=_text.filter(bool),
    queue_id=st.integers(0, 2**31 - 1),
    born=st.integers(-(2**63), 2**63 - 1),
    properties=st.dictionaries(_text.filter(bool), _text, max_size=4),
)
def test_send_header_round_trip(topic, queue_id, born, properties):
    header = SendHeader(topic=topic, producer_group="g", queue_id=queue_id,
                        born_timestamp=born, properties=properties)
    assert parse_send_header(encode_send_header(header)) == header


@pytest.mark.parametrize(("fields", "field"), [
    ({}, "topic"),
    ({"b": "t"}, "queueId"),
    ({"b": "t", "e": "-1"}, "queueId"),
    ({"b": "t", "e": "0", "g": "9" * 30}, "bornTimestamp"),
    ({"b": "t", "e": "0", "i": "KEYS"}, "properties"),
])
def test_bad_send_headers(fields, field):
    with pytest.raises(HeaderError) as info:
        parse_send_header(fields)
    assert info.value.field == field


@given(
    ip=st.ip_addresses().map(str),
    port=st.integers(0, 65535),
    offset=st.integers(0, 2**63 - 1),
)
def test_offset_msg_id_round_trip(ip, port, offset):
    msg_id = offset_msg_id((ip, port), offset)
    assert msg_id == msg_id.upper()
    assert parse_offset_msg_id(msg_id) == ((ip, port), offset)


def test_offset_msg_id_is_rocketmqs():
    assert offset_msg_id(("10.0.0.1", 10911), 4096) == "0A000001" "00002A9F" "0000000000001000"


@given(st.text(max_size=80))
def test_parse_offset_msg_id_rejects_garbage_with_header_error(text):
    try:
        parse_offset_msg_id(text)
    except HeaderError as exc:
        assert exc.field == "msgId"


def test_host_port():
    assert host_port("tcp://10.1.2.3:10911") == ("10.1.2.3", 10911)
    assert host_port("[::1]:80") == ("::1", 80)
    assert host_port("inproc://a") == ("0.0.0.0", 0)
    assert host_port("unknown peer") == ("0.0.0.0", 0)
