"""HTTP/1.1 over asyncio streams: the little that the replicas and the front need, and no more.

Why not FastAPI and uvicorn: at one client, a request through FastAPI + uvicorn cost about
1.5 ms of CPU in this 2-core box before any search ran (routing, dependency checks, the
ASGI message dance, Starlette's JSONResponse), and the search itself costs a few ms; the routes
here are three fixed paths with JSON in and out. This module reads a request (``Content-Length``
or chunked body, ``Expect: 100-continue``, keep-alive as HTTP/1.0 and 1.1 define it), refuses a
body over the limit before reading it, and writes a response with ``Content-Length``; the front
also reads responses with it. A server bounds what clients can hold: connections served at
once (``MAX_CONNECTIONS``, then 503; sockets beyond twice that are dropped unread), idle
keep-alive time (``IDLE_TIMEOUT_S``), the time a started request may take to arrive
(``READ_TIMEOUT_S``, then 408) and the time an answer may take to be taken
(``WRITE_TIMEOUT_S``). One ``Server`` serves a ``Handler`` on a socket and knows how many
requests are in flight, so a replica can drain before it stops.

Everything here is transport: what a route answers lives in ``server`` (replicas) and ``front``
(the head's router).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, TypeVar

HEAD_LIMIT = 64 * 1024
JSON_TYPE = "application/json"
# Connections one server serves at once; more get 503 and are closed (each is a socket and a
# coroutine, and file descriptors run out before memory does). Clamped at start to half the
# process's descriptor limit: the front also opens connections to the replicas. Those turned
# away get TURN_AWAY_S to send their head; past twice the cap a socket is closed unread.
MAX_CONNECTIONS = 1024
TURN_AWAY_S = 2.0
# A kept-alive connection with no request for this long is closed, quietly (as idle HTTP/1.1
# connections are: clients open a new one). The front drops its own idle connections to the
# replicas sooner (front.POOL_IDLE_S), so it never sends on one a replica is closing.
IDLE_TIMEOUT_S = 75.0
# Once a request's first byte has arrived, its head and body must arrive within this (408 if
# not): a client that sends a little at a time cannot hold a connection open forever.
READ_TIMEOUT_S = 30.0
# An answer the client does not take within this (it stopped reading) ends the connection.
WRITE_TIMEOUT_S = 60.0
# At most one log line this often while connections are turned away.
FULL_LOG_PERIOD_S = 10.0
# Empty lines a client may send before a request (RFC 9112 2.2: servers should ignore them).
LEADING_EMPTY_LINES = 4
T = TypeVar("T")


class HttpError(Exception):
    """A request that cannot be read: answered with ``status`` and the connection closed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    keep_alive: bool


@dataclass
class Reply:
    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()
    content_type: str = JSON_TYPE


@dataclass
class Response:
    """A response as the front reads it from a replica."""

    status: int
    headers: dict[str, str]
    body: bytes
    keep_alive: bool


Handler = Callable[[Request], Awaitable[Reply]]


def json_bytes(data: Any) -> bytes:
    """JSON as Starlette's JSONResponse writes it, so both HTTP paths answer the same bytes."""
    return json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def networks(cidrs: Iterable[str]) -> tuple[ipaddress.IPv4Network, ...]:
    """``cidrs`` as networks (raises ``ValueError`` naming the first that is not one)."""
    out = []
    for cidr in cidrs:
        try:
            out.append(ipaddress.IPv4Network(cidr, strict=False))
        except ValueError as exc:
            raise ValueError(f"{cidr!r} is not an IPv4 address or CIDR block") from exc
    return tuple(out)


def error_reply(status: int, message: str, headers: tuple[tuple[str, str], ...] = ()) -> Reply:
    """The API's error shape: ``{"error": "...", "status": N}``."""
    return Reply(status, json_bytes({"error": message, "status": status}), headers)


def reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


