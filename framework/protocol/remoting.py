"""RocketMQ remoting frames, sans-I/O.

A frame on the wire (all integers big-endian)::

    length:4 | serialize_type:1 | header_length:3 | header | body

``length`` counts every byte after itself. The header is JSON (serialize
type 0) with RocketMQ's keys: ``code``, ``language``, ``version``,
``opaque`` (the correlation id), ``flag`` (bit 0 response, bit 1 oneway),
``remark`` and ``extFields`` (a string-to-string map).

``encode`` turns a ``RemotingCommand`` into bytes; ``FrameDecoder`` is fed
bytes as they arrive and hands back whole commands. The decoder checks the
length fields as soon as they arrive, before it waits for (and buffers) the
rest of a frame, so a peer announcing a huge frame costs nothing; any bad
input raises ``FrameError`` naming what was wrong and the stream offset of
the frame.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterator, Mapping
from typing import Any, NoReturn

import attrs

from framework.errors import TriomqError
from framework.protocol.extensions import optional_extension

_speedups = optional_extension("_remoting_speedups")  # None: the pure-Python versions below

#: Whether the header fast paths run the optional C versions
#: (``framework/protocol/_remoting_speedups.c``); set ``TRIOMQ_NO_SPEEDUPS=1`` to disable.
SPEEDUPS = _speedups is not None

#: Response codes (RocketMQ's ``RemotingSysResponseCode``).
SUCCESS = 0
SYSTEM_ERROR = 1
SYSTEM_BUSY = 2
REQUEST_CODE_NOT_SUPPORTED = 3

#: ``flag`` bits.
FLAG_RESPONSE = 0x1
FLAG_ONEWAY = 0x2

#: The only header serialization supported: JSON.
SERIALIZE_JSON = 0

#: RocketMQ's default ``frameMaxLength``: 16 MiB, counted as the ``length`` field.
DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024

LANGUAGE = "PYTHON"

_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1
_HEADER_LENGTH_MASK = 0xFFFFFF
_LENGTH = struct.Struct(">i")
_HEADER_WORD = struct.Struct(">I")
_PREFIX = struct.Struct(">iI")
_PREFIX_SIZE = _PREFIX.size
# Compact the receive buffer once this many consumed bytes sit in front of it.
_COMPACT_AT = 64 * 1024
# The headers this module writes (keys in its order, no whitespace, no remark), read
# without the JSON parser: numbers as JSON writes them, at most 9 digits so they
# fit 32 bits; a plain language name; the extFields object, if any, to json.loads.
# Any other header, valid or not, goes through the parser.
_INT = rb"(-?(?:0|[1-9][0-9]{0,8}))"
_OWN_HEADER = re.compile(
    rb'\{"code":' + _INT + rb',"language":"([A-Za-z0-9_]{1,32})","version":' + _INT
    + rb',"opaque":' + _INT + rb',"flag":' + _INT + rb'(?:,"extFields":(\{.*\}))?\}',
    re.DOTALL)
_LANGUAGES = {b"PYTHON": "PYTHON", b"JAVA": "JAVA"}

OwnHeader = tuple[int, str, int, int, int, bytes | None]


def _parse_own_header(header: bytes | bytearray) -> OwnHeader | None:
    """``(code, language, version, opaque, flag, ext)`` of a header in the layout
    this module writes, ``ext`` being the extFields JSON text or None; None for
    any other header (the JSON parser reads those)."""
    own = _OWN_HEADER.fullmatch(header)
    if own is None:
        return None
    code, language, version, opaque, flag, ext = own.groups()
    return (int(code), _LANGUAGES.get(language) or language.decode("ascii"), int(version),
            int(opaque), int(flag), ext)


def _own_header_json(code: int, language: str, version: int, opaque: int, flag: int
                     ) -> bytes | None:
    """The header for these fields with no remark and no extFields, or None unless
    they are 32-bit ints and a plain ``language`` name (the general encoder writes
    those)."""
    if not (type(code) is int and type(version) is int and type(opaque) is int
            and type(flag) is int and type(language) is str
            and _INT32_MIN <= code <= _INT32_MAX and _INT32_MIN <= version <= _INT32_MAX
            and _INT32_MIN <= opaque <= _INT32_MAX and _INT32_MIN <= flag <= _INT32_MAX
            and _PLAIN_NAME.fullmatch(language)):
        return None
    return (f'{{"code":{code:d},"language":"{language}","version":{version:d},'
            f'"opaque":{opaque:d},"flag":{flag:d}}}').encode("ascii")


_PLAIN_NAME = re.compile(r"[A-Za-z0-9_]{1,32}", re.ASCII)
#: The C versions if built, else the two above; both give the same results.
parse_own_header = _speedups.parse_header if _speedups is not None else _parse_own_header
own_header_json = _speedups.header_json if _speedups is not None else _own_header_json


class FrameError(TriomqError, ValueError):
    """A remoting frame is malformed. ``offset`` is where its frame starts in the stream."""

    def __init__(self, message: str, offset: int) -> None:
        self.offset = offset
        super().__init__(f"bad remoting frame at stream offset {offset}: {message}")


def _check_ext_fields(_instance: Any, _attribute: Any, value: Mapping[str, str]) -> None:
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise TypeError(f"ext_fields must map str to str, got {key!r}: {item!r}")


@attrs.frozen
class RemotingCommand:
    """One request or response. ``ext_fields`` must not be mutated once built."""

    code: int
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: Mapping[str, str] = attrs.field(factory=dict, validator=_check_ext_fields)
    body: bytes = b""
    language: str = LANGUAGE
    version: int = 0

    @classmethod
    def request(cls, code: int, ext_fields: Mapping[str, str] | None = None,
                body: bytes = b"", *, opaque: int = 0, oneway: bool = False) -> RemotingCommand:
        """A request for ``code``; the RPC layer stamps ``opaque``."""
        return cls(code, opaque, FLAG_ONEWAY if oneway else 0, None,
                   ext_fields if ext_fields is not None else {}, body)

    @classmethod
    def response(cls, code: int = SUCCESS, *, remark: str | None = None,
                 ext_fields: Mapping[str, str] | None = None, body: bytes = b"",
                 opaque: int = 0) -> RemotingCommand:
        """A response with ``code``; the RPC layer stamps the request's ``opaque``."""
        return cls(code, opaque, FLAG_RESPONSE, remark,
                   ext_fields if ext_fields is not None else {}, body)

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)


