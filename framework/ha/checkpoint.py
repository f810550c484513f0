"""The epoch checkpoint file, ``epochFileCheckpoint``, RocketMQ's text format.

::

    2                 entry count
    1523981254        CRC-32 of the entry lines (0 = do not check)
    1-0               epoch-startOffset, one per line
    3-1048576

RocketMQ writes the CRC masked with 0x7FFFFFFF; reading compares masked
values so both spellings are accepted. A save writes a temporary file,
fsyncs it, moves the current (valid) version to ``epochFileCheckpoint.bak``, and
renames the temporary file into place, then fsyncs the directory: a crash at
any point leaves the old or the new version readable, and a load falls back
to ``.bak`` when the current file is missing, torn or fails its CRC.
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path

from triomq.durable_files import fsync_directory
from triomq.ha.core.epoch import EpochCache, EpochStart
from triomq.ha.core.errors import CheckpointError, EpochError

__all__ = [
    "BACKUP_SUFFIX",
    "CHECKPOINT_FILE",
    "EpochCheckpointFile",
    "decode_checkpoint",
    "encode_checkpoint",
    "load_epoch_checkpoint",
    "save_epoch_checkpoint",
]

CHECKPOINT_FILE = "epochFileCheckpoint"
BACKUP_SUFFIX = ".bak"
_TEMP_SUFFIX = ".tmp"
_CRC_MASK = 0x7FFFFFFF


def encode_checkpoint(cache: EpochCache) -> bytes:
    """The file content for ``cache``."""
    data = "".join(f"{s.epoch}-{s.start_offset}\n" for s in cache).encode("ascii")
    crc = zlib.crc32(data) & _CRC_MASK if data else 0
    return f"{len(cache)}\n{crc}\n".encode("ascii") + data


def decode_checkpoint(content: bytes, where: str = CHECKPOINT_FILE) -> EpochCache:
    """Parse a checkpoint; ``CheckpointError`` names ``where`` and the fault."""
    parts = content.split(b"\n", 2)
    if len(parts) < 3:
        raise CheckpointError(f"{where}: missing the count or CRC line")
    count_line, crc_line, data = parts
    try:
        count, crc = int(count_line), int(crc_line)
    except ValueError:
        raise CheckpointError(f"{where}: count or CRC line is not a number") from None
    if crc != 0 and (zlib.crc32(data) & _CRC_MASK) != (crc & _CRC_MASK):
        raise CheckpointError(f"{where}: CRC mismatch")
    lines = data.decode("ascii", errors="replace").splitlines()
    if len(lines) != count:
        raise CheckpointError(f"{where}: {len(lines)} entry lines, count says {count}")
    starts = []
    for number, line in enumerate(lines, start=3):
        epoch, sep, start = line.partition("-")
        try:
            if not sep:
                raise ValueError(line)
            starts.append(EpochStart(int(epoch), int(start)))
        except ValueError:
            raise CheckpointError(f"{where}:{number}: not 'epoch-startOffset': {line!r}") from None
    try:
        return EpochCache(starts)
    except EpochError as exc:
        raise CheckpointError(f"{where}: {exc}") from None


def load_epoch_checkpoint(root: str | os.PathLike[str]) -> EpochCache:
    """Load the epoch cache stored under ``root``; empty when none was ever saved.

    Falls back to the ``.bak`` version when the current file is missing or
    invalid; raises ``CheckpointError`` when a file exists but no version is valid.
    """
    path = Path(root) / CHECKPOINT_FILE
    candidates = [path, path.with_name(path.name + BACKUP_SUFFIX)]
    errors = []
    for candidate in candidates:
        try:
            content = candidate.read_bytes()
        except FileNotFoundError:
            continue
        try:
            return decode_checkpoint(content, str(candidate))
        except CheckpointError as exc:
            errors.append(str(exc))
    if errors:
        raise CheckpointError("; ".join(errors))
    return EpochCache()


def save_epoch_checkpoint(root: str | os.PathLike[str], cache: EpochCache) -> None:
    """Durably replace the checkpoint under ``root``, keeping the previous as ``.bak``.

    Blocking (fsync): trio code calls it through ``trio.to_thread.run_sync``.
    """
    directory = Path(root)
    path = directory / CHECKPOINT_FILE
    temp = path.with_name(path.name + _TEMP_SUFFIX)
    with open(temp, "wb") as file:
        file.write(encode_checkpoint(cache))
        file.flush()
        os.fsync(file.fileno())
    if _is_valid(path):
        # A torn current file must not overwrite the good backup.
        os.replace(path, path.with_name(path.name + BACKUP_SUFFIX))
    os.replace(temp, path)
    fsync_directory(directory)


class EpochCheckpointFile:
    """The epoch cache persisted under a store root (blocking; call from a thread)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def load(self) -> EpochCache:
        """The saved cache (see ``load_epoch_checkpoint``)."""
        return load_epoch_checkpoint(self.root)

    def save(self, cache: EpochCache) -> None:
        """Durably replace the saved cache (see ``save_epoch_checkpoint``)."""
        save_epoch_checkpoint(self.root, cache)


def _is_valid(path: Path) -> bool:
    try:
        decode_checkpoint(path.read_bytes(), str(path))
    except (FileNotFoundError, CheckpointError):
        return False
    return True
