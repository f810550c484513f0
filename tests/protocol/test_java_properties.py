"""Properties text as RocketMQ writes it (``MixAll.properties2String``) and as
``java.util.Properties.load`` reads it; the expected values follow the rules of
``Properties.load``'s documentation, written out by hand."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from triomq.protocol.java_properties import PropertiesError, dump_properties, load_properties


def test_dump_is_sorted_name_value_lines() -> None:
    assert dump_properties({"b": "2", "a": "x:1;y:2"}) == b"a=x:1;y:2\nb=2\n"
    assert dump_properties({}) == b""


@pytest.mark.parametrize(("text", "expected"), [
    (b"a=1\nb=2\n", {"a": "1", "b": "2"}),
    (b"a = 1\r\nb:2\rc 3", {"a": "1", "b": "2", "c": "3"}),
    (b"  # comment\n! another\n\n  key  =  value with spaces  ", {"key": "value with spaces  "}),
    (b"a==b", {"a": "=b"}),
    (b"a\\=b=c", {"a=b": "c"}),
    (b"a\\\\=b", {"a\\": "b"}),
    (b"key", {"key": ""}),
    (b"list=one,\\\n    two,\\\n    three", {"list": "one,two,three"}),
    (b"a=1\\\\\nb=2", {"a": "1\\", "b": "2"}),
    (b"tab=\\tx\\u0041\\q", {"tab": "\txAq"}),
    (b"a=1\na=2", {"a": "2"}),
    ("name=caf\u00e9".encode(), {"name": "caf\u00e9"}),
])
def test_load_reads_what_properties_load_reads(text: bytes, expected: dict) -> None:
    assert load_properties(text) == expected


@pytest.mark.parametrize("text", [b"a=\\u12", b"a=\\uzzzz", b"\xff=1"])
def test_load_refuses_what_is_not_properties_text(text: bytes) -> None:
    with pytest.raises(PropertiesError):
        load_properties(text)


@given(st.dictionaries(st.from_regex(r"[A-Za-z][A-Za-z0-9.]{0,12}", fullmatch=True),
                       st.from_regex(r"[A-Za-z0-9:;,./-]{0,20}", fullmatch=True)))
def test_what_rocketmq_writes_reads_back(properties: dict) -> None:
    assert load_properties(dump_properties(properties)) == properties


@given(st.binary(max_size=80))
def test_any_bytes_read_or_raise_properties_error(data: bytes) -> None:
    with contextlib.suppress(PropertiesError):
        load_properties(data)
