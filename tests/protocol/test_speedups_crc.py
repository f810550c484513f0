"""The C walks' CRC-32 (carry-less multiplication where the CPU has it) is zlib's."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from framework.protocol import commitlog_layout as layout

speedups = layout._speedups
pytestmark = pytest.mark.skipif(speedups is None, reason="C speedups not built")


@given(st.binary(max_size=5000), st.integers(0, 15))
def test_crc32_is_zlibs_at_any_length_and_alignment(data: bytes, skip: int) -> None:
    view = memoryview(data)[min(skip, len(data)):]
    assert speedups.crc32(view) == zlib.crc32(view)


@pytest.mark.parametrize("size", [0, 1, 15, 16, 63, 64, 65, 79, 80, 127, 128, 1024, 1 << 20])
def test_crc32_at_the_fold_boundaries(size: int) -> None:
    data = bytes((i * 131 + 7) & 0xFF for i in range(size))
    assert speedups.crc32(data) == zlib.crc32(data)
    assert speedups.crc32(b"\xff" * size) == zlib.crc32(b"\xff" * size)
