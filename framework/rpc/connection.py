"""One RPC connection: request/response in remoting frames over a trio byte stream."""

from __future__ import annotations

import contextlib
import heapq
import logging
import math
import os
from collections.abc import Awaitable, Callable, Collection, Mapping

import attrs
import trio

from triomq.protocol.remoting import (
    DEFAULT_MAX_EXT_FIELDS,
    DEFAULT_MAX_FRAME_SIZE,
    DEFAULT_MAX_HEADER_SIZE,
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    REQUEST_CODE_NOT_SUPPORTED,
    SUCCESS,
    SYSTEM_BUSY,
    SYSTEM_ERROR,
    FrameDecoder,
    FrameError,
    OverLimit,
    RemotingCommand,
    encode_into,
)
from triomq.rpc.errors import RpcConnectionError, RpcError, RpcTimeout
from triomq.rpc.peer import describe_error, describe_peer

log = logging.getLogger("triomq.rpc")

#: RocketMQ's default invoke timeout, in seconds.
DEFAULT_TIMEOUT = 3.0
_RECEIVE_SIZE = 64 * 1024
_OPAQUE_MASK = 0x7FFFFFFF
_CLOSE_TIMEOUT = 1.0
_CLOSED_LOCALLY = "closed locally"
_TASK_ENDED = "connection task ended"
_LOCAL_CLOSE = frozenset({_CLOSED_LOCALLY, _TASK_ENDED})
# Workers kept waiting for work once a burst of requests is over; the rest end.
_IDLE_WORKERS = 8

Handler = Callable[[RemotingCommand, "RpcConnection"], Awaitable[RemotingCommand | None]]


@attrs.frozen
class ConnectionLimits:
    """Per-connection limits, the same on both ends of a connection."""

    #: Largest accepted ``length`` field; RocketMQ's default is 16 MiB.
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    #: Largest accepted header, in bytes: a larger one closes the connection as
    #: soon as its length arrives (its opaque unread, it cannot be answered).
    max_header_size: int = DEFAULT_MAX_HEADER_SIZE
    #: Most extFields in one header: a request with more is answered SYSTEM_ERROR
    #: before any handler runs, a response with more closes the connection.
    max_ext_fields: int = DEFAULT_MAX_EXT_FIELDS
    #: Seconds a peer may stall inside a frame it is sending, or leave an answer
    #: we write unread, before the connection is closed.
    stall_timeout: float = 30.0
    #: Requests handled at once per connection; beyond it, SYSTEM_BUSY.
    max_concurrent_requests: int = 1024
    #: Bytes queued for sending before callers wait (and reading pauses).
    send_buffer: int = 1024 * 1024
    #: Seconds a connection may carry nothing (no frame received, no call or
    #: request in progress) before it is closed; RocketMQ's
    #: serverChannelMaxIdleTimeSeconds. A silent peer holds nothing for long.
    idle_timeout: float = 120.0


def _system_error(remark: str) -> RemotingCommand:
    return RemotingCommand.response(SYSTEM_ERROR, remark=remark)


class _Call:
    """A call waiting for its response."""

    __slots__ = ("deadline", "opaque", "response", "task", "timed_out")

    def __init__(self, opaque: int, deadline: float) -> None:
        self.opaque = opaque
        self.deadline = deadline
        self.response: RemotingCommand | None = None
        self.timed_out = False
        # The caller's task while it is parked (waiting to be rescheduled).
        self.task: trio.lowlevel.Task | None = None


