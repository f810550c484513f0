"""FlushService: group commit, interval and none policies, driven from trio."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from triomq.plugins.store_lmdb import LmdbCommitLog
from triomq.plugins.store_mmap import MmapCommitLog
from triomq.store import FlushService
from triomq.testing.store_suite import make_record


async def write_and_wait(log, service: FlushService, i: int, done: list[int]) -> None:
    res = log.append(make_record(i))
    await service.wait_flushed(res.physical_offset + res.size)
    assert log.flushed_offset >= res.physical_offset + res.size
    done.append(i)


@pytest.mark.parametrize("factory", [
    lambda p: MmapCommitLog(p, segment_size=1 << 16),
    lambda p: LmdbCommitLog(p, sync=False),
])
async def test_group_commit_one_fsync_covers_many_writers(tmp_path: Path, factory) -> None:
    log = factory(str(tmp_path))
    service = FlushService.for_log(log, "group")
    done: list[int] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        async with trio.open_nursery() as writers:
            for i in range(50):
                writers.start_soon(write_and_wait, log, service, i, done)
        nursery.cancel_scope.cancel()
    assert sorted(done) == list(range(50))
    assert 1 <= service.flush_count <= 2
    assert log.flushed_offset == log.max_offset
    # A second wave needs a new flush.
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        await write_and_wait(log, service, 99, done)
        nursery.cancel_scope.cancel()
    assert service.flush_count >= 2
    log.close()


async def test_interval_policy_waits_for_the_tick(tmp_path: Path, autojump_clock) -> None:
    log = MmapCommitLog(str(tmp_path), segment_size=1 << 16)
    service = FlushService.for_log(log, "interval", interval=0.5)
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        start = trio.current_time()
        await write_and_wait(log, service, 1, [])
        assert trio.current_time() - start >= 0.5
        await trio.sleep(3)  # nothing new: no more flushes
        nursery.cancel_scope.cancel()
    assert service.flush_count == 1
    log.close()


async def test_none_policy_never_flushes(tmp_path: Path) -> None:
    log = MmapCommitLog(str(tmp_path), segment_size=1 << 16)
    service = FlushService.for_log(log, "none")
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        res = log.append(make_record(1))
        await service.wait_flushed(res.physical_offset + res.size)
        nursery.cancel_scope.cancel()
    assert service.flush_count == 0
    assert log.flushed_offset == 0
    log.close()


def test_unknown_policy() -> None:
    with pytest.raises(ValueError, match="unknown flush policy"):
        FlushService(lambda: 0, lambda: 0, "sometimes")
