"""Real crash tests: a child process works on a store and is killed with SIGKILL.

The parent generates the child's operations, so it knows every state the
log may be in. The child prints ``done i`` after operation ``i`` and its
flush; the kill lands at whatever point the child has reached after the
parent read a random number of those lines. After each kill the parent
reopens the store (running recovery) and checks:

- every operation reported done is in the log (flushed records are present);
- the log is exactly the state after the last reported operation, plus a
  prefix of the batch in progress (or, for a truncation in progress, the
  state before or after it): a prefix of what was written, never bytes from
  past a truncation point;
- no torn record is readable: every record decodes with a good CRC, the
  consume queues index exactly the records, ``verify`` passes.

The next round continues on the recovered store, so recovery runs on the
output of earlier recoveries too. The replica test does the same for a
slave copying its master's bytes with ``append_raw`` in chunks that split
records anywhere: after each kill it holds a prefix of the master's bytes
ending at a whole record, at least up to what it had reported flushed.
"""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys
from pathlib import Path

from triomq.plugins.store_mmap.commitlog import MmapCommitLog
from triomq.plugins.store_mmap.entrylog import MmapEntryLog
from triomq.protocol.commitlog_layout import scan_log
from triomq.store_cli import verify_command

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from store_crash_child import COMMITLOG_OPTIONS, ENTRYLOG_OPTIONS, body, record  # noqa: E402

REPO = HERE.parents[1]
KILLS = 20


def run_and_kill(kind: str, directory: Path, ops: list, rng: random.Random, stderr: Path,
                 *extra: str) -> int:
    """Run the child on ``ops``, SIGKILL it at some point; return the last op reported done."""
    return int(run_and_kill_lines(kind, directory, ops, rng, stderr, *extra)[-1].split()[1])


