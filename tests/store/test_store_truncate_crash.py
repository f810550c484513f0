"""``truncate`` is crash-safe at every step (RocketMQ issue 10666).

A crash is injected at the k-th durable-storage call made during
``truncate`` (fsync, fdatasync, rename, unlink), for every k until the
truncation completes. Memory-mapped writes made before the crash stay
visible, as they do in the page cache after a SIGKILL. After each crash
the store is reopened: it must hold either the whole log (the truncation
had not started to count) or exactly the records before the cut, never a
record at or past the cut.
"""

from __future__ import annotations

import io
import os
import shutil
import types
from pathlib import Path

import pytest

from triomq import durable_files
from triomq.plugins.store_mmap import segments
from triomq.plugins.store_mmap.commitlog import MmapCommitLog
from triomq.plugins.store_mmap.entrylog import MmapEntryLog
from triomq.store import EntryRecord
from triomq.store_cli import verify_command
from triomq.testing.store_suite import make_record

OPTIONS = {"segment_size": 4096, "cq_entries_per_file": 8}


class Crash(Exception):
    """The simulated power cut."""


def crash_on_call(monkeypatch: pytest.MonkeyPatch, k: int) -> list[int]:
    """Make the k-th durable-storage call of the store code raise ``Crash``."""
    calls = [0]

    def hooked(fn):
        def call(*args, **kwargs):
            calls[0] += 1
            if calls[0] == k:
                raise Crash(f"crash at call {k} ({fn.__name__})")
            return fn(*args, **kwargs)
        return call

    proxy = types.SimpleNamespace(**{name: getattr(os, name) for name in dir(os)
                                     if not name.startswith("__")})
    for name in ("fsync", "fdatasync", "replace", "unlink"):
        setattr(proxy, name, hooked(getattr(os, name)))
    # The store's own calls, and the shared durable-file helpers it uses.
    monkeypatch.setattr(segments, "os", proxy)
    monkeypatch.setattr(durable_files, "os", proxy)
    return calls


def build_commitlog(path: Path, n: int = 120) -> list[int]:
    with MmapCommitLog(str(path), **OPTIONS) as log:
        results = log.append_batch([make_record(i, queue_id=i % 3, body_size=150)
                                    for i in range(n)])
    return [r.physical_offset for r in results]


@pytest.mark.parametrize("cut_index", [0, 37, 90, 119])
def test_commitlog_truncate_crash_at_every_step(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               cut_index: int) -> None:
    template = tmp_path / "template"
    offsets = build_commitlog(template)
    cut = offsets[cut_index]
    k = 1
    outcomes = set()
    while True:
        store = tmp_path / f"k{k}"
        shutil.copytree(template, store)
        log = MmapCommitLog(str(store), **OPTIONS)
        with monkeypatch.context() as m:
            crash_on_call(m, k)
            try:
                log.truncate(cut)
                finished = True
            except Crash:
                finished = False
        # The crashed instance is abandoned, as a killed process would be.
        with MmapCommitLog(str(store), **OPTIONS) as reopened:
            got = [r.physical_offset for r in reopened.iter_records()]
            counts = [reopened.queue_max_offset("t", q) for q in range(3)]
            assert reopened.max_offset == reopened.last_whole_record_end()
        if not finished:
            del log
        assert got in (offsets, offsets[:cut_index]), (k, len(got))
        if got == offsets[:cut_index]:
            assert counts == [len([i for i in range(cut_index) if i % 3 == q]) for q in range(3)]
            assert all(o < cut for o in got)
        outcomes.add(len(got))
        assert verify_command(str(store), io.StringIO(), io.StringIO()) == 0
        shutil.rmtree(store)
        if finished:
            break
        k += 1
    assert k > 3  # the truncation did go through several durable steps
    assert cut_index in outcomes


def test_commitlog_truncate_then_new_data_then_crash(tmp_path: Path) -> None:
    """The 10666 scenario: after truncate(x), new appends must not resurrect old records."""
    store = tmp_path / "s"
    offsets = build_commitlog(store)
    # A checkpoint after every flush: recovery would start past the cut unless
    # truncate moves it back.
    log = MmapCommitLog(str(store), **OPTIONS, checkpoint_interval=1)
    log.append(make_record(999, body_size=100))
    log.flush()
    log.truncate(offsets[50])
    new = log.append_batch([make_record(1000 + i, queue_id=0, body_size=10) for i in range(3)])
    # Crash without closing: the next open is an abnormal restart.
    with MmapCommitLog(str(store), **OPTIONS) as reopened:
        assert reopened.recovery["clean"] is False
        got = [r.physical_offset for r in reopened.iter_records()]
    assert got == [*offsets[:50], *(r.physical_offset for r in new)]
    del log


@pytest.mark.parametrize("keep", [0, 13, 70])
def test_entrylog_truncate_crash_at_every_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               keep: int) -> None:
    template = tmp_path / "template"
    with MmapEntryLog(str(template), segment_size=4096) as log:
        log.append([EntryRecord(i, 1 + i // 40, bytes(i % 300)) for i in range(1, 101)])
    k = 1
    while True:
        store = tmp_path / f"k{k}"
        shutil.copytree(template, store)
        log = MmapEntryLog(str(store), segment_size=4096)
        with monkeypatch.context() as m:
            crash_on_call(m, k)
            try:
                log.truncate_suffix(keep + 1)
                finished = True
            except Crash:
                finished = False
        with MmapEntryLog(str(store), segment_size=4096) as reopened:
            last = reopened.last_index
            if last:
                assert reopened.get(last).data == bytes(last % 300)
        assert last in (100, keep), (k, last)
        if finished:
            assert last == keep
            break
        k += 1


def test_recovery_itself_is_crash_safe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An abnormal restart that crashes at any step is redone by the next open."""
    template = tmp_path / "template"
    offsets = build_commitlog(template, 40)
    bad = next(i for i, o in enumerate(offsets) if o > 4096 + 500)
    seg = template / "commitlog" / sorted(os.listdir(template / "commitlog"))[1]
    with open(seg, "r+b") as f:  # a bad magic code in the second segment
        f.seek(offsets[bad] - 4096 + 4)
        f.write(b"\xff\xff")
    os.remove(template / "triomq_checkpoint.json")
    k = 1
    while True:
        store = tmp_path / f"k{k}"
        shutil.copytree(template, store)
        with monkeypatch.context() as m:
            crash_on_call(m, k)
            try:
                MmapCommitLog(str(store), **OPTIONS)
                finished = True
            except Crash:
                finished = False
        with MmapCommitLog(str(store), **OPTIONS) as log:
            got = [r.physical_offset for r in log.iter_records()]
            assert log.recovery["clean"] is False or finished
        assert got == offsets[:bad], k
        shutil.rmtree(store)
        if finished:
            break
        k += 1
    assert k > 2
