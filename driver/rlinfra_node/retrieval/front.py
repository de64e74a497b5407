"""The front: the service's one endpoint on the head, spreading requests over the replicas' ports.

Each replica serves the API on a port of its own node (``server``) and tells the front where,
every ``REGISTER_PERIOD_S`` (``serve_app`` does the telling, through a Serve handle). The front
is a small asyncio proxy, about 0.3 ms of CPU a request, where Serve's HTTP proxy path cost about
9 ms of latency (bench/results/retrieval.md):

- Routing: the replica with the fewest requests in flight from this front (ties in turn), over
  kept-alive connections; one unused for ``POOL_IDLE_S`` is closed (checked each second and
  before each reuse), never reused. Requests are forwarded whole (body read first,
  ``Content-Length`` on both legs); a HEAD is asked as a GET and answered without the body.
- A replica that cannot be reached (refused, reset, closed before answering) is taken out at
  once and the request goes to the next one; /retrieve only reads, so a retry is safe. It comes
  back when it registers again (a live replica does so within ``REGISTER_PERIOD_S``); one that
  stops registering is forgotten after ``stale_s``. One that left (``deregister``, as a replica
  does when Serve stops it) stays out: a registration it sent just before arrives late. A
  kept-alive connection that fails is retried once on a new connection to the same replica
  before the replica is taken out.
- A replica that answers 503 (its queue is full) passes the request to the next one; when every
  replica is full, the client gets the 503 (with ``Retry-After``). One that does not answer
  within ``request_timeout_s`` gives the client 504 and is not retried (it may still be working).
- No replica: 503 ``{"error": "no retrieval replica is ready ...", "status": 503}``.

When the service serves other clusters (``allow``: their networks and this cluster's own
nodes), a client from anywhere else, loopback aside, gets 403 naming its address as the front
sees it (what to list in ``serving.retrieval.clients``).

``GET /healthz`` answers as a replica does, plus the header ``x-rlinfra-replicas`` (how many
replicas the front routes to), which ``serve_app.deploy`` waits on.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from rlinfra_node.retrieval.wire import (
    HEAD_LIMIT,
    HttpError,
    LoopThread,
    Reply,
    Request,
    Response,
    Server,
    encode_request,
    error_reply,
    log,
    networks,
    read_response,
)

REGISTER_PERIOD_S = 2.0
STALE_S = 10.0
REPLICAS_HEADER = "x-rlinfra-replicas"
IDLE_CONNECTIONS = 64
# A kept-alive connection to a replica unused for this long is closed rather than reused: well
# under the replicas' own idle timeout (wire.IDLE_TIMEOUT_S), so the front does not send on a
# connection the replica is closing.
POOL_IDLE_S = 30.0
# Replicas that left, remembered so that a late registration does not bring one back (Serve gives
# each replica an id of its own: one that left never registers again on purpose).
LEFT_REMEMBERED = 4096
# Headers a replica's answer carries that the client should see.
PASSED_HEADERS = ("retry-after", "allow")

Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class ReplicaTimeout(Exception):
    """A replica took the request but gave no answer in time (it may still be working)."""


@dataclass
class Backend:
    """A replica as the front knows it."""

    replica_id: str
    host: str
    port: int
    seen: float
    outstanding: int = 0
    down: bool = False
    # Kept-alive connections and when each was last used, oldest first.
    idle: list[tuple[Connection, float]] = field(default_factory=list)

    def take_idle(self, now: float, max_idle_s: float) -> Connection | None:
        """The most recently used kept-alive connection; those idle longer than ``max_idle_s``
        are closed first (the oldest are at the front of the list)."""
        self.prune(now, max_idle_s)
        return self.idle.pop()[0] if self.idle else None

    def prune(self, now: float, max_idle_s: float) -> None:
        """Close the kept-alive connections idle longer than ``max_idle_s``."""
        stale = 0
        while stale < len(self.idle) and now - self.idle[stale][1] > max_idle_s:
            self.idle[stale][0][1].close()
            stale += 1
        del self.idle[:stale]

    def close(self) -> None:
        for (_, writer), _ in self.idle:
            writer.close()
        self.idle.clear()


class Backends:
    """The replicas the front may route to. Use on the front's loop only."""

    def __init__(self, stale_s: float = STALE_S) -> None:
        self.stale_s = stale_s
        self._by_id: dict[str, Backend] = {}
        self._left: dict[str, None] = {}
        self._turn = 0

    def register(self, replica_id: str, url: str, now: float | None = None) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ValueError(f"replica {replica_id}: {url!r} is not http://HOST:PORT")
        if replica_id in self._left:
            return
        now = time.monotonic() if now is None else now
        known = self._by_id.get(replica_id)
        if known is not None and (known.host, known.port) == (parts.hostname, parts.port):
            known.seen = now
            if known.down:
                log(f"front: replica {replica_id} at {url} is back")
            known.down = False
            return
        if known is not None:
            known.close()
        self._by_id[replica_id] = Backend(replica_id, parts.hostname, parts.port, now)
        log(f"front: routing to replica {replica_id} at {url}")

    def deregister(self, replica_id: str) -> None:
        """The replica left: forget it, and ignore its registrations from now on."""
        self._left[replica_id] = None
        while len(self._left) > LEFT_REMEMBERED:
            del self._left[next(iter(self._left))]
        if self._forget(replica_id):
            log(f"front: replica {replica_id} left")

    def _forget(self, replica_id: str) -> bool:
        backend = self._by_id.pop(replica_id, None)
        if backend is not None:
            backend.close()
        return backend is not None

    def mark_down(self, backend: Backend, why: str) -> None:
        if not backend.down:
            log(f"front: replica {backend.replica_id} unreachable ({why}); routing around it")
        backend.down = True
        backend.close()

    def expire(self, now: float | None = None, pool_idle_s: float = POOL_IDLE_S) -> None:
        """Forget replicas that stopped registering; close kept-alive connections idle longer
        than ``pool_idle_s``."""
        now = time.monotonic() if now is None else now
        for backend in list(self._by_id.values()):
            if now - backend.seen > self.stale_s:
                log(f"front: replica {backend.replica_id} stopped registering; forgotten")
                self._forget(backend.replica_id)  # it may register again: it did not leave
            else:
                backend.prune(now, pool_idle_s)

    def usable(self, now: float | None = None) -> list[Backend]:
        now = time.monotonic() if now is None else now
        return [b for b in self._by_id.values() if not b.down and now - b.seen <= self.stale_s]

    def choose(self, exclude: set[str]) -> Backend | None:
        """The usable replica with the fewest requests in flight; ties go round in turn."""
        candidates = [b for b in self.usable() if b.replica_id not in exclude]
        if not candidates:
            return None
        self._turn += 1
        least = min(b.outstanding for b in candidates)
        tied = [b for b in candidates if b.outstanding == least]
        return tied[self._turn % len(tied)]

    def close(self) -> None:
        for backend in self._by_id.values():
            backend.close()
        self._by_id.clear()


