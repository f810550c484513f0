"""Warming a commit log's pages ahead of its writes (``triomq.plugins.store_mmap.prefault``).

Warming must never change a byte, must let go of a segment before it is
unmapped (close, truncation, retention), and must leave the log exactly as
a log written without it. ``append_raw`` writes before it checks: bytes it
refuses are zeroed again.
"""

from __future__ import annotations

import ctypes
import mmap
import os
from pathlib import Path

import pytest

from triomq.plugins.store_mmap import prefault
from triomq.plugins.store_mmap.commitlog import MmapCommitLog
from triomq.plugins.store_mmap.prefault import WarmReport
from triomq.plugins.store_mmap.segments import SegmentQueue
from triomq.store import StoreCorruption
from triomq.testing.store_suite import make_record

pytestmark = pytest.mark.skipif(not prefault.SUPPORTED,
                                reason="no MADV_POPULATE_READ on this system")

SEGMENT = 8 << 20


def mapped_pages(mm: mmap.mmap, lo: int, hi: int) -> int:
    """How many pages of ``mm[lo:hi]`` this process has mapped (``/proc/self/pagemap``).

    Unlike page-cache residency (which readahead changes too), only a fault
    or a populate maps a page of a mapping written to.
    """
    region = (ctypes.c_char * (hi - lo)).from_buffer(mm, lo)
    try:
        first = ctypes.addressof(region) // mmap.PAGESIZE
    finally:
        del region
    pages = (hi - lo) // mmap.PAGESIZE
    with open("/proc/self/pagemap", "rb") as f:
        f.seek(first * 8)
        entries = f.read(pages * 8)
    return sum(entries[i * 8 + 7] >> 7 for i in range(pages))


def test_pages_ahead_of_the_writes_are_warmed_and_stay_zero(tmp_path: Path) -> None:
    queue = SegmentQueue(str(tmp_path), SEGMENT, warm=True)
    data = os.urandom(100_000 + prefault.FOLIO + 4096)
    queue.write(0, data[:100_000])
    seg = queue.segments[0]
    assert queue._warmer is not None
    queue._warmer.finish()
    # Written pages are mapped by the writer's own faults; the rest only by
    # warming (a write fault maps no page around it). Reclaim may take a few.
    # The first ask warms two folios ahead, the next (a folio on) a window.
    probe = 2 * prefault.FOLIO
    assert mapped_pages(seg.mm, 1 << 20, probe) > (probe - (1 << 20)) // mmap.PAGESIZE * 0.9
    assert mapped_pages(seg.mm, probe + (1 << 20), SEGMENT) == 0
    queue.write(100_000, data[100_000:])
    queue._warmer.finish()
    ahead = (SEGMENT - probe) // mmap.PAGESIZE
    assert mapped_pages(seg.mm, probe, SEGMENT) > ahead * 0.9
    assert queue.read(0, len(data)) == data
    assert queue.read(len(data), SEGMENT - len(data)) == bytes(SEGMENT - len(data))
    queue.close()
    with open(seg.path, "rb") as f:
        on_disk = f.read()
    assert len(on_disk) == SEGMENT
    assert on_disk[:len(data)] == data and not any(on_disk[len(data):])


def test_pages_are_warmed_writable_only_while_the_writer_runs_ahead_of_syncs(
        tmp_path: Path) -> None:
    queue = SegmentQueue(str(tmp_path), SEGMENT, warm=True)
    warmer = queue._warmer
    assert warmer is not None
    queue.write(0, b"x" * 4096)
    warmer.finish()
    queue.write(4096, b"x" * (prefault.FOLIO + 4096))  # a folio past the first ask
    warmer.finish()
    # No sync yet: from the first write's end to the segment's end, writable.
    assert warmer.report == WarmReport(writable_bytes=SEGMENT - 4096)
    queue.sync_range(0, 4096)
    queue.write(SEGMENT - 4096, b"y" * 8192)  # on into the next segment
    warmer.finish()
    # Synced since the last ask: the next segment is warmed readable.
    assert warmer.report == WarmReport(writable_bytes=SEGMENT - 4096,
                                       readable_bytes=SEGMENT - 4096)
    queue.close()


def test_a_cold_queue_warms_nothing(tmp_path: Path) -> None:
    queue = SegmentQueue(str(tmp_path), SEGMENT)
    queue.write(0, b"x" * 5000)
    assert queue._warmer is None
    assert mapped_pages(queue.segments[0].mm, 1 << 20, SEGMENT) < 64
    queue.close()


def test_unmapping_waits_for_the_warmer(tmp_path: Path) -> None:
    # Every call below unmaps segments right after a write started warming:
    # an unmapped view would raise (BufferError) or crash the process.
    records = [make_record(i, body_size=6000) for i in range(200)]
    for round_ in range(12):
        log = MmapCommitLog(str(tmp_path / f"log{round_}"), segment_size=1 << 20)
        results = log.append_batch(records)
        assert log.max_offset > 1 << 20  # a second segment, being warmed
        if round_ % 3 == 0:
            log.truncate(results[1].physical_offset)
        elif round_ % 3 == 1:
            log.retain(now_ms=2**62, max_bytes=1)
        log.close()


def test_a_warmed_log_reads_back_like_any_other(tmp_path: Path) -> None:
    records = [make_record(i, queue_id=i % 4, body_size=700) for i in range(14_000)]
    with MmapCommitLog(str(tmp_path / "a"), segment_size=SEGMENT) as log:
        log.append_batch(records)
        end = log.max_offset
    with MmapCommitLog(str(tmp_path / "a"), segment_size=SEGMENT, full_recovery=True) as log:
        assert log.max_offset == end
        assert [r.body for r in log.iter_records()] == [r.body for r in records]
        assert log.queue_max_offset("t", 3) == 3500


