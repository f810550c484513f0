"""Fuzzing the on-disk decoders: garbage files give a cut log or a typed error, nothing else."""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from triomq.errors import TriomqError
from triomq.plugins.store_mmap import FileMetaStore, MmapCommitLog, MmapEntryLog
from triomq.plugins.store_mmap.checkpoint import CHECKPOINT_FILE, Checkpoint
from triomq.protocol.commitlog_layout import segment_name
from triomq.protocol.message import RecordError, properties_from_bytes
from triomq.store import EntryRecord
from triomq.store_cli import verify_command
from triomq.testing.store_suite import make_record

SEG = 4096
FUZZ = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.binary(max_size=300))
def test_properties_decoder(raw: bytes) -> None:
    try:
        props = properties_from_bytes(raw)
    except RecordError:
        return
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in props.items())


@FUZZ
@given(st.binary(max_size=200))
def test_checkpoint_decoder(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        Path(d, CHECKPOINT_FILE).write_bytes(raw)
        try:
            assert isinstance(Checkpoint.load(d), Checkpoint)
        except TriomqError as exc:
            assert CHECKPOINT_FILE in str(exc)


@FUZZ
@given(st.binary(max_size=200))
def test_meta_file_decoder(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        Path(d, "meta.json").write_bytes(raw)
        try:
            store = FileMetaStore(d)
        except TriomqError as exc:
            assert "meta.json" in str(exc)
        else:
            assert all(isinstance(v, bytes) for _, v in store.items())
            store.close()


@FUZZ
@given(st.integers(0, SEG - 1), st.binary(min_size=1, max_size=64))
def test_commitlog_segment_garbage(at: int, garbage: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        with MmapCommitLog(d, segment_size=SEG) as log:
            log.append_batch([make_record(i, body_size=100) for i in range(50)])
        seg = Path(d, "commitlog", segment_name(SEG))
        with open(seg, "r+b") as f:
            f.seek(at)
            f.write(garbage[:SEG - at])
        os.remove(Path(d, CHECKPOINT_FILE))
        verified = verify_command(d, io.StringIO(), io.StringIO())
        with MmapCommitLog(d, segment_size=SEG) as log:
            records = list(log.iter_records())  # every one decodes, CRC checked
            assert log.max_offset == log.last_whole_record_end()
        assert len(records) <= 50
        assert verified in (0, 1)
        assert verify_command(d, io.StringIO(), io.StringIO()) == 0


@FUZZ
@given(st.integers(0, SEG - 1), st.binary(min_size=1, max_size=64))
def test_entrylog_segment_garbage(at: int, garbage: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        with MmapEntryLog(d, segment_size=SEG) as log:
            log.append([EntryRecord(i, 1, bytes([i % 256]) * 100) for i in range(1, 80)])
        seg = Path(d, "entrylog", segment_name(SEG))
        with open(seg, "r+b") as f:
            f.seek(at)
            f.write(garbage[:SEG - at])
        try:
            log = MmapEntryLog(d, segment_size=SEG)
        except TriomqError:
            return
        with log:
            for e in log.entries(log.first_index, log.last_index + 1):
                assert e.data == bytes([e.index % 256]) * 100
