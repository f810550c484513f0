"""One RPC connection: request/response in remoting frames over a trio byte stream."""

from __future__ import annotations

import contextlib
import heapq
import logging
import math
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

import attrs
import trio

from framework.errors import TriomqError
from framework.protocol.remoting import (
    DEFAULT_MAX_FRAME_SIZE,
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    REQUEST_CODE_NOT_SUPPORTED,
    SUCCESS,
    SYSTEM_BUSY,
    SYSTEM_ERROR,
    FrameDecoder,
    FrameError,
    RemotingCommand,
    encode_into,
)

log = logging.getLogger("triomq.rpc")

#: RocketMQ's default invoke timeout, in seconds.
DEFAULT_TIMEOUT = 3.0
_RECEIVE_SIZE = 64 * 1024
_OPAQUE_MASK = 0x7FFFFFFF
_CLOSE_TIMEOUT = 1.0
_CLOSED_LOCALLY = "closed locally"
_TASK_ENDED = "connection task ended"
_LOCAL_CLOSE = frozenset({_CLOSED_LOCALLY, _TASK_ENDED})

Handler = Callable[[RemotingCommand, "RpcConnection"], Awaitable[RemotingCommand | None]]


class RpcError(TriomqError):
    """A call did not get a response."""


class RpcTimeout(RpcError):
    """No response within the call's timeout."""


class RpcConnectionError(RpcError):
    """The connection could not be opened, or was lost before the response came."""


@attrs.frozen
class ConnectionLimits:
    """Per-connection limits, the same on both ends of a connection."""

    #: Largest accepted ``length`` field; RocketMQ's default is 16 MiB.
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    #: Seconds a peer may stall inside a frame it is sending, or leave an answer
    #: we write unread, before the connection is closed.
    stall_timeout: float = 30.0
    #: Requests handled at once per connection; beyond it, SYSTEM_BUSY.
    max_concurrent_requests: int = 1024
    #: Bytes queued for sending before callers wait (and reading pauses).
    send_buffer: int = 1024 * 1024


def describe_peer(stream: trio.abc.Stream) -> str:
    """A name for the far end of ``stream``, for logs and handlers.

    A transport may give its streams a ``remote_address`` string; otherwise
    the socket's peer address is used, looking through wrappers such as
    ``trio.SSLStream`` (``transport_stream``).
    """
    current: Any = stream
    while current is not None:
        address = getattr(current, "remote_address", None)
        if isinstance(address, str):
            return address
        sock = getattr(current, "socket", None)
        if sock is not None:
            try:
                name = sock.getpeername()
            except OSError:
                break
            return f"{name[0]}:{name[1]}" if isinstance(name, tuple) else str(name)
        current = getattr(current, "transport_stream", None)
    return "unknown peer"


def _describe(exc: BaseException) -> str:
    # trio wraps the OS or TLS error that broke a stream; that one says why.
    cause = exc.__cause__
    return f"{exc!r} caused by {cause!r}" if cause is not None else repr(exc)


def _system_error(remark: str) -> RemotingCommand:
    return RemotingCommand.response(SYSTEM_ERROR, remark=remark)


class _Call:
    __slots__ = ("deadline", "event", "response", "timed_out")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.event = trio.Event()
        self.response: RemotingCommand | None = None
        self.timed_out = False


