"""RocketMQ remoting frames, sans-I/O.

A frame on the wire (all integers big-endian)::

    length:4 | serialize_type:1 | header_length:3 | header | body

``length`` counts every byte after itself. The header is JSON (serialize
type 0) with RocketMQ's keys: ``code``, ``language``, ``version``,
``opaque`` (the correlation id), ``flag`` (bit 0 response, bit 1 oneway),
``remark`` and ``extFields`` (a string-to-string map), or RocketMQ's binary
form (serialize type 1, ``RocketMQSerializable``)::

    code:2 | language:1 | version:2 | opaque:4 | flag:4 |
    remark_length:4 | remark | ext_length:4 | (key_length:2 | key | value_length:4 | value)*

A command remembers the type it came in (``serialize_type``) and an answer
goes out in its request's type. As RocketMQ's server does, ``extFields``
values that arrive as JSON numbers or booleans are read as their text
(``5`` as ``"5"``, ``true`` as ``"true"``; a ``null`` value is left out).

``encode`` turns a ``RemotingCommand`` into bytes; ``FrameDecoder`` is fed
bytes as they arrive and hands back whole commands. The decoder checks the
length fields as soon as they arrive, before it waits for (and buffers) the
rest of a frame, so a peer announcing a huge frame costs nothing; any bad
input raises ``FrameError`` naming what was wrong and the stream offset of
the frame.

The work one frame can cost is bounded while it is decoded, before any
handler sees it: a header over ``max_header_size`` bytes is refused from
its length field alone (``FrameError``: its opaque is not read, so it
cannot be answered), and a header with more than ``max_ext_fields``
extFields raises ``OverLimit`` once the frame is read, with what an answer
needs (the frame was well formed: the stream goes on).
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NoReturn

import attrs

from triomq.errors import TriomqError
from triomq.protocol.extensions import optional_extension

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

#: Header serializations: JSON, and RocketMQ's binary ``RocketMQSerializable``.
SERIALIZE_JSON = 0
SERIALIZE_ROCKETMQ = 1

#: RocketMQ's default ``frameMaxLength``: 16 MiB, counted as the ``length`` field.
DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024
#: Largest header accepted by default. RocketMQ bounds a header only by its frame;
#: this is room for a send whose properties are at their limit (32,767 bytes, each
#: byte escaped as JSON may escape it, 6 bytes) with everything else besides.
DEFAULT_MAX_HEADER_SIZE = 256 * 1024
#: Most extFields accepted in one header by default; RocketMQ's own requests carry
#: fewer than 30.
DEFAULT_MAX_EXT_FIELDS = 1024

LANGUAGE = "PYTHON"
#: The RocketMQ release whose protocol triomq speaks, by name and as the ordinal of
#: RocketMQ's ``MQVersion.Version`` (what its brokers report as ``brokerVersion`` and
#: its clients declare in their requests' ``version``).
ROCKETMQ_VERSION_DESC = "V5_3_3"
ROCKETMQ_VERSION = 479

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


class OverLimit(TriomqError, ValueError):
    """A well-formed frame breaks a decoding limit (``max_ext_fields``).

    It carries what an answer needs (the frame's ``code``, ``opaque``,
    ``flag`` and ``serialize_type``); the decoder has stepped over the frame
    and goes on with the next one.
    """

    def __init__(self, reason: str, offset: int, *, code: int, opaque: int, flag: int,
                 serialize_type: int) -> None:
        self.reason = reason
        self.offset = offset
        self.code = code
        self.opaque = opaque
        self.flag = flag
        self.serialize_type = serialize_type
        super().__init__(f"remoting frame at stream offset {offset} (code {code}): {reason}")


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
    serialize_type: int = SERIALIZE_JSON

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
                flag: int | None = None, serialize_type: int | None = None) -> None:
    """Append the frame for ``command`` to ``buffer`` (lets a writer batch frames).

    ``opaque``, ``flag`` and ``serialize_type``, if given, are written
    instead of the command's (an answer takes its request's opaque and
    header type without a new command being built). Raises ``TypeError`` or
    ``ValueError`` for a command that cannot be encoded, before appending
    anything.
    """
    opaque = command.opaque if opaque is None else opaque
    flag = command.flag if flag is None else flag
    kind = command.serialize_type if serialize_type is None else serialize_type
    if kind == SERIALIZE_JSON:
        header = _header_json(command, opaque, flag)
    elif kind == SERIALIZE_ROCKETMQ:
        header = _header_binary(command, opaque, flag)
    else:
        raise ValueError(f"unknown serialize type {kind}")
    body = command.body
    if not isinstance(body, bytes | bytearray | memoryview):
        raise TypeError(f"body must be bytes, got {type(body).__name__}")
    buffer += _PREFIX.pack(4 + len(header) + len(body), (kind << 24) | len(header))
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


def _field_text(value: Any) -> str | None:
    """An ``extFields`` value as RocketMQ's server reads it into a string map."""
    if type(value) is str:
        return value
    if value is None:
        return None
    if type(value) is bool:
        return "true" if value else "false"
    if type(value) is int:
        return str(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


#: ``LanguageCode``: the binary header's language byte.
LANGUAGE_CODES = ("JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER",
                  "HTTP", "GO", "PHP", "OMS", "RUST", "NODE_JS")
_INT16 = struct.Struct(">h")
_BINARY_FIXED = struct.Struct(">hbhii")


def _header_binary(command: RemotingCommand, opaque: int, flag: int) -> bytes:
    if not -(2**15) <= command.code < 2**15 or not -(2**15) <= command.version < 2**15:
        raise ValueError(f"code {command.code} or version {command.version} does not fit the "
                         "binary header's 16 bits")
    language = (LANGUAGE_CODES.index(command.language)
                if command.language in LANGUAGE_CODES else LANGUAGE_CODES.index("OTHER"))
    parts = [_BINARY_FIXED.pack(command.code, language, command.version, opaque, flag)]
    remark = (command.remark or "").encode("utf-8", "surrogatepass")
    parts += [_LENGTH.pack(len(remark)), remark]
    fields = bytearray()
    for key, value in command.ext_fields.items():
        raw_key, raw_value = key.encode("utf-8", "surrogatepass"), value.encode(
            "utf-8", "surrogatepass")
        if len(raw_key) >= 2**15:
            raise ValueError(f"extFields key of {len(raw_key)} bytes is too long")
        fields += _INT16.pack(len(raw_key)) + raw_key + _LENGTH.pack(len(raw_value)) + raw_value
    parts += [_LENGTH.pack(len(fields)), bytes(fields)]
    return b"".join(parts)


class _BinaryHeader:
    """A reader of a binary header; ``error`` names what is wrong and where."""

    def __init__(self, header: bytes) -> None:
        self.header = header
        self.pos = 0

    def take(self, size: int, what: str) -> bytes:
        if size < 0 or self.pos + size > len(self.header):
            raise ValueError(f"binary header: {what} of {size} bytes at header byte "
                             f"{self.pos} runs past its end ({len(self.header)} bytes)")
        self.pos += size
        return self.header[self.pos - size:self.pos]

    def string(self, length_size: int, what: str) -> str:
        raw = self.take(length_size, f"length of the {what}")
        size = _INT16.unpack(raw)[0] if length_size == 2 else _LENGTH.unpack(raw)[0]
        try:
            return self.take(size, what).decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"binary header: {what} is not UTF-8") from None


