"""The store tools (``triomq store verify|dump|recover``) and a broker's recovery
judge records by one rule.

A corpus of damaged logs, generated with hypothesis: flipped CRC bytes, torn
or zeroed records, a topic or properties that are not UTF-8, a blank with a
bad magic code, a record crossing a segment's end, stray bytes ending a
segment. On each, ``verify``,
``dump``, ``recover --dry-run`` and an abnormal restart of the mmap store
end the good data at the same offset, and the C and Python record checks
agree.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from triomq.plugins.store_mmap.checkpoint import CHECKPOINT_FILE
from triomq.plugins.store_mmap.commitlog import MmapCommitLog
from triomq.protocol import commitlog_layout
from triomq.protocol.commitlog_layout import index_records_py, segment_name, segment_start
from triomq.protocol.message import MAGIC_V1, MIN_RECORD_SIZE, MessageRecord, encode
from triomq.store_cli import dump_command, recover_command, verify_command
from triomq.testing.store_suite import make_record

SEG = 4096
OPTIONS = {"segment_size": SEG, "cq_entries_per_file": 16}
BODY = 150
FIXED = 88  # the fixed part of a record with IPv4 hosts, up to the body


def build(root: str, count: int = 60) -> list[tuple[int, int]]:
    """A cleanly closed store of ``count`` records on two queues; their (offset, size)."""
    with MmapCommitLog(root, **OPTIONS) as log:
        results = log.append_batch([make_record(i, queue_id=i % 2, body_size=BODY)
                                    for i in range(count)])
    return [(r.physical_offset, r.size) for r in results]


def patch(root: str, offset: int, data: bytes) -> None:
    path = Path(root, "commitlog", segment_name(segment_start(offset, SEG)))
    with open(path, "r+b") as f:
        f.seek(offset % SEG)
        f.write(data)


def read(root: str, offset: int, n: int) -> bytes:
    path = Path(root, "commitlog", segment_name(segment_start(offset, SEG)))
    with open(path, "rb") as f:
        f.seek(offset % SEG)
        return f.read(n)


def run(command, root: str, **options) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = command(root, out, err, **options)
    return code, out.getvalue(), err.getvalue()


def blank_at(records: list[tuple[int, int]], index: int) -> int:
    """Where the blank after record ``index`` starts (it must end its segment)."""
    offset, size = records[index]
    assert segment_start(records[index + 1][0], SEG) != segment_start(offset, SEG)
    return offset + size


def damage(root: str, records: list[tuple[int, int]], kind: str, data: st.DataObject
           ) -> None:
    """Damage the store at ``root`` in the way ``kind`` names."""
    pick = data.draw(st.integers(0, len(records) - 1), label="record")
    offset, size = records[pick]
    if kind == "crc":
        at = offset + 8 + data.draw(st.integers(0, 3), label="crc byte")
        patch(root, at, bytes([read(root, at, 1)[0] ^ data.draw(st.integers(1, 255))]))
    elif kind == "torn":
        keep = data.draw(st.integers(0, size - 1), label="kept")
        patch(root, offset + keep, bytes(size - keep))
    elif kind == "topic_utf8":
        patch(root, offset + FIXED + BODY + 1, data.draw(st.sampled_from([b"\xff", b"\xc3"])))
    elif kind == "props_utf8":
        props_at = offset + FIXED + BODY + 2 + 2
        at = data.draw(st.integers(props_at, offset + size - 1), label="property byte")
        patch(root, at, data.draw(st.sampled_from([b"\xff", b"\x80", b"\xed\xa0"])))
    else:
        ends = [i for i in range(len(records) - 1)
                if segment_start(records[i + 1][0], SEG) != segment_start(records[i][0], SEG)]
        blank = blank_at(records, data.draw(st.sampled_from(ends), label="segment"))
        remaining = SEG - blank % SEG
        if kind == "stray":
            # A good record where the blank was, leaving 1 to 3 bytes of the segment.
            stray = data.draw(st.integers(1, 3), label="stray bytes")
            assume(remaining - stray >= MIN_RECORD_SIZE + 1)
            record = MessageRecord(topic="s", queue_id=9, physical_offset=blank,
                                   body=bytes(remaining - stray - MIN_RECORD_SIZE - 1))
            patch(root, blank, encode(record) + b"\x01" * stray)
        elif kind == "blank_magic":
            magic = data.draw(st.integers(0, 2**32 - 1).filter(
                lambda m: m not in (0xCBD43194, 0xDAA320A7, 0xDAA320AB)), label="magic")
            patch(root, blank + 4, struct.pack(">I", magic))
        else:  # a record header whose size runs past the segment's end
            extra = data.draw(st.integers(1, 500), label="past the end")
            patch(root, blank, struct.pack(">iI", remaining + extra, MAGIC_V1))


def cut_offset(text: str) -> int | None:
    found = re.search(r"(?:at offset|would cut at offset) (\d+)", text)
    return None if found is None else int(found.group(1))


def broker_recovery(root: str) -> tuple[int, int]:
    """(log end, records) after an abnormal restart of a copy of the store."""
    with tempfile.TemporaryDirectory() as d:
        copy = os.path.join(d, "copy")
        shutil.copytree(root, copy)
        os.remove(os.path.join(copy, CHECKPOINT_FILE))
        with MmapCommitLog(copy, **OPTIONS) as log:
            return log.max_offset, sum(1 for _ in log.iter_records())


def index_both_ways(root: str) -> None:
    """The C and the Python ``index_records`` give the same answer on every segment."""
    if commitlog_layout._speedups is None:
        return
    for name in sorted(os.listdir(os.path.join(root, "commitlog"))):
        data = Path(root, "commitlog", name).read_bytes()
        start = int(name)
        assert (commitlog_layout._speedups.index_records(data, start, SEG)
                == index_records_py(data, start, SEG))


KINDS = ["crc", "torn", "topic_utf8", "props_utf8", "blank_magic", "crossing", "stray"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(KINDS), st.data())
def test_the_tools_and_the_broker_agree_on_damaged_logs(kind: str, data: st.DataObject
                                                        ) -> None:
    with tempfile.TemporaryDirectory() as d:
        root = os.path.join(d, "store")
        records = build(root)
        data_end = records[-1][0] + records[-1][1]
        damage(root, records, kind, data)
        index_both_ways(root)

        verified, _, verify_err = run(verify_command, root)
        dumped, dump_out, dump_err = run(dump_command, root, as_json=True)
        _, dry_out, _ = run(recover_command, root, dry_run=True)
        broker_end, broker_records = broker_recovery(root)

        if verified == 0:
            assert dumped == 0
            found = re.search(r"nothing to cut: (\d+) good records, data ends at (\d+)", dry_out)
            assert found is not None
            assert broker_end == int(found.group(2)) <= data_end
        else:
            assert verified == 1 and dumped == 1
            cut = cut_offset(verify_err)
            assert cut == cut_offset(dump_err) == cut_offset(dry_out) == broker_end
        assert len(dump_out.splitlines()) == broker_records

        code, _, _ = run(recover_command, root, force=True)
        assert code == 0
        assert run(verify_command, root)[0] == 0
        assert broker_recovery(root) == (broker_end, broker_records)


def test_invalid_utf8_in_properties_is_one_bad_record_for_every_tool(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    records = build(root)
    offset, size = records[20]
    patch(root, offset + size - 3, b"\xff")  # in the last property's value
    after = records[21:]

    code, _, err = run(verify_command, root)
    assert code == 1
    assert f"bad record at offset {offset}: properties are not valid UTF-8" in err
    assert f"{len(after)} good records after it" in err
    code, out, err = run(dump_command, root)
    assert code == 1 and len(out.splitlines()) == 20 and f"offset {offset}" in err

    code, out, _ = run(recover_command, root, dry_run=True)
    assert code == 0
    assert f"would cut at offset {offset}: properties are not valid UTF-8" in out
    assert f"{len(after)} good records after it, which the cut drops: offsets " \
           f"{after[0][0]} to {after[-1][0]}" in out
    code, out, err = run(recover_command, root)
    assert code == 1 and "refusing to cut" in err and out == ""
    assert run(verify_command, root)[0] == 1  # nothing changed
    code, out, _ = run(recover_command, root, force=True)
    assert code == 0
    assert f"cut at offset {offset}" in out and f"dropped {len(after)} good records" in out
    code, out, _ = run(verify_command, root)
    assert code == 0 and "ok: 20 records" in out


def test_a_torn_tail_is_cut_without_force(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    records = build(root)
    offset, size = records[-1]
    patch(root, offset + 30, bytes(size - 30))
    code, out, _ = run(recover_command, root)
    assert code == 0 and f"cut at offset {offset}" in out
    assert run(verify_command, root)[0] == 0


def test_zero_fill_with_good_records_after_it_is_not_ok(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    records = build(root)
    offset, size = records[5]
    patch(root, offset, bytes(size))
    code, _, err = run(verify_command, root)
    assert code == 1
    assert f"zero fill at offset {offset}" in err
    assert f"{len(records) - 6} good records after it" in err
    assert broker_recovery(root)[0] == offset


def test_dump_in_text_filters_and_escapes(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    with MmapCommitLog(root, **OPTIONS) as log:
        log.append_batch([
            MessageRecord(topic="a", queue_id=1, body=b"hello\nworld\x00\xff" + b"x" * 100,
                          properties={"KEYS": "order-1 order-2", "UNIQ_KEY": "u1"}),
            MessageRecord(topic="b", queue_id=2, body="héllo".encode(),
                          properties={"KEYS": "order-3"}),
            MessageRecord(topic="a", queue_id=2, body=b"third"),
        ])
    code, out, _ = run(dump_command, root, width=24)
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 3
    assert lines[0].endswith("body[113]=hello\\nworld\\x00\\xffx...")
    assert lines[1].endswith("body[6]=héllo")
    assert [line.split()[2] for line in lines] == ["topic=a", "topic=b", "topic=a"]
    assert len(run(dump_command, root, topic="a")[1].splitlines()) == 2
    assert len(run(dump_command, root, queue=2)[1].splitlines()) == 2
    assert len(run(dump_command, root, topic="a", queue=2)[1].splitlines()) == 1
    assert "topic=a" in run(dump_command, root, key="order-2")[1]
    assert "topic=a" in run(dump_command, root, key="u1")[1]
    assert run(dump_command, root, key="order")[1] == ""


def test_recover_refuses_a_store_it_does_not_know(tmp_path: Path) -> None:
    code, _, err = run(verify_command, str(tmp_path))
    assert code == 2 and "mmap:" in err and "lmdb:" in err


@pytest.mark.parametrize("scheme", [None, "mmap"])
def test_dry_run_of_a_good_store_changes_nothing(tmp_path: Path, scheme: str | None) -> None:
    root = str(tmp_path / "store")
    build(root)
    before = {p: p.read_bytes() for p in Path(root).rglob("*") if p.is_file()}
    code, out, _ = run(recover_command, root, dry_run=True, scheme=scheme)
    assert code == 0 and "nothing to cut: 60 good records" in out
    assert before == {p: p.read_bytes() for p in Path(root).rglob("*") if p.is_file()}
