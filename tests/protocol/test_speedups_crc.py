"""The C walks' CRC-32 (carry-less multiplication where the CPU has it) is zlib's."""

from __future__ import annotations

import os
import subprocess
import sys
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from triomq.protocol import commitlog_layout as layout

speedups = layout._speedups
pytestmark = pytest.mark.skipif(speedups is None, reason="C speedups not built")


@given(st.binary(max_size=5000), st.integers(0, 15))
def test_crc32_is_zlibs_at_any_length_and_alignment(data: bytes, skip: int) -> None:
    view = memoryview(data)[min(skip, len(data)):]
    assert speedups.crc32(view) == zlib.crc32(view)


@pytest.mark.parametrize("size", [0, 1, 15, 16, 63, 64, 65, 79, 80, 127, 128, 255, 256, 257,
                                  271, 272, 319, 320, 511, 512, 1024, 1 << 20])
def test_crc32_at_the_fold_boundaries(size: int) -> None:
    data = bytes((i * 131 + 7) & 0xFF for i in range(size))
    assert speedups.crc32(data) == zlib.crc32(data)
    assert speedups.crc32(b"\xff" * size) == zlib.crc32(b"\xff" * size)


def test_crc32_without_the_512_bit_folds_is_zlibs_too() -> None:
    """CPUs without VPCLMULQDQ fold 128 bits at a time at every length."""
    check = ("import zlib; from triomq.protocol import commitlog_layout as layout; "
             "sizes = [64, 255, 256, 1000, 4096, 1 << 20]; "
             "data = [bytes((i * 131 + 7) & 0xFF for i in range(n)) for n in sizes]; "
             "assert all(layout._speedups.crc32(d) == zlib.crc32(d) for d in data)")
    env = {**os.environ, "TRIOMQ_NO_VPCLMULQDQ": "1"}
    subprocess.run([sys.executable, "-c", check], env=env, check=True)
