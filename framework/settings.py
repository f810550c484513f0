"""Configuration machinery: declare keys, load them from TOML, check them.

Every key is a field of a frozen attrs class declared with ``setting``, which
carries the key's documentation; ``describe(cls)`` lists them all. Loading
rejects unknown keys and bad values with a ``ConfigError`` whose message
starts with the key path, e.g.
``store.flush: expected one of 'group', 'interval', 'none', got 'sometimes'``.

The node's own configuration classes are in ``triomq.config``; each role
declares its section next to the role (``triomq.broker.config``) and its
plugin contributes it (``triomq_config_sections``).

A class whose keys are not all its own fields (``NodeConfig``: the plugins'
sections join it) defines ``__from_mapping__(data, path)`` and
``__describe__(prefix)``; ``from_mapping`` and ``describe`` defer to them.
"""

from __future__ import annotations

import enum
import tomllib
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

import attrs

from triomq.errors import ConfigError

T = TypeVar("T")


def setting(default: Any = attrs.NOTHING, *, doc: str,
            check: Callable[[Any], str | None] | None = None,
            factory: Callable[[], Any] | None = None, secret: bool = False) -> Any:
    """Declare one config key: its default, its documentation and a value check.

    ``check(value)`` returns ``None`` when the value is fine, else the reason.
    It runs both for TOML input and for objects built in code. A ``secret``
    value (a password, a key) is left out of the object's repr and of errors.
    """

    def validate(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        reason = check(value) if check is not None else None
        if reason is not None:
            raise ConfigError(reason if secret else f"{reason}, got {value!r}", attribute.name)

    if factory is not None:
        return attrs.field(factory=factory, validator=validate, metadata={"doc": doc},
                           repr=not secret)
    return attrs.field(default=default, validator=validate, metadata={"doc": doc},
                       repr=not secret)


def positive(value: float) -> str | None:
    """A check: strictly positive numbers."""
    return None if value > 0 else "must be > 0"


def non_negative(value: float) -> str | None:
    """A check: zero or more."""
    return None if value >= 0 else "must be >= 0"


def one_of(*choices: Any) -> Callable[[Any], str | None]:
    """A check: the value is one of ``choices`` (pair it with a ``Literal`` type)."""

    def check(value: Any) -> str | None:
        return None if value in choices else f"expected one of {', '.join(map(repr, choices))}"

    return check


def port(value: int) -> str | None:
    """A check: a TCP port number, 0 meaning "any free port"."""
    return None if 0 <= value <= 65535 else "must be a port number in 0..65535"


def load_toml(cls: type[T], file: str | Path) -> T:
    """Read ``file`` as TOML and build ``cls`` from it."""
    return from_mapping(cls, read_toml(file))


def read_toml(file: str | Path) -> dict[str, Any]:
    """The TOML file ``file`` as plain data; a missing or malformed file is a ConfigError."""
    path = Path(file)
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file {str(path)!r} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {str(path)!r} is not valid TOML: {exc}") from None


def from_mapping(cls: type[T], data: Mapping[str, Any], path: str = "") -> T:
    """Build the attrs class ``cls`` from plain data, checking every key and value."""
    custom = getattr(cls, "__from_mapping__", None)
    if custom is not None:
        built: T = custom(data, path)
        return built
    return build(cls, data, path)


def build(cls: type[T], data: Mapping[str, Any], path: str = "", *,
          extra_keys: Iterable[str] = (), **built: Any) -> T:
    """Build ``cls`` from the fields in ``data`` plus values ``built`` already.

    ``extra_keys`` are keys of ``data`` the caller handles itself (listed as
    known in the error about an unknown key, not passed to ``cls``).
    """
    if not isinstance(data, Mapping):
        raise ConfigError(f"expected a table, got {type(data).__name__}", path)
    fields = {f.name: f for f in _fields(cls) if f.name not in built}
    extra = set(extra_keys)
    unknown = sorted(set(data) - set(fields) - extra)
    if unknown:
        raise ConfigError(
            f"unknown key {unknown[0]!r}; known keys: {', '.join(sorted({*fields, *extra}))}",
            join_key(path, unknown[0]))
    kwargs = {name: _convert(fields[name].type, value, join_key(path, name))
              for name, value in data.items() if name not in extra}
    try:
        return cls(**kwargs, **built)
    except ConfigError as exc:
        # Validators only know the field name; give the full key path.
        raise ConfigError(str(exc).split(": ", 1)[-1], join_key(path, exc.path)) from None


def _fields(cls: Any) -> tuple[attrs.Attribute, ...]:
    # ``cls`` is any attrs class; its annotations resolved (they are strings here).
    resolved: tuple[attrs.Attribute, ...] = attrs.fields(attrs.resolve_types(cls))
    return resolved


def join_key(path: str, key: str) -> str:
    """The key path of ``key`` inside the table at ``path`` (``store`` + ``path``)."""
    return f"{path}.{key}" if path else key


def _convert(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if attrs.has(tp):
        return from_mapping(tp, value, path)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in (a for a in args if a is not type(None)):
            try:
                return _convert(arg, value, path)
            except ConfigError:
                continue
        raise ConfigError(f"no accepted type matches {value!r}", path)
    if origin is Literal:
        if value not in args:
            raise ConfigError(
                f"expected one of {', '.join(map(repr, args))}, got {value!r}", path)
        return value
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            choices = ", ".join(repr(m.value) for m in tp)
            raise ConfigError(f"expected one of {choices}, got {value!r}", path) from None
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ConfigError(f"expected a list, got {type(value).__name__}", path)
        item = args[0] if args else Any
        return tuple(_convert(item, v, f"{path}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"expected a table, got {type(value).__name__}", path)
        item = args[1] if len(args) == 2 else Any
        return {str(k): _convert(item, v, join_key(path, str(k))) for k, v in value.items()}
    if tp is Any:
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"expected a number, got {value!r}", path)
        return float(value)
    if tp is int and isinstance(value, bool):
        raise ConfigError(f"expected an integer, got {value!r}", path)
    if isinstance(tp, type) and not isinstance(value, tp):
        raise ConfigError(f"expected {tp.__name__}, got {value!r}", path)
    return value


def describe(cls: type, prefix: str = "") -> Iterator[tuple[str, str, str]]:
    """Yield ``(key path, default, doc)`` for every key of ``cls``, nested tables included."""
    custom = getattr(cls, "__describe__", None)
    if custom is not None:
        yield from custom(prefix)
        return
    yield from describe_fields(cls, prefix)


def describe_fields(cls: type, prefix: str = "", *,
                    skip: Iterable[str] = ()) -> Iterator[tuple[str, str, str]]:
    """``describe`` over the fields of ``cls`` (less ``skip``) only."""
    skipped = set(skip)
    for f in _fields(cls):
        if f.name in skipped:
            continue
        key = join_key(prefix, f.name)
        tp = f.type
        default: Any = f.default
        if tp is not None and attrs.has(tp):
            yield from describe(tp, key)
            continue
        made = isinstance(default, attrs.Factory)  # type: ignore[arg-type]
        yield key, repr(default.factory() if made else default), f.metadata.get("doc", "")