class RpcConnection:
    """RPC over one stream. Run ``run`` in a nursery; it owns (and closes) the stream.

    The connection's worker tasks take turns reading (leader/follower): a
    worker that reads a request wakes another to read on and runs the
    handler itself, so a request needs no task of its own and a slow
    handler blocks nobody. Idle workers wait for their turn; a burst of
    requests starts more. A caller parks until its response is read.

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
                 peer: str | None = None, version: int = 0) -> None:
        self.stream = stream
        self.peer = peer if peer is not None else describe_peer(stream)
        #: The version (RocketMQ's ``MQVersion`` ordinal) the requests sent here declare.
        self.version = version
        self.limits = limits if limits is not None else ConnectionLimits()
        #: Why the connection closed; ``None`` while it is open.
        self.close_reason: str | None = None
        self._handlers: Mapping[int, Handler] = handlers if handlers is not None else {}
        self._inline = inline
        self._decoder = FrameDecoder(self.limits.max_frame_size,
                                     max_header_size=self.limits.max_header_size,
                                     max_ext_fields=self.limits.max_ext_fields)
        self._calls: dict[int, _Call] = {}
        self._next_opaque = 0
        self._out = bytearray()
        # A plain socket's descriptor: a frame is written at once when the kernel
        # takes it all, as asyncio's transports do; the writer's loop (and its
        # scheduler pass) is only for what has to wait. None for other streams.
        self._fd = (stream.socket.fileno()
                    if os.name == "posix" and isinstance(stream, trio.SocketStream) else None)
        self._writing = False
        # The deadline of the write in progress (inf when none).
        self._write_deadline = math.inf
        self._space_lot = trio.lowlevel.ParkingLot()
        # (deadline, opaque) of the calls in flight; the timer wakes at the first of
        # these or at _write_deadline.
        self._deadlines: list[tuple[float, int]] = []
        self._timer: trio.CancelScope | None = None
        self._timer_at = -math.inf  # the timer's deadline (no timer yet: never lowered)
        self._handling = 0
        self._nursery: trio.Nursery | None = None
        self._finished = trio.Event()
        # Whether a worker reads now; the others wait in _idle.
        self._worker_reading = False
        self._idle: list[trio.lowlevel.Task] = []
        # Callers waiting for their response.
        self._parked: dict[int, _Call] = {}
        #: Frames received so far.
        self.frames_received = 0
        #: Requests refused so far for breaking a decoding limit (``max_ext_fields``).
        self.refused_over_limit = 0
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
                if self.limits.idle_timeout < math.inf:
                    nursery.start_soon(self._idle_loop)
                task_status.started()
                await self._work()
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
                self._close(f"opening the stream failed: {describe_error(exc)}", logging.INFO)
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
        call = _Call(opaque, deadline)
        self._calls[opaque] = call
        self._arm(deadline, opaque)
        try:
            await self._send(RemotingCommand(code, opaque, 0, None,
                                             ext_fields if ext_fields is not None else {}, body,
                                             version=self.version),
                             deadline)
            if call.response is None and not call.timed_out and self.close_reason is None:
                await self._park(call)
        except RpcConnectionError:
            if not call.timed_out:
                raise
        finally:
            del self._calls[opaque]
            self._prune()
        if call.timed_out:
            raise RpcTimeout(f"request code {code} to {self.peer}: no response in {timeout:.3g} s")
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
                                         ext_fields if ext_fields is not None else {}, body,
                                         version=self.version),
                         trio.current_time() + timeout)
        # A write done at once yielded nowhere; a trio call that may block is a checkpoint.
        await trio.lowlevel.cancel_shielded_checkpoint()

    # -- internals: state ---------------------------------------------------

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
        for call in list(self._parked.values()):
            self._wake(call)
        self._space_lot.unpark_all()
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    def _check_open(self) -> None:
        if self.close_reason is not None:
            raise RpcConnectionError(f"connection to {self.peer} closed: {self.close_reason}")

    def _arm(self, deadline: float, opaque: int) -> None:
        heapq.heappush(self._deadlines, (deadline, opaque))
        self._wake_timer_by(deadline)

    def _wake_timer_by(self, deadline: float) -> None:
        if deadline < self._timer_at:
            self._timer_at = deadline
            assert self._timer is not None
            self._timer.deadline = deadline

    def _prune(self) -> None:
        # Calls mostly end in the order they started: drop ended ones from the front
        # so the timer does not wake for them.
        deadlines = self._deadlines
        while deadlines and deadlines[0][1] not in self._calls:
            heapq.heappop(deadlines)

    async def _timer_loop(self) -> None:
        deadlines = self._deadlines
        while True:
            with trio.CancelScope(deadline=min(deadlines[0][0] if deadlines else math.inf,
                                               self._write_deadline)) as timer:
                self._timer = timer
                self._timer_at = timer.deadline
                await trio.sleep_forever()
            now = trio.current_time()
            stalled_write = self._write_deadline <= now
            while deadlines and deadlines[0][0] <= now:
                call = self._calls.get(heapq.heappop(deadlines)[1])
                if (call is not None and call.deadline <= now and call.response is None
                        and not call.timed_out):
                    call.timed_out = True
                    self._wake(call)
            # After the calls: one whose own write stalled still reports a timeout.
            if stalled_write:
                self._close("the peer read nothing we wrote until a write's deadline",
                            logging.WARNING)

    async def _idle_loop(self) -> None:
        # Counting frames costs the hot path nothing: a period in which none came
        # and nothing was in progress is idle.
        seen = -1
        while True:
            await trio.sleep(self.limits.idle_timeout)
            if self.frames_received == seen and not self._calls and not self._handling:
                self._close(f"idle for {self.limits.idle_timeout} s", logging.INFO)
                return
            seen = self.frames_received

    # -- internals: writing -------------------------------------------------

    def _write_now(self) -> bool:
        """Write what the socket takes at once, with no scheduler pass; whether
        everything went (the rest waits for the writer's loop)."""
        self._check_open()  # a closed connection's descriptor may already be another file's
        try:
            written = os.write(self._fd, self._out)
        except BlockingIOError:
            return False
        except OSError as exc:
            self._close(f"send failed: {exc!r}", logging.INFO)
            raise RpcConnectionError(f"connection to {self.peer} closed: {self.close_reason}"
                                     ) from exc
        if written == len(self._out):
            self._out.clear()
            return True
        del self._out[:written]
        return False

    async def _send(self, command: RemotingCommand, deadline: float, *,
                    opaque: int | None = None, flag: int | None = None,
                    serialize_type: int | None = None) -> None:
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
        encode_into(self._out, command, opaque=opaque, flag=flag, serialize_type=serialize_type)
        if self._writing or (self._fd is not None and self._write_now()):
            return
        self._writing = True
        self._write_deadline = deadline
        self._wake_timer_by(deadline)
        try:
            while self._out:
                data, self._out = self._out, bytearray()
                await self.stream.send_all(data)
                if self._space_lot:
                    self._space_lot.unpark_all()
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self._close(f"send failed: {describe_error(exc)}", logging.INFO)
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
            self._write_deadline = math.inf

    # -- internals: callers ---------------------------------------------------

    async def _park(self, call: _Call) -> None:
        """Wait until the response comes or the call ends."""
        call.task = trio.lowlevel.current_task()
        self._parked[call.opaque] = call

        def abort(_: object) -> trio.lowlevel.Abort:
            del self._parked[call.opaque]
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    def _wake(self, call: _Call) -> None:
        if self._parked.get(call.opaque) is call:
            del self._parked[call.opaque]
            trio.lowlevel.reschedule(call.task)

    def _complete(self, response: RemotingCommand) -> None:
        call = self._calls.get(response.opaque)
        if call is None:
            log.debug("%s: response to opaque %d came after its call ended",
                      self.peer, response.opaque)
            return
        call.response = response
        self._wake(call)

    # -- internals: workers -------------------------------------------------

    async def _work(self) -> None:
        """A worker: reads in its turn, then runs the handler of the request it read."""
        while self.close_reason is None:
            if self._worker_reading:
                if len(self._idle) >= _IDLE_WORKERS:
                    return
                await self._idle_wait()
                continue
            self._worker_reading = True
            try:
                request = await self._read()
            finally:
                self._worker_reading = False
            if request is not None:
                await self._handle(*request)

    def _wake_worker(self) -> None:
        if self._idle:
            trio.lowlevel.reschedule(self._idle.pop())
        elif self.close_reason is None and self._nursery is not None:
            self._nursery.start_soon(self._work)

    async def _idle_wait(self) -> None:
        task = trio.lowlevel.current_task()
        self._idle.append(task)

        def abort(_: object) -> trio.lowlevel.Abort:
            self._idle.remove(task)
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    async def _read(self) -> tuple[Handler, RemotingCommand] | None:
        """Read until a request to handle in this task comes (another worker is
        woken to read on), or the connection closes (None)."""
        stream = self.stream
        decoder = self._decoder
        stall_timeout = self.limits.stall_timeout
        try:
            while True:
                try:
                    command = decoder.next_command()
                except OverLimit as exc:
                    await self._refuse_over_limit(exc)
                    continue
                if command is None:
                    if decoder.buffered:
                        data = None
                        with trio.move_on_after(stall_timeout):
                            data = await stream.receive_some(_RECEIVE_SIZE)
                        if data is None:
                            self._close(f"peer stalled for {stall_timeout} s inside a frame "
                                        f"({decoder.buffered} bytes of it received)",
                                        logging.WARNING)
                            return None
                    else:
                        data = await stream.receive_some(_RECEIVE_SIZE)
                    if not data:
                        decoder.feed_eof()
                        self._close("peer closed the connection", logging.DEBUG)
                        return None
                    decoder.feed(data)
                    continue
                self.frames_received += 1
                if command.flag & FLAG_RESPONSE:
                    self._complete(command)
                    continue
                handler = self._handlers.get(command.code)
                if handler is None or self._handling >= self.limits.max_concurrent_requests:
                    await self._refuse(command, handler is None)
                    continue
                self._handling += 1
                if command.code in self._inline:
                    await self._handle(handler, command)
                elif decoder.buffered:
                    # More frames follow: this one gets a task of its own.
                    assert self._nursery is not None
                    self._nursery.start_soon(self._handle, handler, command)
                else:
                    # The last frame read: handled in this task, another worker reads on.
                    self._wake_worker()
                    return handler, command
        except FrameError as exc:
            self._close(str(exc), logging.WARNING)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self._close(f"receive failed: {describe_error(exc)}", logging.INFO)
        except RpcError as exc:
            # Writing an answer failed (the peer is gone, or reads nothing), or the
            # peer answered with a response over a limit.
            self._close(str(exc), logging.WARNING)
        return None

    async def _refuse_over_limit(self, refused: OverLimit) -> None:
        """A request over a decoding limit is answered SYSTEM_ERROR (as RocketMQ answers
        a request whose header it cannot decode); a response closes the connection."""
        self.frames_received += 1
        if refused.flag & FLAG_RESPONSE:
            raise RpcError(f"{self.peer} sent a response over a limit: {refused}")
        self.refused_over_limit += 1
        # The first refusal on a connection is worth a warning; a flood of them is not.
        log.log(logging.WARNING if self.refused_over_limit == 1 else logging.DEBUG,
                "%s: request refused: %s", self.peer, refused)
        if not refused.flag & FLAG_ONEWAY:
            await self._send(RemotingCommand.response(
                SYSTEM_ERROR, remark=f"request code {refused.code} refused: {refused.reason}"),
                trio.current_time() + self.limits.stall_timeout, opaque=refused.opaque,
                flag=FLAG_RESPONSE, serialize_type=refused.serialize_type)

    async def _refuse(self, request: RemotingCommand, unknown: bool) -> None:
        if unknown:
            log.debug("%s: request code %d not supported", self.peer, request.code)
            await self._answer(request, RemotingCommand.response(
                REQUEST_CODE_NOT_SUPPORTED, remark=f"request code {request.code} not supported"))
        else:
            await self._answer(request, RemotingCommand.response(
                SYSTEM_BUSY, remark=f"more than {self.limits.max_concurrent_requests} "
                                    "requests in progress on this connection"))

    async def _handle(self, handler: Handler, request: RemotingCommand) -> None:
        try:
            try:
                response = await handler(request, self)
            except Exception as exc:
                log.exception("%s: handler for request code %d raised", self.peer, request.code)
                # The exception's text may name server files: it stays in the log.
                response = _system_error(f"{type(exc).__name__} in the handler of request "
                                         f"code {request.code}; see the server's log")
            if response is None:
                response = RemotingCommand.response(SUCCESS)
            elif not isinstance(response, RemotingCommand):
                log.error("%s: handler for request code %d returned %r, not a RemotingCommand",
                          self.peer, request.code, response)
                response = _system_error(f"handler returned a {type(response).__name__}")
            try:
                if not request.flag & FLAG_ONEWAY:
                    await self._send(response, trio.current_time() + self.limits.stall_timeout,
                                     opaque=request.opaque, flag=response.flag | FLAG_RESPONSE,
                                     serialize_type=request.serialize_type)
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
        await self._send(response, trio.current_time() + self.limits.stall_timeout,
                         opaque=request.opaque, flag=response.flag | FLAG_RESPONSE,
                         serialize_type=request.serialize_type)
