"""The command line's addresses, and how a command says it cannot reach them.

Every ``triomq`` command that talks to running nodes takes their addresses
in one form: a name server (``-n``), a controller (``--controller``) or a
broker (``-b``) is ``host:port`` as RocketMQ writes it, or an address with
its scheme (``tcp://host:port``, ``inproc://ns``); one option may list
several, joined by ``;`` as RocketMQ's ``namesrvAddr`` does, and a
repeatable option may also be given again. ``dial_addresses`` turns them
into what the RPC client dials.

A command that cannot reach any of the nodes it needs raises
``Unreachable``: ``triomq`` prints it as one line, ``triomq: error: no
name server answered (127.0.0.1:9876: connection refused)``, and exits 2,
whatever the command family. Each address is named once, as the user
wrote it (``shown``), with the reason it did not answer
(``reason_unreachable``, the address taken out of the error's text). A
node that answers and refuses is not this: the command reports the code
and remark itself and exits 1.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from triomq.errors import ConfigError, TriomqError
from triomq.rpc import RpcTimeout
from triomq.transport import os_reason

__all__ = ["Unreachable", "dial_address", "dial_addresses", "reason_unreachable", "shown"]

_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]+):(\d{1,5})$")


def dial_address(text: str) -> str:
    """One address as the RPC client dials it: ``host:port`` gets ``tcp://``.

    ``ConfigError`` for text that is neither ``host:port`` nor ``scheme://location``.
    """
    address = text.strip()
    if "://" in address:
        scheme, _, rest = address.partition("://")
        if scheme and rest:
            return address
    elif _HOST_PORT.match(address):
        return f"tcp://{address}"
    raise ConfigError(f"address {text!r}: expected host:port (RocketMQ's form) or "
                      "scheme://location, e.g. 127.0.0.1:9876 or tcp://127.0.0.1:9876")


def dial_addresses(values: str | Iterable[str], option: str) -> list[str]:
    """The addresses of an option's values (each may list several, joined by ``;``),
    in order, each once. ``ConfigError`` naming ``option`` if there are none."""
    texts = [values] if isinstance(values, str) else list(values)
    found: list[str] = []
    for text in texts:
        for part in text.split(";"):
            if part.strip():
                address = dial_address(part)
                if address not in found:
                    found.append(address)
    if not found:
        raise ConfigError(f"{option} names no address")
    return found


def shown(address: str) -> str:
    """An address in a message: TCP ones as RocketMQ writes them, others as they are."""
    return address.removeprefix("tcp://")


def reason_unreachable(exc: BaseException, address: str) -> str:
    """Why ``address`` did not answer, without naming it again.

    The operating system's reason where there is one (``connection refused``),
    ``no answer in time`` for a timeout, else the error's text with the address
    taken out.
    """
    reason = os_reason(exc)
    if reason is not None:
        return reason
    if isinstance(exc, RpcTimeout):
        return "no answer in time"
    text = " ".join(str(exc).split())
    for form in (address, shown(address)):
        text = text.replace(f" to {form}", "").replace(f"{form}: ", "").replace(form, "it")
    return text or type(exc).__name__


class Unreachable(TriomqError):
    """None of the ``kind`` nodes a command needs answered (``triomq`` exits 2).

    ``failures`` maps each address tried to why it did not answer (an error or
    its text); the message names each once.
    """

    def __init__(self, kind: str, failures: Mapping[str, BaseException | str]) -> None:
        self.kind = kind
        self.failures = {address: why if isinstance(why, str)
                         else reason_unreachable(why, address)
                         for address, why in failures.items()}
        listed = "; ".join(f"{shown(a)}: {why}" for a, why in self.failures.items())
        super().__init__(f"no {kind} answered ({listed or 'none was named'})")
