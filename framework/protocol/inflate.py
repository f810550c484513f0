"""Bounded zlib inflation: a compressed body never costs more than its limit.

Compressed bodies (a message body with the COMPRESSED sysFlag, a
REGISTER_BROKER body with ``compressed=true``) say nothing of their
inflated size, and zlib reaches about 1032:1, so 204 KB inflate to
200 MiB. ``inflate`` stops at ``max_size + 1`` bytes and raises
``InflateError`` naming what was inflated and the limit, so memory stays
within the limit whatever the peer sent; ``check_inflated_size`` does the
same keeping no more than a chunk of the output (the broker checks a send
without holding its inflated body), and costs nothing for a body too
small to inflate past the limit.
"""

from __future__ import annotations

import zlib

from triomq.errors import TriomqError
from triomq.protocol.message import COMPRESSED, COMPRESSION_TYPE_MASK, zlib_compressed

__all__ = ["DEFAULT_MAX_BODY_SIZE", "MAX_DEFLATE_RATIO", "InflateError", "check_inflated_size",
           "inflate", "producer_body"]

#: Largest body a compressed message is inflated to: RocketMQ's maxMessageSize
#: default, which its producers check before they compress.
DEFAULT_MAX_BODY_SIZE = 4 * 1024 * 1024

#: Deflate's largest inflated-to-compressed ratio (a run of one byte), with room for
#: the zlib header: a body of ``n`` bytes inflates to at most ``n * MAX_DEFLATE_RATIO``.
MAX_DEFLATE_RATIO = 1032
# Output taken at a time by check_inflated_size.
_CHUNK = 64 * 1024


class InflateError(TriomqError, ValueError):
    """A compressed body inflates to more than its limit, or does not inflate."""


def _over(what: str, max_size: int) -> InflateError:
    return InflateError(f"{what} inflates to more than its limit of {max_size} bytes; "
                        "it was not inflated further")


def inflate(data: bytes | bytearray | memoryview, max_size: int, what: str) -> bytes:
    """``data`` inflated (zlib), if that is at most ``max_size`` bytes.

    Raises ``InflateError`` naming ``what`` when it would be larger (having
    inflated no more than ``max_size + 1`` bytes) or is not zlib data.
    """
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(data, max_size + 1)
        if len(out) > max_size or inflater.unconsumed_tail:
            raise _over(what, max_size)
        out += inflater.flush()
    except zlib.error as exc:
        raise InflateError(f"{what} is not a deflate stream ({exc})") from None
    if len(out) > max_size:
        raise _over(what, max_size)
    if not inflater.eof:
        raise InflateError(f"{what} is not a deflate stream (it is truncated)")
    return out


def check_inflated_size(data: bytes | bytearray | memoryview, max_size: int,
                        what: str) -> None:
    """Raise ``InflateError`` if ``data`` (zlib) inflates to more than ``max_size`` bytes.

    Data that does not inflate passes: only the size is checked here. At most
    one chunk of output is held at a time.
    """
    if len(data) * MAX_DEFLATE_RATIO <= max_size:
        return
    inflater = zlib.decompressobj()
    size = 0
    pending: bytes | bytearray | memoryview = data
    try:
        while pending and not inflater.eof:
            size += len(inflater.decompress(pending, _CHUNK))
            if size > max_size:
                raise _over(what, max_size)
            pending = inflater.unconsumed_tail
    except zlib.error:
        return


def producer_body(body: bytes, sys_flag: int, max_size: int, what: str) -> bytes:
    """The body a message's producer set: ``body`` as stored, inflated when ``sys_flag``
    says the producer compressed it (RocketMQ's clients do past 4 KiB, with zlib).

    Raises ``InflateError`` naming ``what`` for LZ4 and ZSTD, RocketMQ 5's other
    compression types, and as ``inflate`` does.
    """
    if not sys_flag & COMPRESSED:
        return body
    if not zlib_compressed(sys_flag):
        raise InflateError(f"{what}: compression type "
                           f"{(sys_flag & COMPRESSION_TYPE_MASK) >> 8} is not zlib")
    return inflate(body, max_size, f"{what}: the compressed body")