def test_refused_replicated_bytes_are_zeroed_again(tmp_path: Path) -> None:
    with MmapCommitLog(str(tmp_path / "master"), segment_size=SEGMENT) as master:
        master.append_batch([make_record(i, body_size=200) for i in range(50)])
        data = master.read(0, master.max_offset)
        cut = [r.physical_offset for r in master.iter_records()][5]  # whole records before it
    bad = bytearray(data[cut:])
    bad[len(bad) // 2] ^= 0xFF  # a body byte: the CRC check fails
    root = tmp_path / "slave"
    with MmapCommitLog(str(root), segment_size=SEGMENT) as slave:
        slave.append_raw(0, data[:cut])
        with pytest.raises(StoreCorruption):
            slave.append_raw(cut, bytes(bad))
        assert slave.max_offset == cut
        segment = slave._log.segments[0].path
    with open(segment, "rb") as f:
        on_disk = f.read()
    assert on_disk[:cut] == data[:cut] and not any(on_disk[cut:])


def vma_flags(mm: mmap.mmap, offset: int) -> set[str]:
    """The ``VmFlags`` of the mapping holding ``mm[offset]`` (``/proc/self/smaps``)."""
    region = ctypes.c_char.from_buffer(mm, offset)
    try:
        address = ctypes.addressof(region)
    finally:
        del region
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and ":" not in head:
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "VmFlags:":
                return set(line.split()[1:])
    raise AssertionError("mapping not found")


def written_to_storage() -> int:
    """Bytes this process had written to storage (``/proc/self/io``)."""
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("write_bytes"))


large_folios = pytest.mark.skipif(not prefault.LARGE_FOLIOS,
                                  reason="no transparent huge pages on this system")


#: Segments large enough for the kernel to build large folios in.
LARGE_SEGMENT = 64 << 20


def write_past_first_segment(queue: SegmentQueue) -> bytes:
    """Write into the first segment, then on into the second (the writer asks
    for warm pages twice, no sync between); return what was written."""
    data = os.urandom(LARGE_SEGMENT + 4096)
    queue.write(0, data[:4096])
    queue.write(4096, data[4096:])
    assert queue._warmer is not None
    queue._warmer.finish()
    return data


@large_folios
def test_a_writer_far_ahead_of_its_syncs_gets_large_folios(tmp_path: Path) -> None:
    queue = SegmentQueue(str(tmp_path), LARGE_SEGMENT, warm=True, read_ahead_new=False)
    write_past_first_segment(queue)
    first, second = queue.segments
    # Not at its first ask (a writer syncing per put has not synced yet then).
    assert "hg" not in vma_flags(first.mm, 4 << 20)
    assert "hg" in vma_flags(second.mm, 4 << 20)
    queue.close()


@large_folios
def test_a_writer_syncing_more_often_than_it_fills_a_folio_gets_small_pages_back(
        tmp_path: Path) -> None:
    queue = SegmentQueue(str(tmp_path), LARGE_SEGMENT, warm=True, read_ahead_new=False)
    written = bytearray(write_past_first_segment(queue))
    # On into the second segment's sixth folio, warmed large (the kernel
    # builds the first few small).
    bulk = os.urandom(5 * prefault.FOLIO + 100_000)
    queue.write(len(written), bulk)
    written.extend(bulk)
    put = b"p" * 1000

    def put_and_sync() -> None:
        queue.write(len(written), put)
        written.extend(put)
        queue.sync_range(0, len(written))
        queue._warmer.finish()

    for _ in range(3):  # the first sync cannot tell; the second finds 1000 bytes written
        put_and_sync()
    seg = queue.segments[1]
    assert "nh" in vma_flags(seg.mm, 16 << 20)
    # The large folios warmed past the writer's were punched out of the file.
    assert mapped_pages(seg.mm, 6 * prefault.FOLIO, 32 << 20) < 16
    assert os.stat(seg.path).st_blocks * 512 <= 6 * prefault.FOLIO + (1 << 20)
    before = written_to_storage()
    for _ in range(10):
        put_and_sync()
    # Each sync writes the (at most two) pages a put dirtied, not the folio
    # around them.
    assert written_to_storage() - before <= 10 * 2 * mmap.PAGESIZE
    assert queue.read(0, len(written)) == bytes(written)
    rest = 2 * LARGE_SEGMENT - len(written)
    assert queue.read(len(written), rest) == bytes(rest)
    queue.close()


def test_lent_space_is_the_mapping_up_to_the_segment_end_and_warms_ahead(
        tmp_path: Path) -> None:
    with MmapCommitLog(str(tmp_path / "m"), segment_size=SEGMENT) as master:
        master.append_batch([make_record(i, body_size=900) for i in range(3000)])
        data = master.read(0, 3 << 20)
    with MmapCommitLog(str(tmp_path / "s"), segment_size=SEGMENT) as slave:
        with slave.append_buffer(0, 2 * SEGMENT) as space:
            seg = slave._log.segments[0]
            assert space.obj is seg.mm and len(space) == SEGMENT  # no copy, one segment
            space[:len(data)] = data
        assert slave.append_written(0, len(data)) == len(data)
        slave._log._warmer.finish()
        # Warmed ahead as after a write (a first ask: two folios).
        lo, hi = 4 << 20, (3 << 20) + 2 * prefault.FOLIO
        assert mapped_pages(seg.mm, lo, hi) > (hi - lo) // mmap.PAGESIZE * 0.9
        assert slave.read(0, len(data)) == data
