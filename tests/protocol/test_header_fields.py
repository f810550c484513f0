"""Header fields read as RocketMQ's Java decoders read them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from triomq.protocol.header_fields import (
    INT32,
    INT64,
    HeaderFieldError,
    HeaderFields,
    java_integer,
)


@pytest.mark.parametrize(("raw", "value"), [
    ("0", 0), ("42", 42), ("-7", -7), ("+7", 7), ("9223372036854775807", 2**63 - 1),
    ("-9223372036854775808", -(2**63)),
    # What Python's int() takes and Java's parseLong does not.
    (" 5", None), ("5 ", None), ("1_000", None), ("٣", None), ("", None), ("-", None),
    ("0x10", None), ("1e3", None), ("12345678901234567890", None),
])
def test_integers_are_read_as_javas_parse_long(raw: str, value: int | None) -> None:
    assert java_integer(raw) == value


def test_each_read_names_the_request_and_the_field() -> None:
    header = HeaderFields({"queueId": "x", "offset": "-1", "flag": "yes", "ids": "1;a"},
                          "PULL_MESSAGE")
    with pytest.raises(HeaderFieldError,
                       match=r"^PULL_MESSAGE: header field 'topic': missing$"):
        header.string("topic")
    with pytest.raises(HeaderFieldError, match="'queueId': expected an integer, got 'x'"):
        header.integer("queueId", INT32)
    with pytest.raises(HeaderFieldError, match="'queueId': expected a non-negative integer"):
        header.integer("queueId")
    with pytest.raises(HeaderFieldError, match="'offset': expected a non-negative integer"):
        header.integer("offset")
    with pytest.raises(HeaderFieldError, match=r"'offset': -1 is out of range \[-9, -2\]"):
        header.integer("offset", (-9, -2))
    assert header.integer("offset", INT64) == -1
    with pytest.raises(HeaderFieldError, match="'flag': expected 'true' or 'false', got 'yes'"):
        header.boolean("flag")
    with pytest.raises(HeaderFieldError, match="'ids': expected broker ids"):
        header.id_set("ids")
    assert header.optional_integer("absent") is None
    assert header.boolean("absent", default=True) is True
    assert header.id_set("absent") is None
    assert HeaderFields({"ids": "3;1"}).id_set("ids") == {1, 3}


def test_a_role_raises_its_own_error() -> None:
    class Refused(Exception):
        pass

    with pytest.raises(Refused, match=r"^header field 'topic': missing$"):
        HeaderFields({}, error=Refused).string("topic")


@given(st.dictionaries(st.sampled_from(["a", "b", "c"]), st.text(max_size=30)),
       st.sampled_from(["a", "b", "c"]))
def test_any_header_reads_as_a_value_or_a_field_error(fields: dict[str, str], key: str) -> None:
    header = HeaderFields(fields, "X")
    for read in (header.string, header.integer, header.optional_integer, header.boolean,
                 header.id_set, lambda k: header.integer(k, INT32)):
        try:
            read(key)
        except HeaderFieldError as exc:
            assert f"header field {key!r}" in str(exc)
