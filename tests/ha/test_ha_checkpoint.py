"""The epochFileCheckpoint file: format, .bak fallback, crash safety."""

from __future__ import annotations

import contextlib
import os
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from triomq.ha import checkpoint as ckpt
from triomq.ha.checkpoint import (
    CHECKPOINT_FILE,
    decode_checkpoint,
    encode_checkpoint,
    load_epoch_checkpoint,
    save_epoch_checkpoint,
)
from triomq.ha.core.epoch import EpochCache, EpochStart
from triomq.ha.core.errors import CheckpointError

OLD = EpochCache([EpochStart(1, 0), EpochStart(2, 4096)])
NEW = OLD.append(5, 8192)


def test_format_is_rocketmq_text():
    data = b"1-0\n2-4096\n"
    expected = b"2\n" + str(zlib.crc32(data) & 0x7FFFFFFF).encode() + b"\n" + data
    assert encode_checkpoint(OLD) == expected
    assert encode_checkpoint(EpochCache()) == b"0\n0\n"


def test_crc_zero_means_unchecked_and_the_unmasked_crc_is_accepted():
    assert decode_checkpoint(b"2\n0\n1-0\n2-4096\n") == OLD
    data = b"1-0\n2-4096\n"
    assert decode_checkpoint(b"2\n%d\n" % zlib.crc32(data) + data) == OLD


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"2\n", "missing"),
        (b"x\n0\n", "not a number"),
        (b"2\n12345\n1-0\n2-4096\n", "CRC mismatch"),
        (b"3\n0\n1-0\n2-4096\n", "count says 3"),
        (b"1\n0\n1:0\n", "not 'epoch-startOffset'"),
        (b"1\n0\nfoo-0\n", "not 'epoch-startOffset'"),
        (b"2\n0\n2-0\n1-5\n", "does not follow"),
    ],
)
def test_bad_content(content, message):
    with pytest.raises(CheckpointError, match=message):
        decode_checkpoint(content, "here")


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 10**12)), max_size=8))
def test_round_trip(pairs):
    epochs = sorted({e for e, _ in pairs})
    starts = sorted(s for _, s in pairs)[: len(epochs)]
    c = EpochCache(EpochStart(e, s) for e, s in zip(epochs, starts, strict=False))
    assert decode_checkpoint(encode_checkpoint(c)) == c


@given(st.binary(max_size=200))
def test_decode_fuzz(content):
    try:
        decode_checkpoint(content)
    except CheckpointError as exc:
        assert str(exc)


def test_missing_file_is_an_empty_cache(tmp_path):
    assert load_epoch_checkpoint(tmp_path) == EpochCache()


def test_save_keeps_the_previous_version_as_bak(tmp_path):
    save_epoch_checkpoint(tmp_path, OLD)
    save_epoch_checkpoint(tmp_path, NEW)
    assert load_epoch_checkpoint(tmp_path) == NEW
    assert decode_checkpoint((tmp_path / (CHECKPOINT_FILE + ".bak")).read_bytes()) == OLD
    assert sorted(p.name for p in tmp_path.iterdir()) == [CHECKPOINT_FILE, CHECKPOINT_FILE + ".bak"]


def test_empty_cache_is_saved_too(tmp_path):
    save_epoch_checkpoint(tmp_path, OLD)
    save_epoch_checkpoint(tmp_path, EpochCache())
    assert load_epoch_checkpoint(tmp_path) == EpochCache()


def test_corrupt_file_falls_back_to_bak(tmp_path):
    save_epoch_checkpoint(tmp_path, OLD)
    save_epoch_checkpoint(tmp_path, NEW)
    path = tmp_path / CHECKPOINT_FILE
    content = bytearray(path.read_bytes())
    content[-2] ^= 0x01  # flip a digit of the last entry
    path.write_bytes(bytes(content))
    assert load_epoch_checkpoint(tmp_path) == OLD


def test_both_corrupt_is_an_error_naming_both(tmp_path):
    (tmp_path / CHECKPOINT_FILE).write_bytes(b"garbage")
    (tmp_path / (CHECKPOINT_FILE + ".bak")).write_bytes(b"1\n99\n1-0\n")
    with pytest.raises(CheckpointError) as info:
        load_epoch_checkpoint(tmp_path)
    assert CHECKPOINT_FILE + ":" in str(info.value)
    assert ".bak" in str(info.value)


def test_saving_over_a_torn_file_keeps_the_good_bak(tmp_path):
    save_epoch_checkpoint(tmp_path, OLD)
    save_epoch_checkpoint(tmp_path, NEW)
    (tmp_path / CHECKPOINT_FILE).write_bytes(b"3\n")
    save_epoch_checkpoint(tmp_path, NEW.append(6, 9000))
    assert decode_checkpoint((tmp_path / (CHECKPOINT_FILE + ".bak")).read_bytes()) == OLD


class Crash(Exception):
    pass


@pytest.mark.parametrize("crash_at", range(6))
def test_a_crash_at_any_step_leaves_old_or_new_readable(tmp_path, monkeypatch, crash_at):
    save_epoch_checkpoint(tmp_path, OLD)
    steps = []

    def step(real):
        def wrapper(*args, **kwargs):
            if len(steps) == crash_at:
                raise Crash
            steps.append(real.__name__)
            return real(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(ckpt.os, "fsync", step(os.fsync))
    monkeypatch.setattr(ckpt.os, "replace", step(os.replace))
    with contextlib.suppress(Crash):
        save_epoch_checkpoint(tmp_path, NEW)
    monkeypatch.undo()
    assert load_epoch_checkpoint(tmp_path) in (OLD, NEW)
    if crash_at >= 4:  # fsync, replace, replace, fsync(dir): the save completed
        assert steps == ["fsync", "replace", "replace", "fsync"]
        assert load_epoch_checkpoint(tmp_path) == NEW


def test_a_torn_temporary_file_is_ignored(tmp_path):
    save_epoch_checkpoint(tmp_path, OLD)
    (tmp_path / (CHECKPOINT_FILE + ".tmp")).write_bytes(b"2\n")
    assert load_epoch_checkpoint(tmp_path) == OLD
    save_epoch_checkpoint(tmp_path, NEW)
    assert load_epoch_checkpoint(tmp_path) == NEW