def _json_string(text: str) -> str:
    return json.dumps(text)


_LANGUAGE_JSON = {LANGUAGE: _json_string(LANGUAGE), "JAVA": _json_string("JAVA")}


def _header_json(command: RemotingCommand, opaque: int, flag: int) -> bytes:
    if command.remark is None and not command.ext_fields:
        header = own_header_json(command.code, command.language, command.version, opaque, flag)
        if header is not None:
            return header
    # Formatted by hand: json.dumps of the whole header costs twice as much.
    language = _LANGUAGE_JSON.get(command.language) or _json_string(command.language)
    header = (f'{{"code":{command.code:d},"language":{language},'
              f'"version":{command.version:d},"opaque":{opaque:d},"flag":{flag:d}')
    if command.remark is not None:
        header += f',"remark":{_json_string(command.remark)}'
    if command.ext_fields:
        header += (',"extFields":'
                   + json.dumps(command.ext_fields, separators=(",", ":")))
    # ASCII (non-ASCII text is escaped), so even a lone surrogate a peer sent us encodes.
    return (header + "}").encode("ascii")


def encode_into(buffer: bytearray, command: RemotingCommand, *, opaque: int | None = None,
                flag: int | None = None) -> None:
    """Append the frame for ``command`` to ``buffer`` (lets a writer batch frames).

    ``opaque`` and ``flag``, if given, are written instead of the command's
    (an answer takes its request's opaque without a new command being built).
    Raises ``TypeError`` or ``ValueError`` for a command that cannot be
    encoded, before appending anything.
    """
    header = _header_json(command, command.opaque if opaque is None else opaque,
                          command.flag if flag is None else flag)
    body = command.body
    if not isinstance(body, bytes | bytearray | memoryview):
        raise TypeError(f"body must be bytes, got {type(body).__name__}")
    buffer += _PREFIX.pack(4 + len(header) + len(body), (SERIALIZE_JSON << 24) | len(header))
    buffer += header
    buffer += body


def encode(command: RemotingCommand) -> bytes:
    """The frame for ``command``."""
    buffer = bytearray()
    encode_into(buffer, command)
    return bytes(buffer)


