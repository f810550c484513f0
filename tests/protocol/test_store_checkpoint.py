"""RocketMQ's ``checkpoint`` layout: fields by position, other bytes kept."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from triomq.protocol.store_checkpoint import (
    CONFIRM_PHY_OFFSET,
    FILE_SIZE,
    MASTER_FLUSHED_OFFSET,
    StoreCheckpointError,
    read_long,
    with_long,
)


def test_confirm_offset_is_the_long_at_byte_32():
    page = with_long(b"", CONFIRM_PHY_OFFSET, 0x0102030405060708)
    assert len(page) == FILE_SIZE
    assert page[32:40] == bytes.fromhex("0102030405060708")
    assert read_long(page, CONFIRM_PHY_OFFSET) == 0x0102030405060708


@given(st.binary(max_size=FILE_SIZE), st.integers(-(2**63), 2**63 - 1))
def test_writing_one_field_keeps_every_other_byte(original, value):
    page = with_long(original, CONFIRM_PHY_OFFSET, value)
    padded = original.ljust(FILE_SIZE, b"\0")
    assert page[:CONFIRM_PHY_OFFSET] == padded[:CONFIRM_PHY_OFFSET]
    assert page[CONFIRM_PHY_OFFSET + 8:] == padded[CONFIRM_PHY_OFFSET + 8:]
    assert read_long(page, CONFIRM_PHY_OFFSET) == value


@given(st.binary(max_size=64))
def test_short_files_are_a_typed_error(data):
    if len(data) >= MASTER_FLUSHED_OFFSET + 8:
        read_long(data, MASTER_FLUSHED_OFFSET)
    else:
        with pytest.raises(StoreCheckpointError, match="too short for the field at byte 24"):
            read_long(data, MASTER_FLUSHED_OFFSET, "store/checkpoint")
