"""What one client can hold of a retrieval server (``wire.Server``, under the replicas and the
front): open connections, idle keep-alive time, a request that arrives a little at a time; and
the front's kept-alive connections to replicas that close idle ones.

Real sockets on loopback, a trivial handler (no model).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import Iterator

import pytest

from rlinfra_node.retrieval import wire
from rlinfra_node.retrieval.front import Backends, Front
from rlinfra_node.retrieval.wire import LoopThread, Reply, Request, Server

GET = b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"


async def _ok(request: Request) -> Reply:
    return Reply(200, json.dumps({"path": request.path}).encode())


class CountingServer(Server):
    """A server that counts the connections it accepted."""

    accepted: int = 0

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        await super()._connection(reader, writer)


@contextlib.contextmanager
def serving(**limits: float) -> Iterator[tuple[CountingServer, LoopThread]]:
    thread = LoopThread("test-wire")
    server = CountingServer(_ok, "127.0.0.1", 0, 1 << 20, name="test", **limits)  # type: ignore[arg-type]
    thread.run(server.start(), timeout=10)
    try:
        yield server, thread
    finally:
        thread.run(server.close(), timeout=10)
        thread.stop()


def _read_all(sock: socket.socket) -> bytes:
    """Everything until the server closes (the test fails on the socket's timeout if it never
    does)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def _connect(port: int, timeout: float = 10) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)


def _wait_for(check: object, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.02)


def test_connections_past_the_cap_get_503_and_the_ones_held_are_served() -> None:
    with serving(max_connections=2) as (server, _):
        held = [_connect(server.port), _connect(server.port)]
        try:
            _wait_for(lambda: server.connections == 2)
            with _connect(server.port) as third:
                third.sendall(GET)
                answer = _read_all(third)
            assert _status(answer) == 503
            assert b"retry-after: 1" in answer.lower()
            body = json.loads(answer.split(b"\r\n\r\n", 1)[1])
            assert body["error"] == "test: too many connections (2 open); retry later"
            # The two it holds still get answers, on the same connections.
            for sock in held:
                sock.sendall(GET)
                assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        finally:
            held[0].close()
        # One left: a new connection is served again.
        _wait_for(lambda: server.connections == 1)
        with _connect(server.port) as again:
            again.sendall(GET)
            assert again.recv(65536).startswith(b"HTTP/1.1 200 ")
        held[1].close()


def test_an_idle_connection_is_closed_quietly() -> None:
    with serving(idle_timeout_s=0.3) as (server, _):
        with _connect(server.port) as fresh:  # never sends anything
            started = time.monotonic()
            assert _read_all(fresh) == b""  # closed, with no answer
            assert time.monotonic() - started < 5
        with _connect(server.port) as kept:
            kept.sendall(GET)
            assert kept.recv(65536).startswith(b"HTTP/1.1 200 ")
            time.sleep(0.1)
            kept.sendall(GET)  # used again within the timeout: still open
            assert kept.recv(65536).startswith(b"HTTP/1.1 200 ")
            assert _read_all(kept) == b""  # then idle: closed without a word
        _wait_for(lambda: server.connections == 0)


@pytest.mark.parametrize(
    "sent",
    [
        b"GET /healthz HTTP/1.1\r\nHost: t\r\n",  # the head never ends
        b"POST /retrieve HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n" + b"x" * 10,
    ],
    ids=["head", "body"],
)
def test_a_request_that_does_not_arrive_in_time_gets_408(sent: bytes) -> None:
    with serving(read_timeout_s=0.3, idle_timeout_s=60) as (server, _):
        with _connect(server.port) as slow:
            slow.sendall(sent)
            started = time.monotonic()
            answer = _read_all(slow)
            assert time.monotonic() - started < 5
        assert _status(answer) == 408
        assert b"the request did not arrive within 0.3 s" in answer


def test_the_connection_cap_follows_the_descriptor_limit() -> None:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert wire.connection_cap(10) == 10  # below the floor of 16: as asked
    if soft != resource.RLIM_INFINITY:
        assert wire.connection_cap(10**9) == max(16, (soft - 64) // 2)


def test_a_full_server_still_turns_away_a_peer_that_never_sends() -> None:
    with (
        serving(max_connections=1, read_timeout_s=0.3) as (server, _),
        _connect(server.port) as held,
    ):
        _wait_for(lambda: server.connections == 1)
        with _connect(server.port) as silent:
            started = time.monotonic()
            answer = _read_all(silent)
            assert time.monotonic() - started < 8
        # No head came within the read timeout: answered all the same, then closed.
        assert _status(answer) == 503
        held.sendall(GET)
        assert held.recv(65536).startswith(b"HTTP/1.1 200 ")


def test_the_front_does_not_reuse_a_connection_idle_past_its_limit() -> None:
    """A replica closes idle connections (here after 0.4 s); the front drops its own before
    that (here after 0.2 s), so a request after a pause opens a new connection, reaches the
    replica on the first try and never marks it down."""
    with serving(idle_timeout_s=0.4) as (replica, thread):
        backends = Backends()
        front = Front(backends, pool_idle_s=0.2)

        async def ask() -> int:
            backends.register("r1", f"http://127.0.0.1:{replica.port}")
            reply = await front(Request("GET", "/healthz", {}, b"", True))
            return reply.status

        assert thread.run(ask(), timeout=10) == 200
        assert thread.run(ask(), timeout=10) == 200  # at once: the kept connection
        assert replica.accepted == 1
        time.sleep(0.3)  # past the front's limit, within the replica's
        assert thread.run(ask(), timeout=10) == 200
        assert replica.accepted == 2  # a new connection, not the idle one

        async def state() -> tuple[bool, int]:
            backend = backends.choose(set())
            assert backend is not None
            return backend.down, len(backend.idle)

        assert thread.run(state(), timeout=10) == (False, 1)
        backends.close()