def _string_map(text: bytes) -> dict[str, str] | None:
    """``text`` as a JSON object of strings, or None if it is not one."""
    try:
        value = json.loads(text.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    if type(value) is dict and all(type(item) is str for item in value.values()):
        return value
    return None


class FrameDecoder:
    """Incremental decoder: ``feed`` bytes, then take commands out.

    ``max_frame_size`` bounds the ``length`` field; a larger announced frame
    is rejected as soon as its first four bytes arrive. After a
    ``FrameError`` the decoder stays broken: the stream has lost framing.
    """

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if max_frame_size < 4:
            raise ValueError(f"max_frame_size must be at least 4, got {max_frame_size}")
        self.max_frame_size = max_frame_size
        self._buffer = bytearray()
        self._pos = 0  # start of the first unconsumed byte in _buffer
        self._offset = 0  # stream offset of _buffer[_pos]
        self._error: FrameError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as a command (a partial frame)."""
        return len(self._buffer) - self._pos

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Add bytes received from the stream."""
        if self._pos:
            if self._pos == len(self._buffer):
                self._buffer.clear()
                self._pos = 0
            elif self._pos >= _COMPACT_AT:
                del self._buffer[: self._pos]
                self._pos = 0
        self._buffer += data

    def feed_eof(self) -> None:
        """The stream ended; raise ``FrameError`` if it ended inside a frame."""
        if self._error is not None:
            raise self._error
        if self.buffered:
            self._fail(f"stream ended inside a frame ({self.buffered} bytes of it received)")

    def __iter__(self) -> Iterator[RemotingCommand]:
        """Every whole command buffered so far."""
        while (command := self.next_command()) is not None:
            yield command

    def next_command(self) -> RemotingCommand | None:
        """The next whole command, or ``None`` if more bytes are needed."""
        if self._error is not None:
            raise self._error
        buffer = self._buffer
        pos = self._pos
        available = len(buffer) - pos
        if available < 4:
            return None
        if available < _PREFIX_SIZE:
            self._check_length(_LENGTH.unpack_from(buffer, pos)[0])
            return None
        length, header_word = _PREFIX.unpack_from(buffer, pos)
        if not 4 <= length <= self.max_frame_size:
            self._check_length(length)
        header_length = header_word & _HEADER_LENGTH_MASK
        if header_word >> 24 != SERIALIZE_JSON:
            self._fail(f"unsupported serialize type {header_word >> 24} (only 0, JSON)")
        if header_length > length - 4:
            self._fail(f"header length {header_length} exceeds frame length {length}")
        end = pos + 4 + length
        if len(buffer) < end:
            return None
        header_start = pos + _PREFIX_SIZE
        body_start = header_start + header_length
        header = bytes(buffer[header_start:body_start])
        body = bytes(buffer[body_start:end])
        command = self._command(header, body)
        self._pos = end
        self._offset += 4 + length
        return command

    def _check_length(self, length: int) -> None:
        if length < 4:
            self._fail(f"length field {length} is less than 4")
        if length > self.max_frame_size:
            self._fail(f"length field {length} exceeds the maximum frame size "
                       f"{self.max_frame_size}")

    def _fail(self, message: str) -> NoReturn:
        self._error = FrameError(message, self._offset)
        raise self._error

    def _command(self, header: bytes, body: bytes) -> RemotingCommand:
        own = parse_own_header(header)
        if own is not None:
            code, language, version, opaque, flag, ext = own
            ext_fields = {} if ext is None else _string_map(ext)
            if ext_fields is not None:
                return RemotingCommand(code, opaque, flag, None, ext_fields, body, language,
                                       version)
        try:
            fields = json.loads(header.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            self._fail(f"invalid JSON header: {exc}")
        if type(fields) is not dict:
            self._fail(f"JSON header is a {type(fields).__name__}, not an object")
        get = fields.get
        code, opaque, flag, version = get("code"), get("opaque", 0), get("flag", 0), \
            get("version", 0)
        if not (type(code) is int and type(opaque) is int and type(flag) is int
                and type(version) is int and _INT32_MIN <= code <= _INT32_MAX
                and _INT32_MIN <= opaque <= _INT32_MAX and _INT32_MIN <= flag <= _INT32_MAX
                and _INT32_MIN <= version <= _INT32_MAX):
            for key, value in (("code", code), ("opaque", opaque), ("flag", flag),
                               ("version", version)):
                if type(value) is not int or not _INT32_MIN <= value <= _INT32_MAX:
                    self._fail(f"header key {key!r} is {value!r}, not a 32-bit integer")
        language = get("language", LANGUAGE)
        if type(language) is not str:
            self._fail(f"header key 'language' is {language!r}, not a string")
        remark = get("remark")
        if remark is not None and type(remark) is not str:
            self._fail(f"header key 'remark' is {remark!r}, not a string")
        ext_fields = get("extFields")
        if ext_fields is None:
            ext_fields = {}
        elif type(ext_fields) is not dict or not all(
                type(value) is str for value in ext_fields.values()):
            self._fail(f"header key 'extFields' is {ext_fields!r}, not a map of strings")
        return RemotingCommand(code, opaque, flag, remark, ext_fields, body, language, version)