def encode_response(reply: Reply, keep_alive: bool, head_only: bool = False) -> bytes:
    lines = [
        f"HTTP/1.1 {reply.status} {reason(reply.status)}",
        f"content-type: {reply.content_type}",
        f"content-length: {len(reply.body)}",
    ]
    lines += [f"{name}: {value}" for name, value in reply.headers]
    if not keep_alive:
        lines.append("connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if head_only else head + reply.body


def encode_request(method: str, path: str, body: bytes, host: str) -> bytes:
    head = (
        f"{method} {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: {JSON_TYPE}\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    )
    return head.encode("latin-1") + body


def _parse_head(head: bytes) -> tuple[str, dict[str, str]]:
    """The start line and the headers (names lower-cased, repeats joined with ', ')."""
    lines = head[:-4].decode("latin-1").split("\r\n")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise HttpError(400, f"malformed header line {line[:80]!r}")
        key = name.lower()
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return lines[0], headers


async def _read_head(reader: asyncio.StreamReader, first: bytes = b"") -> bytes | None:
    """The head up to its blank line (``first``: bytes of it already read); None when the
    connection ends before anything but white space."""
    try:
        return first + await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if (first + exc.partial).strip():
            raise HttpError(400, "the request head ended early") from None
        return None
    except asyncio.LimitOverrunError:
        raise HttpError(431, f"the request head is larger than {HEAD_LIMIT} bytes") from None


async def _read_line(reader: asyncio.StreamReader) -> bytes:
    try:
        return await reader.readuntil(b"\r\n")
    except asyncio.LimitOverrunError:
        raise HttpError(400, f"a chunk line is longer than {HEAD_LIMIT} bytes") from None


async def _read_chunked(reader: asyncio.StreamReader, limit: int) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while True:
        line = await _read_line(reader)
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise HttpError(400, "malformed chunk size") from None
        if size == 0:
            while await _read_line(reader) != b"\r\n":
                pass  # trailers: none of them matter here
            return b"".join(chunks)
        total += size
        if total > limit:
            raise HttpError(413, f"request body is larger than {limit} bytes")
        chunks.append(await reader.readexactly(size))
        if await reader.readexactly(2) != b"\r\n":
            raise HttpError(400, "malformed chunk")


async def read_request(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    max_body: int,
    idle_s: float | None = None,
    read_s: float | None = None,
) -> Request | None:
    """The next request on a connection; None when the client closed it between requests or
    sent nothing for ``idle_s``. Once its first byte is in, the rest must arrive within
    ``read_s`` (408 otherwise)."""
    first = b"\r"
    try:
        for _ in range(2 * LEADING_EMPTY_LINES + 1):
            first = await asyncio.wait_for(reader.read(1), idle_s)
            if first not in (b"\r", b"\n"):
                break
    except asyncio.TimeoutError:
        return None
    if not first:
        return None
    try:
        return await asyncio.wait_for(_read_rest(first, reader, writer, max_body), read_s)
    except asyncio.TimeoutError:
        raise HttpError(408, f"the request did not arrive within {read_s:g} s") from None


async def _read_rest(
    first: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, max_body: int
) -> Request | None:
    head = await _read_head(reader, first)
    if head is None:
        return None
    start, headers = _parse_head(head)
    parts = start.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HttpError(400, f"malformed request line {start[:80]!r}")
    method, target, version = parts
    connection = headers.get("connection", "").lower()
    # HTTP/1.1 keeps the connection unless told to close; 1.0 closes unless told to keep it.
    keep_alive = "close" not in connection if version != "HTTP/1.0" else "keep-alive" in connection
    encoding = headers.get("transfer-encoding", "").lower()
    length = headers.get("content-length")
    if encoding:
        if encoding != "chunked":
            raise HttpError(501, f"transfer-encoding {encoding!r} is not supported")
        _continue(writer, headers)
        body = await _read_chunked(reader, max_body)
    elif length is not None:
        if not length.isdigit():
            raise HttpError(400, f"malformed content-length {length[:40]!r}")
        if int(length) > max_body:
            raise HttpError(413, f"request body is larger than {max_body} bytes")
        _continue(writer, headers)
        body = await reader.readexactly(int(length))
    else:
        body = b""
    return Request(method, target.split("?", 1)[0], headers, body, keep_alive)


def _continue(writer: asyncio.StreamWriter, headers: dict[str, str]) -> None:
    if headers.get("expect", "").lower() == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")


async def read_response(reader: asyncio.StreamReader, limit: int = 1 << 30) -> Response:
    """A response from a replica (raises ``OSError``, ``IncompleteReadError`` or ``HttpError`` on
    a closed, broken or garbled connection: whatever the replica sends, the front routes on)."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise ConnectionError(f"a response head larger than {HEAD_LIMIT} bytes") from None
    start, headers = _parse_head(head)
    parts = start.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ConnectionError(f"malformed status line {start[:80]!r}")
    keep_alive = "close" not in headers.get("connection", "").lower()
    length = headers.get("content-length")
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = await _read_chunked(reader, limit)
    elif length is not None:
        if not length.isdigit() or int(length) > limit:
            raise ConnectionError(f"bad content-length {length[:40]!r} in a response")
        body = await reader.readexactly(int(length))
    else:
        body = await reader.read()
        keep_alive = False
    return Response(int(parts[1]), headers, body, keep_alive)


def connection_cap(wanted: int, reserve: int = 64) -> int:
    """``wanted``, or less where the process may not open that many descriptors: at most half
    the soft RLIMIT_NOFILE (less ``reserve`` for files, the index and upstream sockets)."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return wanted
    if soft == resource.RLIM_INFINITY:
        return wanted
    return min(wanted, max(16, (soft - reserve) // 2))


@dataclass
class Server:
    """``handler`` on ``host:port`` (port 0: any free one), keep-alive, with an in-flight count
    and bounds on what clients hold (see the module's docstring)."""

    handler: Handler
    host: str
    port: int
    max_body: int
    name: str = "retrieval"
    in_flight: int = 0
    # Set by close(): answers from then on close their connection, so a kept-alive client
    # neither sends more requests during the drain nor loses one sent as the socket closes.
    closing: bool = False
    # Who may ask (None: whoever reaches the socket). A peer outside these networks and not on
    # loopback gets 403 naming its address, as this server sees it, and the connection closes.
    allow: tuple[ipaddress.IPv4Network, ...] | None = None
    max_connections: int = MAX_CONNECTIONS
    idle_timeout_s: float = IDLE_TIMEOUT_S
    read_timeout_s: float = READ_TIMEOUT_S
    write_timeout_s: float = WRITE_TIMEOUT_S
    turn_away_s: float = TURN_AWAY_S
    # Connections being served (those turned away, full or refused, are not counted).
    served: int = 0
    _server: asyncio.Server | None = None
    _connections: set[asyncio.StreamWriter] = field(default_factory=set)
    _idle: asyncio.Event | None = None
    _full_logged: float = float("-inf")

    def refused(self, peer: str) -> str | None:
        """Why ``peer`` may not ask (None: it may)."""
        if self.allow is None:
            return None
        try:
            address = ipaddress.ip_address(peer)
        except ValueError:
            return f"{peer} is not an IP address"
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if address.is_loopback or any(address in net for net in self.allow):
            return None
        return (
            f"{address} may not use this service: list it (or its network) in "
            "serving.retrieval.clients of the service's profile and run `rlinfra up` again"
        )

    async def start(self) -> tuple[str, int]:
        self._idle = asyncio.Event()
        self._idle.set()
        self.max_connections = connection_cap(self.max_connections)
        self._server = await asyncio.start_server(
            self._connection, self.host, self.port, limit=HEAD_LIMIT, backlog=2048
        )
        sockname = self._server.sockets[0].getsockname()
        self.port = int(sockname[1])
        return str(sockname[0]), self.port

    @property
    def serving(self) -> bool:
        return self._server is not None and self._server.is_serving()

    @property
    def connections(self) -> int:
        """Sockets open now, those being turned away included."""
        return len(self._connections)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._connections) >= 2 * self.max_connections:
            writer.transport.abort()  # a flood: not even a 503 for this one
            return
        peer = writer.get_extra_info("peername")
        refused = self.refused(str(peer[0])) if peer else self.refused("unknown")
        full = self.served >= self.max_connections
        counted = refused is None and not full  # only connections served take a place
        self._connections.add(writer)
        if counted:
            self.served += 1
        try:
            if refused is not None:
                await self._turn_away(reader, writer, error_reply(403, refused))
                return
            if full:
                message = (
                    f"{self.name}: at its limit of {self.max_connections} connections; retry later"
                )
                now = time.monotonic()
                if now - self._full_logged >= FULL_LOG_PERIOD_S:
                    self._full_logged = now
                    log(f"{message} (new connections get 503 while it lasts)")
                await self._turn_away(
                    reader, writer, error_reply(503, message, (("retry-after", "1"),))
                )
                return
            while True:
                try:
                    request = await read_request(
                        reader, writer, self.max_body, self.idle_timeout_s, self.read_timeout_s
                    )
                except HttpError as exc:
                    writer.write(encode_response(error_reply(exc.status, exc.message), False))
                    await _close_after_error(reader, writer)
                    return
                if request is None:
                    return
                self._enter()
                try:
                    reply = await self._answer(request)
                    keep_alive = request.keep_alive and not self.closing
                    head_only = request.method == "HEAD"
                    writer.write(encode_response(reply, keep_alive, head_only))
                    try:
                        await asyncio.wait_for(writer.drain(), self.write_timeout_s)
                    except asyncio.TimeoutError:
                        log(f"{self.name}: a client took no answer in {self.write_timeout_s:g} s")
                        writer.transport.abort()
                        return
                finally:
                    self._leave()
                if not keep_alive:
                    return
        except (ConnectionError, asyncio.IncompleteReadError, OSError):
            return
        finally:
            if counted:
                self.served -= 1
            self._connections.discard(writer)
            writer.close()

    async def _turn_away(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, reply: Reply
    ) -> None:
        """Answer ``reply`` on the request head, its body never read into memory (what the
        client still sends is discarded for a few seconds, then the socket closes)."""
        try:
            head = await asyncio.wait_for(_read_head(reader), self.turn_away_s)
        except (HttpError, asyncio.TimeoutError):
            head = b""
        if head is not None:
            writer.write(encode_response(reply, False))
            await _close_after_error(reader, writer, self.turn_away_s)

    async def _answer(self, request: Request) -> Reply:
        try:
            return await self.handler(request)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must cost one request, not the connection's loop
            log(f"{self.name}: {request.method} {request.path} failed: {exc!r}")
            return error_reply(500, f"internal error: {exc.__class__.__name__}")

    def _enter(self) -> None:
        self.in_flight += 1
        assert self._idle is not None
        self._idle.clear()

    def _leave(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0 and self._idle is not None:
            self._idle.set()

    async def close(self, drain_s: float = 0.0) -> None:
        """Stop accepting, let requests in flight finish (at most ``drain_s``), then close."""
        self.closing = True
        if self._server is not None:
            self._server.close()
        if drain_s > 0 and self._idle is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._idle.wait(), drain_s)
        for writer in list(self._connections):
            writer.close()
        if self._server is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)


async def _close_after_error(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, within_s: float = 5.0
) -> None:
    """Half-close, then read what the client still sends (for at most ``within_s``): closing a
    socket with unread data resets the connection, and the client would lose the answer (a 413
    before the body)."""
    with contextlib.suppress(ConnectionError, OSError, asyncio.TimeoutError, RuntimeError):
        await asyncio.wait_for(writer.drain(), within_s)
        if writer.can_write_eof():
            writer.write_eof()

        async def discard() -> None:
            while await reader.read(1 << 16):
                pass

        await asyncio.wait_for(discard(), within_s)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop where it is installed (Ray Serve brings it), else asyncio's own loop."""
    try:
        import uvloop

        loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        return loop
    except ImportError:
        return asyncio.new_event_loop()


class LoopThread:
    """An event loop of its own in a daemon thread: servers keep running whatever the caller's
    own loop (Serve's replica loop, a test's thread) is doing."""

    def __init__(self, name: str) -> None:
        self.loop = new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and self.loop.is_running()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop from another thread and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def run_async(self, coro: Coroutine[Any, Any, T]) -> T:
        """The same from a coroutine on another loop."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def join(self) -> None:
        self._thread.join()

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)


def log(message: str) -> None:
    print(f"[retrieval] {message}", file=sys.stderr, flush=True)