class _TooManyFields(Exception):
    """A binary header holds more extFields than allowed (its fixed fields are known)."""

    def __init__(self, fixed: tuple[int, int, int, int, int]) -> None:
        self.fixed = fixed


def _parse_binary(header: bytes, max_ext_fields: int
                  ) -> tuple[int, str, int, int, int, str | None, dict[str, str]]:
    reader = _BinaryHeader(header)
    fixed = _BINARY_FIXED.unpack(reader.take(_BINARY_FIXED.size, "fixed fields"))
    code, language, version, opaque, flag = fixed
    remark = reader.string(4, "remark") or None
    (ext_length,) = _LENGTH.unpack(reader.take(4, "extFields length"))
    fields = _BinaryHeader(reader.take(ext_length, "extFields"))
    ext_fields: dict[str, str] = {}
    while fields.pos < len(fields.header):
        if len(ext_fields) == max_ext_fields:
            raise _TooManyFields(fixed)
        key = fields.string(2, "extFields key")
        ext_fields[key] = fields.string(4, f"extFields value of {key!r}")
    if reader.pos != len(header):
        raise ValueError(f"binary header: {len(header) - reader.pos} bytes after extFields")
    name = LANGUAGE_CODES[language] if 0 <= language < len(LANGUAGE_CODES) else "OTHER"
    return code, name, version, opaque, flag, remark, ext_fields