def run_and_kill_lines(kind: str, directory: Path, ops: list, rng: random.Random,
                       stderr: Path, *extra: str) -> list[str]:
    """Run the child on ``ops``, SIGKILL it at some point; return its ``done`` lines."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with open(stderr, "w") as err:
        proc = subprocess.Popen([sys.executable, str(HERE / "store_crash_child.py"), kind,
                                 str(directory), *extra], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err, env=env, text=True)
    proc.stdin.write(json.dumps(ops))
    proc.stdin.close()
    ready = proc.stdout.readline()
    assert ready == "ready\n", stderr.read_text()
    lines = ["done -1 0"]
    for _ in range(rng.randint(0, 20)):
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
    proc.kill()
    lines += proc.stdout.read().splitlines()
    proc.wait()
    assert "Traceback" not in stderr.read_text(), stderr.read_text()
    return lines


def allowed_outcome(states: list, ops: list, last: int, got: list, partial: bool) -> bool:
    """Whether ``got`` is a state the log may be in after a kill following op ``last``."""
    done = states[last + 1]
    if last + 1 == len(ops):
        return got == done
    kind, _ = ops[last + 1]
    if kind == "append" and partial:
        return got[:len(done)] == done and got[len(done):] == states[last + 2][
            len(done):len(got)]
    return got in (done, states[last + 2])


def test_commitlog_survives_sigkill(tmp_path: Path) -> None:
    rng = random.Random(20261121)
    directory = tmp_path / "store"
    state: list[tuple[int, int]] = []  # (id, body size) of every record in order
    next_id = 1
    kills_during_truncate = 0
    for round_ in range(KILLS):
        ops: list = []
        for _ in range(40):
            if rng.random() < 0.2:
                ops.append(["truncate", rng.randint(1, 6)])
            else:
                batch = [[next_id + n, rng.choice([0, 10, 200, 1500, 3000, 9000])]
                         for n in range(rng.randint(1, 6))]
                next_id += len(batch)
                ops.append(["append", batch])
        states = [state]
        for kind, arg in ops:
            prev = states[-1]
            if kind == "append":
                states.append(prev + [tuple(x) for x in arg])
            else:
                states.append(prev[:max(0, len(prev) - arg)])
        last = run_and_kill("commitlog", directory, ops, rng, tmp_path / f"err{round_}")
        if last + 1 < len(ops) and ops[last + 1][0] == "truncate":
            kills_during_truncate += 1

        with MmapCommitLog(str(directory), **COMMITLOG_OPTIONS) as log:
            got = []
            by_queue: dict[int, list[int]] = {0: [], 1: [], 2: []}
            for rec in log.iter_records():  # decodes and checks every CRC
                ident = int(rec.properties["UNIQ_KEY"])
                assert rec.body == body(ident, len(rec.body))
                got.append((ident, len(rec.body)))
                by_queue[rec.queue_id].append(rec.physical_offset)
                assert rec.queue_offset == len(by_queue[rec.queue_id]) - 1
            for qid, offsets in by_queue.items():
                assert log.queue_max_offset("crash", qid) == len(offsets)
                entries = log.queue_entries("crash", qid, 0, len(offsets) + 5)
                assert [e.physical_offset for e in entries] == offsets
            assert log.max_offset == log.last_whole_record_end()
        assert allowed_outcome(states, ops, last, got, partial=True), (round_, last)
        assert verify_command(str(directory), io.StringIO(), io.StringIO()) == 0
        state = got
    assert len(state) > 0


def test_entrylog_survives_sigkill(tmp_path: Path) -> None:
    rng = random.Random(7)
    directory = tmp_path / "raft"
    state: list[tuple[int, int]] = []  # (term, size) of entries 1..n
    term = 1
    for round_ in range(KILLS // 2):
        ops: list = []
        for _ in range(40):
            if rng.random() < 0.2:
                ops.append(["truncate", rng.randint(1, 5)])
                term += 1
            else:
                ops.append(["append", [[term, rng.choice([0, 30, 700, 2500])]
                                       for _ in range(rng.randint(1, 5))]])
        states = [state]
        for kind, arg in ops:
            prev = states[-1]
            if kind == "append":
                states.append(prev + [tuple(x) for x in arg])
            else:
                states.append(prev[:max(0, len(prev) - arg)])
        last = run_and_kill("entrylog", directory, ops, rng, tmp_path / f"err{round_}")
        with MmapEntryLog(str(directory), **ENTRYLOG_OPTIONS) as log:
            assert log.first_index == 1
            got = []
            for e in log.entries(1, log.last_index + 1):
                assert e.data == body(e.term, len(e.data))
                got.append((e.term, len(e.data)))
        assert allowed_outcome(states, ops, last, got, partial=True), (round_, last)
        state = got


def test_replica_append_raw_survives_sigkill(tmp_path: Path) -> None:
    """A slave copying its master's bytes in chunks that split records anywhere."""
    rng = random.Random(99)
    master = tmp_path / "master"
    with MmapCommitLog(str(master), **COMMITLOG_OPTIONS) as log:
        for i in range(60):
            log.append_batch([record(1000 * i + j, rng.choice([0, 100, 1500, 5000]))
                              for j in range(5)])
        data = log.read(0, log.max_offset)
        # Every offset a whole-record prefix may end at: record ends and segment starts.
        spans = scan_log(data, 0, log.segment_size).spans
        ends = sorted({s.offset for s in spans} | {s.offset + s.size for s in spans})
    replica = tmp_path / "replica"
    for round_ in range(KILLS // 2):
        chunks = [rng.randint(1, 9000) for _ in range(40)]
        lines = run_and_kill_lines("replica", replica, chunks, rng, tmp_path / f"err{round_}",
                                   str(master))
        flushed = int(lines[-1].split()[2])
        with MmapCommitLog(str(replica), **COMMITLOG_OPTIONS) as log:
            end = log.max_offset
            assert end == log.last_whole_record_end()
            assert end in ends or end == 0
            # Every whole record below the flushed offset survived.
            assert end >= max(e for e in [0, *ends] if e <= flushed)
            assert log.read(0, end) == data[:end]
            count = sum(1 for _ in log.iter_records())
            assert sum(log.queue_max_offset("crash", q) for q in range(3)) == count
        assert verify_command(str(replica), io.StringIO(), io.StringIO()) == 0
