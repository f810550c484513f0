"""A deterministic, in-memory harness driving the pure HA state machines against each other."""

from __future__ import annotations

import random

from triomq.ha.core.epoch import EpochCache
from triomq.ha.core.master import MasterConnection, MasterLog, SendToSlave, SlaveAcked
from triomq.ha.core.slave import (
    RecordEpoch,
    SendToMaster,
    SlaveAction,
    SlaveConnection,
    SlaveLog,
    Truncate,
    WriteAt,
)

SEGMENT_SIZE = 256


class Replica:
    """A commit log in memory (bytes from ``base``) with its epoch cache."""

    def __init__(self, name: str, broker_id: int) -> None:
        self.name = name
        self.broker_id = broker_id
        self.base = 0
        self.data = bytearray()
        self.epochs = EpochCache()
        self.actions: list[SlaveAction] = []

    @property
    def max_offset(self) -> int:
        return self.base + len(self.data)

    def become_master(self, epoch: int) -> None:
        self.epochs = self.epochs.append(epoch, self.max_offset)

    def write(self, rng: random.Random, count: int) -> None:
        for _ in range(count):
            self.data += bytes([rng.randrange(256)]) * rng.randint(1, 40)

    def read(self, offset: int, size: int, rng: random.Random) -> bytes:
        # Like a segment read, it may stop short (at a segment end).
        end = min(offset + size, (offset // SEGMENT_SIZE + 1) * SEGMENT_SIZE)
        if rng.random() < 0.3:
            end = min(end, offset + rng.randint(1, max(1, size)))
        return bytes(self.data[offset - self.base : end - self.base])

    def master_log(self, confirm_offset: int = 0) -> MasterLog:
        return MasterLog(
            max_offset=self.max_offset,
            min_offset=self.base,
            epochs=self.epochs,
            confirm_offset=confirm_offset,
            last_segment_start=self.max_offset - self.max_offset % SEGMENT_SIZE,
        )

    def slave_log(self) -> SlaveLog:
        return SlaveLog(self.max_offset, self.base, self.epochs)

    def apply(self, action: SlaveAction) -> None:
        self.actions.append(action)
        if isinstance(action, Truncate):
            if action.offset <= self.base:
                self.base, self.data = action.offset, bytearray()
            else:
                del self.data[action.offset - self.base :]
            self.epochs = action.epochs
        elif isinstance(action, RecordEpoch):
            self.epochs = action.epochs
        elif isinstance(action, WriteAt):
            if not self.data:
                self.base = action.offset
            assert action.offset == self.max_offset, "the slave asked for a gap"
            self.data += action.data

    def content(self) -> tuple[int, bytes, EpochCache]:
        return self.base, bytes(self.data), self.epochs


class Link:
    """One master connection and one slave connection joined by two byte pipes."""

    def __init__(
        self,
        master: Replica,
        slave: Replica,
        rng: random.Random,
        now_ms: int,
        *,
        batch_size: int = 64,
        sync_from_last_file: bool = False,
    ) -> None:
        self.master, self.slave, self.rng = master, slave, rng
        self.conn_m = MasterConnection(now_ms=now_ms, transfer_batch_size=batch_size)
        self.conn_s = SlaveConnection(
            broker_id=slave.broker_id, now_ms=now_ms, is_sync_from_last_file=sync_from_last_file
        )
        self.to_master = bytearray(self.conn_s.start())
        self.to_slave = bytearray()
        self.acks: list[SlaveAcked] = []

    def _chunk(self, pipe: bytearray) -> bytes:
        size = self.rng.randint(1, len(pipe))
        chunk = bytes(pipe[:size])
        del pipe[:size]
        return chunk

    def step(self, now_ms: int) -> bool:
        """Move some bytes each way; True if anything happened."""
        moved = False
        if self.to_master:
            moved = True
            chunk = self._chunk(self.to_master)
            for out in self.conn_m.receive_data(chunk, self.master.master_log(), now_ms):
                if isinstance(out, SendToSlave):
                    self.to_slave += out.data
                elif isinstance(out, SlaveAcked):
                    self.acks.append(out)
        plan = self.conn_m.poll_transfer(self.master.master_log(), now_ms)
        if plan is not None:
            moved = moved or plan.max_size > 0
            body = self.master.read(plan.offset, plan.max_size, self.rng)
            self.to_slave += self.conn_m.build_transfer(plan, body, now_ms)
        if self.to_slave:
            moved = True
            chunk = self._chunk(self.to_slave)
            for action in self.conn_s.receive_data(chunk, self.slave.slave_log(), now_ms):
                if isinstance(action, SendToMaster):
                    self.to_master += action.data
                else:
                    self.slave.apply(action)
        return moved

    def run(self, now_ms: int, max_steps: int = 100_000) -> None:
        """Step until quiet (everything sent and acked)."""
        for _ in range(max_steps):
            if not self.step(now_ms):
                return
        raise AssertionError("the link did not settle")
