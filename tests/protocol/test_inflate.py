"""Bounded inflation: a decompression bomb costs no more memory than its limit."""

from __future__ import annotations

import tracemalloc
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triomq.protocol.inflate import MAX_DEFLATE_RATIO, InflateError, check_inflated_size, inflate

MIB = 1024 * 1024
# 200 MiB of zeros: about 204 KB compressed.
BOMB = zlib.compress(bytes(200 * MIB), 9)


def peak_allocated(call) -> tuple[int, str]:
    """Bytes allocated at the peak while ``call`` ran (tracemalloc), and the
    ``InflateError`` it raised."""
    tracemalloc.start()
    try:
        with pytest.raises(InflateError) as caught:
            call()
        return tracemalloc.get_traced_memory()[1], str(caught.value)
    finally:
        tracemalloc.stop()


def test_a_bomb_is_refused_having_inflated_no_more_than_its_limit() -> None:
    assert len(BOMB) < 210_000
    peak, message = peak_allocated(lambda: inflate(BOMB, 4 * MIB, "the body of message 7"))
    assert message == ("the body of message 7 inflates to more than its limit of 4194304 "
                       "bytes; it was not inflated further")
    # zlib's output buffer grows by doubling: at most about twice the limit, not 200 MiB.
    assert peak < 3 * 4 * MIB


def test_the_size_check_keeps_no_more_than_a_chunk() -> None:
    peak, message = peak_allocated(lambda: check_inflated_size(BOMB, 4 * MIB, "a send"))
    assert "a send inflates to more than its limit of 4194304 bytes" in message
    assert peak < MIB


def test_a_body_within_the_limit_inflates_whole() -> None:
    data = b"abc" * 100_000
    assert inflate(zlib.compress(data), len(data), "body") == data
    check_inflated_size(zlib.compress(data), len(data), "body")
    with pytest.raises(InflateError, match="more than its limit of 299999"):
        inflate(zlib.compress(data), len(data) - 1, "body")
    with pytest.raises(InflateError):
        check_inflated_size(zlib.compress(data), len(data) - 1, "body")


def test_a_body_too_small_to_pass_the_limit_is_not_inflated_to_check() -> None:
    # Not even zlib: only a body that could inflate past the limit is looked at.
    check_inflated_size(b"\xff" * 10, 10 * MAX_DEFLATE_RATIO, "body")


@pytest.mark.parametrize("data, fragment", [
    (b"garbage", "is not a deflate stream"),
    (zlib.compress(b"x" * 1000)[:-6], "truncated"),
])
def test_what_does_not_inflate_is_named(data: bytes, fragment: str) -> None:
    with pytest.raises(InflateError, match=fragment):
        inflate(data, MIB, "RegisterBrokerBody")


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=3000), st.integers(0, 4000), st.integers(0, 9))
def test_fuzz_inflate_returns_the_data_iff_it_is_within_the_limit(data: bytes, limit: int,
                                                                  level: int) -> None:
    compressed = zlib.compress(data, level)
    if len(data) <= limit:
        assert inflate(compressed, limit, "body") == data
        check_inflated_size(compressed, limit, "body")
    else:
        with pytest.raises(InflateError, match="more than its limit"):
            inflate(compressed, limit, "body")
        with pytest.raises(InflateError, match="more than its limit"):
            check_inflated_size(compressed, limit, "body")


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.integers(0, 1000))
def test_fuzz_any_bytes_inflate_or_raise_inflate_error(data: bytes, limit: int) -> None:
    try:
        out = inflate(data, limit, "body")
    except InflateError:
        return
    assert len(out) <= limit