@dataclass
class Front:
    """The front's handler: forwards each request to a replica (see the module's docstring)."""

    backends: Backends
    connect_timeout_s: float = 2.0
    request_timeout_s: float = 120.0
    pool_idle_s: float = POOL_IDLE_S

    async def __call__(self, request: Request) -> Reply:
        method = "GET" if request.method == "HEAD" else request.method
        payload = encode_request(method, request.path, request.body, "rlinfra-retrieval")
        tried: set[str] = set()
        busy: Response | None = None
        while (backend := self.backends.choose(tried)) is not None:
            tried.add(backend.replica_id)
            try:
                response = await self._exchange(backend, payload)
            except ReplicaTimeout:
                return error_reply(
                    504,
                    f"replica {backend.replica_id} did not answer within "
                    f"{self.request_timeout_s:.0f} s",
                )
            except (OSError, asyncio.IncompleteReadError, HttpError) as exc:
                self.backends.mark_down(backend, exc.__class__.__name__)
                continue
            if response.status == 503:
                busy = response
                continue
            return self._reply(request, response)
        if busy is not None:
            return self._reply(request, busy)
        headers: tuple[tuple[str, str], ...] = (("retry-after", "1"),)
        if request.path == "/healthz":
            headers += ((REPLICAS_HEADER, "0"),)
        return error_reply(503, "no retrieval replica is ready; retry later", headers)

    def _reply(self, request: Request, response: Response) -> Reply:
        headers = [
            (name, response.headers[name]) for name in PASSED_HEADERS if name in response.headers
        ]
        if request.path == "/healthz":
            headers.append((REPLICAS_HEADER, str(len(self.backends.usable()))))
        content_type = response.headers.get("content-type", "application/json")
        return Reply(response.status, response.body, tuple(headers), content_type)

    async def _exchange(self, backend: Backend, payload: bytes) -> Response:
        backend.outstanding += 1
        try:
            kept = backend.take_idle(time.monotonic(), self.pool_idle_s)
            if kept is not None:
                try:
                    return await self._send(backend, kept, payload)
                except (OSError, asyncio.IncompleteReadError):
                    pass  # the replica closed a kept-alive connection: try a new one
            try:
                connection = await asyncio.wait_for(
                    asyncio.open_connection(backend.host, backend.port, limit=HEAD_LIMIT),
                    self.connect_timeout_s,
                )
            except asyncio.TimeoutError:
                raise ConnectionError(f"no connection in {self.connect_timeout_s} s") from None
            return await self._send(backend, connection, payload)
        finally:
            backend.outstanding -= 1

    async def _send(self, backend: Backend, connection: Connection, payload: bytes) -> Response:
        reader, writer = connection
        try:
            writer.write(payload)
            await writer.drain()
            response = await asyncio.wait_for(read_response(reader), self.request_timeout_s)
        except asyncio.TimeoutError:
            writer.close()
            raise ReplicaTimeout() from None
        except BaseException:
            writer.close()
            raise
        if response.keep_alive and not backend.down and len(backend.idle) < IDLE_CONNECTIONS:
            backend.idle.append((connection, time.monotonic()))
        else:
            writer.close()
        return response