class RpcConnection:
    """RPC over one stream. Run ``run`` in a nursery; it owns (and closes) the stream.

    Timeouts cost no cancel scope per call: one timer task per connection
    wakes at the earliest deadline and fails the calls that reached theirs.
    Writes have no writer task either: the first task with a frame to send
    writes everything queued until the queue is empty, others queue their
    frames behind it (waiting only while the queue holds ``send_buffer``
    bytes). A write still unfinished at its deadline means the peer is not
    reading; the stream then has no framing left, so the connection closes.
    """

    def __init__(self, stream: trio.abc.Stream, *, handlers: Mapping[int, Handler] | None = None,
                 inline: Collection[int] = (), limits: ConnectionLimits | None = None,
                 peer: str | None = None) -> None:
        self.stream = stream
        self.peer = peer if peer is not None else describe_peer(stream)
        self.limits = limits if limits is not None else ConnectionLimits()
        #: Why the connection closed; ``None`` while it is open.
        self.close_reason: str | None = None
        self._handlers: Mapping[int, Handler] = handlers if handlers is not None else {}
        self._inline = inline
        self._decoder = FrameDecoder(self.limits.max_frame_size)
        self._calls: dict[int, _Call] = {}
        self._next_opaque = 0
        self._out = bytearray()
        self._writes = 0  # counts flushes; the one in progress has key -_writes
        self._writing = False
        self._space_lot = trio.lowlevel.ParkingLot()
        # (deadline, key): key >= 0 is a call's opaque, key < 0 a flush.
        self._deadlines: list[tuple[float, int]] = []
        self._timer: trio.CancelScope | None = None
        self._handling = 0
        self._nursery: trio.Nursery | None = None
        self._finished = trio.Event()
        #: Frames received so far.
        self.frames_received = 0
        #: When the stream was open (a handshake done), and when the connection closed.
        self.opened_at: float | None = None
        self.closed_at: float | None = None

    def __repr__(self) -> str:
        state = "open" if self.close_reason is None else f"closed: {self.close_reason}"
        return f"<RpcConnection {self.peer} {state}>"

    @property
    def closed(self) -> bool:
        return self.close_reason is not None

    @property
    def closed_locally(self) -> bool:
        """Whether this end closed the connection (``aclose`` or cancellation)."""
        return self.close_reason in _LOCAL_CLOSE

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve the connection until it closes, then close the stream.

        Reports started once the stream is open: a stream with a handshake
        (TLS) completes it first, within ``stall_timeout``; if it fails,
        the connection is reported started but already closed, saying why.
        """
        try:
            await self._open_stream()
            if not self.closed:
                self.opened_at = trio.current_time()
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                if self.closed:
                    nursery.cancel_scope.cancel()
                nursery.start_soon(self._timer_loop)
                task_status.started()
                await self._read_loop()
                nursery.cancel_scope.cancel()
        finally:
            self._close(_TASK_ENDED, logging.DEBUG)
            # A graceful close (TLS close_notify) if it is quick, else a forceful one.
            # A broken stream is closed all the same.
            with trio.move_on_after(_CLOSE_TIMEOUT, shield=True) as scope, \
                    contextlib.suppress(trio.BrokenResourceError):
                await self.stream.aclose()
            if scope.cancelled_caught:
                await trio.aclose_forcefully(self.stream)
            self._finished.set()

    async def _open_stream(self) -> None:
        # An empty write makes a stream with a handshake do it now, in this task.
        # Otherwise the reader's first receive would do it, and a writer waiting
        # for it meanwhile would wait forever if it failed (trio.SSLStream does).
        with trio.move_on_after(self.limits.stall_timeout) as opening:
            try:
                await self.stream.send_all(b"")
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                self._close(f"opening the stream failed: {_describe(exc)}", logging.INFO)
        if opening.cancelled_caught:
            self._close(f"opening the stream (a handshake) took over {self.limits.stall_timeout}"
                        " s", logging.WARNING)

    async def aclose(self) -> None:
        """Close the connection: calls in flight fail with RpcConnectionError."""
        self._close(_CLOSED_LOCALLY, logging.DEBUG)
        if self._nursery is not None:
            await self._finished.wait()
        else:
            await trio.aclose_forcefully(self.stream)

    async def invoke(self, code: int, ext_fields: Mapping[str, str] | None = None,
                     body: bytes = b"", *, timeout: float = DEFAULT_TIMEOUT) -> RemotingCommand:
        """Send a request and return its response (whatever its code).

        Raises ``RpcTimeout`` after ``timeout`` seconds, ``RpcConnectionError``
        if the connection is or gets closed first.
        """
        deadline = trio.current_time() + timeout
        opaque = self._opaque()
        call = _Call(deadline)
        self._calls[opaque] = call
        self._arm(deadline, opaque)
        try:
            await self._send(RemotingCommand(code, opaque, 0, None,
                                             ext_fields if ext_fields is not None else {}, body),
                             deadline)
            await call.event.wait()
        except RpcConnectionError:
            if not call.timed_out:
                raise
        finally:
            del self._calls[opaque]
            self._prune()
        if call.timed_out:
            raise RpcTimeout(f"request code {code} to {self.peer}: no response in {timeout} s")
        if call.response is None:
            raise RpcConnectionError(f"request code {code} to {self.peer}: {self.close_reason}")
        return call.response

    async def invoke_oneway(self, code: int, ext_fields: Mapping[str, str] | None = None,
                            body: bytes = b"", *, timeout: float = DEFAULT_TIMEOUT) -> None:
        """Send a request that gets no response.

        Raises ``RpcTimeout`` if it could not be written within ``timeout``
        seconds, ``RpcConnectionError`` if the connection is closed.
        """
        await self._send(RemotingCommand(code, self._opaque(), FLAG_ONEWAY, None,
                                         ext_fields if ext_fields is not None else {}, body),
                         trio.current_time() + timeout)

    # -- internals --------------------------------------------------------

    def _opaque(self) -> int:
        opaque = self._next_opaque
        self._next_opaque = (opaque + 1) & _OPAQUE_MASK
        return opaque

    def _close(self, reason: str, level: int) -> None:
        if self.close_reason is not None:
            return
        self.close_reason = reason
        self.closed_at = trio.current_time()
        log.log(level, "connection to %s closed: %s", self.peer, reason)
        for call in self._calls.values():
            call.event.set()
        self._space_lot.unpark_all()
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    def _check_open(self) -> None:
        if self.close_reason is not None:
            raise RpcConnectionError(f"connection to {self.peer} closed: {self.close_reason}")

    def _arm(self, deadline: float, key: int) -> None:
        heapq.heappush(self._deadlines, (deadline, key))
        if self._timer is not None and deadline < self._timer.deadline:
            self._timer.deadline = deadline

    def _prune(self) -> None:
        # Calls mostly end in the order they started: drop ended ones from the front
        # so the timer does not wake for them.
        deadlines = self._deadlines
        while deadlines:
            key = deadlines[0][1]
            if key in self._calls if key >= 0 else self._writing and key == -self._writes:
                return
            heapq.heappop(deadlines)

    async def _timer_loop(self) -> None:
        deadlines = self._deadlines
        while True:
            with trio.CancelScope(deadline=deadlines[0][0] if deadlines else math.inf) as timer:
                self._timer = timer
                await trio.sleep_forever()
            now = trio.current_time()
            stalled_write = False
            while deadlines and deadlines[0][0] <= now:
                _, key = heapq.heappop(deadlines)
                if key < 0:
                    stalled_write = stalled_write or (self._writing and key == -self._writes)
                    continue
                call = self._calls.get(key)
                if call is not None and call.deadline <= now and not call.event.is_set():
                    call.timed_out = True
                    call.event.set()
            # After the calls: one whose own write stalled still reports a timeout.
            if stalled_write:
                self._close("the peer read nothing we wrote until a write's deadline",
                            logging.WARNING)

    async def _send(self, command: RemotingCommand, deadline: float) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        if len(self._out) >= self.limits.send_buffer:
            with trio.move_on_at(deadline):
                while len(self._out) >= self.limits.send_buffer:
                    await self._space_lot.park()
                    self._check_open()
            if len(self._out) >= self.limits.send_buffer:
                raise RpcTimeout(f"request code {command.code} to {self.peer}: send buffer "
                                 "still full at the deadline")
        encode_into(self._out, command)
        if self._writing:
            return
        self._writing = True
        self._writes += 1
        self._arm(deadline, -self._writes)
        try:
            while self._out:
                data, self._out = self._out, bytearray()
                await self.stream.send_all(data)
                self._space_lot.unpark_all()
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self._close(f"send failed: {_describe(exc)}", logging.INFO)
            if trio.current_time() >= deadline:
                raise RpcTimeout(f"request code {command.code} to {self.peer}: not written by "
                                 f"its deadline; connection closed: {self.close_reason}"
                                 ) from exc
            raise RpcConnectionError(f"connection to {self.peer} closed: {self.close_reason}"
                                     ) from exc
        except BaseException:
            self._close("a write was cancelled half-way", logging.INFO)
            raise
        finally:
            self._writing = False
            self._prune()

    async def _read_loop(self) -> None:
        stream = self.stream
        decoder = self._decoder
        stall_timeout = self.limits.stall_timeout
        try:
            while True:
                if decoder.buffered:
                    data = None
                    with trio.move_on_after(stall_timeout):
                        data = await stream.receive_some(_RECEIVE_SIZE)
                    if data is None:
                        self._close(f"peer stalled for {stall_timeout} s inside a frame "
                                    f"({decoder.buffered} bytes of it received)",
                                    logging.WARNING)
                        return
                else:
                    data = await stream.receive_some(_RECEIVE_SIZE)
                if not data:
                    decoder.feed_eof()
                    self._close("peer closed the connection", logging.DEBUG)
                    return
                decoder.feed(data)
                for command in decoder:
                    self.frames_received += 1
                    if command.flag & FLAG_RESPONSE:
                        self._complete(command)
                    else:
                        await self._dispatch(command)
        except FrameError as exc:
            self._close(str(exc), logging.WARNING)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self._close(f"receive failed: {_describe(exc)}", logging.INFO)
        except RpcError as exc:
            # Writing an answer failed: the peer is gone, or reads nothing.
            self._close(str(exc), logging.WARNING)

    def _complete(self, response: RemotingCommand) -> None:
        call = self._calls.get(response.opaque)
        if call is None:
            log.debug("%s: response to opaque %d came after its call ended",
                      self.peer, response.opaque)
            return
        call.response = response
        call.event.set()

    async def _dispatch(self, request: RemotingCommand) -> None:
        handler = self._handlers.get(request.code)
        if handler is None:
            log.debug("%s: request code %d not supported", self.peer, request.code)
            await self._answer(request, RemotingCommand.response(
                REQUEST_CODE_NOT_SUPPORTED, remark=f"request code {request.code} not supported"))
        elif self._handling >= self.limits.max_concurrent_requests:
            await self._answer(request, RemotingCommand.response(
                SYSTEM_BUSY, remark=f"more than {self.limits.max_concurrent_requests} "
                                    "requests in progress on this connection"))
        elif request.code in self._inline:
            self._handling += 1
            await self._handle(handler, request)
        else:
            assert self._nursery is not None  # requests only arrive while run() runs
            self._handling += 1
            self._nursery.start_soon(self._handle, handler, request)

    async def _handle(self, handler: Handler, request: RemotingCommand) -> None:
        try:
            try:
                response = await handler(request, self)
            except Exception as exc:
                log.exception("%s: handler for request code %d raised", self.peer, request.code)
                response = _system_error(f"{type(exc).__name__}: {exc}")
            if response is None:
                response = RemotingCommand.response(SUCCESS)
            elif not isinstance(response, RemotingCommand):
                log.error("%s: handler for request code %d returned %r, not a RemotingCommand",
                          self.peer, request.code, response)
                response = _system_error(f"handler returned a {type(response).__name__}")
            try:
                await self._answer(request, response)
            except (TypeError, ValueError) as exc:
                # The handler's response cannot be encoded; nothing of it was written.
                log.exception("%s: response to request code %d cannot be encoded",
                              self.peer, request.code)
                await self._answer(request, _system_error(f"bad response: {exc}"))
        except RpcError:
            pass  # the connection closed: nobody to answer
        finally:
            self._handling -= 1

    async def _answer(self, request: RemotingCommand, response: RemotingCommand) -> None:
        if request.flag & FLAG_ONEWAY:
            return
        if response.opaque != request.opaque or not response.flag & FLAG_RESPONSE:
            response = RemotingCommand(response.code, request.opaque,
                                       response.flag | FLAG_RESPONSE, response.remark,
                                       response.ext_fields, response.body, response.language,
                                       response.version)
        await self._send(response, trio.current_time() + self.limits.stall_timeout)