class FrameDecoder:
    """Incremental decoder: ``feed`` bytes, then take commands out.

    ``max_frame_size`` bounds the ``length`` field; a larger announced frame
    is rejected as soon as its first four bytes arrive, a header over
    ``max_header_size`` as soon as its length does. After a ``FrameError``
    the decoder stays broken: the stream has lost framing (or cannot be
    answered). A header with more than ``max_ext_fields`` extFields raises
    ``OverLimit`` and the decoder goes on with the next frame.
    """

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, *,
                 max_header_size: int = DEFAULT_MAX_HEADER_SIZE,
                 max_ext_fields: int = DEFAULT_MAX_EXT_FIELDS) -> None:
        if max_frame_size < 4:
            raise ValueError(f"max_frame_size must be at least 4, got {max_frame_size}")
        if max_header_size < 0 or max_ext_fields < 0:
            raise ValueError(f"max_header_size ({max_header_size}) and max_ext_fields "
                             f"({max_ext_fields}) must not be negative")
        self.max_frame_size = max_frame_size
        self.max_header_size = max_header_size
        self.max_ext_fields = max_ext_fields
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
        if header_word >> 24 not in (SERIALIZE_JSON, SERIALIZE_ROCKETMQ):
            self._fail(f"unsupported serialize type {header_word >> 24} (0, JSON, or 1, "
                       "RocketMQ's binary header)")
        if header_length > length - 4:
            self._fail(f"header length {header_length} exceeds frame length {length}")
        if header_length > self.max_header_size:
            self._fail(f"header length {header_length} exceeds the maximum header size "
                       f"{self.max_header_size}")
        end = pos + 4 + length
        if len(buffer) < end:
            return None
        header_start = pos + _PREFIX_SIZE
        body_start = header_start + header_length
        header = bytes(buffer[header_start:body_start])
        body = bytes(buffer[body_start:end])
        offset = self._offset
        try:
            command = (self._command(header, body) if header_word >> 24 == SERIALIZE_JSON
                       else self._binary_command(header, body))
        finally:
            # A frame over a limit is stepped over too (an error stays in _error).
            self._pos = end
            self._offset = offset + 4 + length
        if len(command.ext_fields) > self.max_ext_fields:
            self._over_limit(offset, command.code, command.opaque, command.flag,
                             command.serialize_type, len(command.ext_fields))
        return command

    def _over_limit(self, offset: int, code: int, opaque: int, flag: int, serialize_type: int,
                    count: int | None) -> NoReturn:
        held = count if count is not None else f"more than {self.max_ext_fields}"
        raise OverLimit(f"the header holds {held} extFields; the maximum is "
                        f"{self.max_ext_fields}",
                        offset, code=code, opaque=opaque, flag=flag,
                        serialize_type=serialize_type)

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
        get: Callable[..., Any] = fields.get  # values of any JSON type, checked below
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
        elif type(ext_fields) is not dict:
            self._fail(f"header key 'extFields' is {ext_fields!r}, not an object")
        elif not all(type(value) is str for value in ext_fields.values()):
            ext_fields = {key: text for key, value in ext_fields.items()
                          if (text := _field_text(value)) is not None}
        return RemotingCommand(code, opaque, flag, remark, ext_fields, body, language, version)

    def _binary_command(self, header: bytes, body: bytes) -> RemotingCommand:
        try:
            code, language, version, opaque, flag, remark, ext_fields = _parse_binary(
                header, self.max_ext_fields)
        except _TooManyFields as exc:
            code, _, _, opaque, flag = exc.fixed
            self._over_limit(self._offset, code, opaque, flag, SERIALIZE_ROCKETMQ, None)
        except ValueError as exc:
            self._fail(str(exc))
        return RemotingCommand(code, opaque, flag, remark, ext_fields, body, language, version,
                               SERIALIZE_ROCKETMQ)