class FrontServer:
    """The front on ``host:port`` on a loop thread of its own; replicas register from any thread."""

    def __init__(
        self,
        host: str,
        port: int,
        max_body: int,
        stale_s: float = STALE_S,
        request_timeout_s: float = 120.0,
        allow: tuple[str, ...] | None = None,
    ) -> None:
        self._thread = LoopThread("retrieval-front")
        self.backends = Backends(stale_s)
        self._handler = Front(self.backends, request_timeout_s=request_timeout_s)
        self._server = Server(
            self._handler,
            host,
            port,
            max_body,
            name="front",
            allow=None if allow is None else networks(allow),
        )
        self._expiry: asyncio.Task[None] | None = None
        self.host, self.port = self._thread.run(self._start(), timeout=30)

    async def _start(self) -> tuple[str, int]:
        address = await self._server.start()
        self._expiry = asyncio.get_running_loop().create_task(self._expire())
        return address

    async def _expire(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self.backends.expire(pool_idle_s=self._handler.pool_idle_s)

    def register(self, replica_id: str, url: str) -> None:
        """From any thread: the replica ``replica_id`` serves at ``url``."""
        self._thread.loop.call_soon_threadsafe(self.backends.register, replica_id, url)

    def deregister(self, replica_id: str) -> None:
        self._thread.loop.call_soon_threadsafe(self.backends.deregister, replica_id)

    def replicas(self) -> int:
        async def count() -> int:
            return len(self.backends.usable())

        return self._thread.run(count(), timeout=10)

    @property
    def healthy(self) -> bool:
        expiry = self._expiry
        return self._thread.alive and self._server.serving and bool(expiry and not expiry.done())

    def close(self, drain_s: float = 0.0) -> None:
        self._thread.run(self._close(drain_s), timeout=drain_s + 10)
        self._thread.stop()

    async def close_async(self, drain_s: float) -> None:
        await self._thread.run_async(self._close(drain_s))
        self._thread.stop()

    async def _close(self, drain_s: float) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._expiry
        await self._server.close(drain_s)
        self.backends.close()
