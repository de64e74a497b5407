"""What one client can hold of a retrieval server (``wire.Server``, under the replicas and the
front): connections, idle keep-alive time, a request that arrives a little at a time, an answer
it does not read; requests a server must still take (pipelined, after empty lines); and the
front's kept-alive connections to replicas, which close idle ones.

Real sockets on loopback, a trivial handler (no model).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from helpers.emulators import own_address
from rlinfra_node.retrieval import wire
from rlinfra_node.retrieval.front import Backends, Front
from rlinfra_node.retrieval.wire import LoopThread, Reply, Request, Server

GET = b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"


BIG = 32 << 20  # an answer larger than any socket buffer


async def _ok(request: Request) -> Reply:
    if request.path == "/big":
        return Reply(200, b"x" * BIG, content_type="text/plain")
    return Reply(200, json.dumps({"path": request.path}).encode())


class CountingServer(Server):
    """A server that counts the connections it accepted."""

    accepted: int = 0

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        await super()._connection(reader, writer)


@contextlib.contextmanager
def serving(host: str = "127.0.0.1", **limits: Any) -> Iterator[tuple[CountingServer, LoopThread]]:
    thread = LoopThread("test-wire")
    server = CountingServer(_ok, host, 0, 1 << 20, name="test", **limits)
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


def _ok_answer(sock: socket.socket) -> bool:
    return sock.recv(65536).startswith(b"HTTP/1.1 200 ")


def test_connections_past_the_cap_get_503_and_the_ones_held_are_served() -> None:
    with serving(max_connections=2) as (server, _):
        held = [_connect(server.port), _connect(server.port)]
        try:
            _wait_for(lambda: server.served == 2)
            with _connect(server.port) as third:
                third.sendall(GET)
                answer = _read_all(third)
            assert _status(answer) == 503
            assert b"retry-after: 1" in answer.lower()
            body = json.loads(answer.split(b"\r\n\r\n", 1)[1])
            assert body["error"] == "test: at its limit of 2 connections; retry later"
            # The two it holds still get answers, on the same connections.
            for sock in held:
                sock.sendall(GET)
                assert _ok_answer(sock)
        finally:
            held[0].close()
        # One left: a new connection is served again.
        _wait_for(lambda: server.served == 1)
        with _connect(server.port) as again:
            again.sendall(GET)
            assert _ok_answer(again)
        held[1].close()


def test_sockets_being_turned_away_do_not_keep_the_server_full() -> None:
    """Silent sockets over the cap linger (here up to 5 s) without taking a place: once the
    held connections close, a new one is served at once; past twice the cap a socket is
    dropped unread."""
    with serving(max_connections=2, turn_away_s=5) as (server, _):
        held = [_connect(server.port), _connect(server.port)]
        _wait_for(lambda: server.served == 2)
        lingering = [_connect(server.port) for _ in range(2)]
        _wait_for(lambda: server.connections == 4)
        # The fifth socket: twice the cap is reached. Reset, or closed without a word.
        with _connect(server.port) as flood, contextlib.suppress(ConnectionResetError):
            assert flood.recv(65536) == b""
        assert server.connections == 4
        for sock in held:
            sock.close()
        _wait_for(lambda: server.served == 0)
        assert server.connections == 2  # the silent ones still wait for their head
        with _connect(server.port) as fresh:
            fresh.sendall(GET)
            assert _ok_answer(fresh)
        for sock in lingering:
            sock.close()


def test_a_refused_peer_does_not_take_a_place() -> None:
    address = own_address()  # a real peer outside the allow list below
    allow = wire.networks(["10.77.0.0/16"])
    with (
        serving("0.0.0.0", max_connections=1, turn_away_s=5, allow=allow) as (server, _),
        socket.create_connection((address, server.port), timeout=10) as refused,
    ):
        _wait_for(lambda: server.connections == 1)
        assert server.served == 0  # silent, waiting for its head to be refused
        with _connect(server.port) as loopback:  # loopback may ask: the one place is free
            loopback.sendall(GET)
            assert _ok_answer(loopback)
        refused.sendall(GET)
        assert _status(_read_all(refused)) == 403


def test_an_idle_connection_is_closed_quietly() -> None:
    with serving(idle_timeout_s=1.5) as (server, _):
        with _connect(server.port) as fresh:  # never sends anything
            started = time.monotonic()
            assert _read_all(fresh) == b""  # closed, with no answer
            assert time.monotonic() - started < 10
        with _connect(server.port) as kept:
            kept.sendall(GET)
            assert _ok_answer(kept)
            time.sleep(0.1)
            kept.sendall(GET)  # used again within the timeout: still open
            assert _ok_answer(kept)
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
    with (
        serving(read_timeout_s=0.3, idle_timeout_s=60) as (server, _),
        _connect(server.port) as slow,
    ):
        slow.sendall(sent)
        started = time.monotonic()
        answer = _read_all(slow)
        assert time.monotonic() - started < 10
        assert _status(answer) == 408
        assert b"the request did not arrive within 0.3 s" in answer


def test_pipelined_requests_and_leading_empty_lines_are_answered() -> None:
    with serving() as (server, _), _connect(server.port) as sock:
        sock.sendall(b"\r\n\r\n" + GET + GET.replace(b"/healthz", b"/second"))
        data = b""
        while data.count(b"HTTP/1.1 200 ") < 2:
            chunk = sock.recv(65536)
            assert chunk, data
            data += chunk
        assert data.index(b'"/healthz"') < data.index(b'"/second"')


def test_a_client_that_stops_reading_its_answer_is_dropped() -> None:
    with serving(write_timeout_s=0.5) as (server, _), _connect(server.port) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(b"GET /big HTTP/1.1\r\nHost: t\r\n\r\n")  # and never reads
        _wait_for(lambda: server.in_flight == 1)
        _wait_for(lambda: server.in_flight == 0 and server.connections == 0, within=10)


def test_the_connection_cap_follows_the_descriptor_limit() -> None:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert wire.connection_cap(10) == 10  # below the floor of 16: as asked
    if soft == resource.RLIM_INFINITY:
        return
    assert wire.connection_cap(10**9) == max(16, (soft - 64) // 2)
    with serving(max_connections=10**9) as (server, _):  # what start() applies
        assert server.max_connections == max(16, (soft - 64) // 2)


def test_a_full_server_still_turns_away_a_peer_that_never_sends() -> None:
    with (
        serving(max_connections=1, turn_away_s=0.3) as (server, _),
        _connect(server.port) as held,
    ):
        _wait_for(lambda: server.served == 1)
        with _connect(server.port) as silent:
            started = time.monotonic()
            answer = _read_all(silent)
            assert time.monotonic() - started < 8
        # No head came in time: answered all the same, then closed.
        assert _status(answer) == 503
        held.sendall(GET)
        assert _ok_answer(held)


def test_the_front_does_not_reuse_a_connection_idle_past_its_limit() -> None:
    """A replica closes idle connections (here after 5 s); the front closes its own sooner
    (here after 1 s), so a request after a pause opens a new connection and reaches the
    replica on the first try, and the old socket is gone from the replica too."""
    with serving(idle_timeout_s=5) as (replica, thread):
        backends = Backends()
        front = Front(backends, pool_idle_s=1.0)

        async def ask() -> int:
            backends.register("r1", f"http://127.0.0.1:{replica.port}")
            reply = await front(Request("GET", "/healthz", {}, b"", True))
            return reply.status

        async def state() -> tuple[bool, int]:
            backend = backends.choose(set())
            assert backend is not None
            return backend.down, len(backend.idle)

        async def expire(after_s: float) -> None:
            backends.expire(time.monotonic() + after_s, pool_idle_s=1.0)

        try:
            assert thread.run(ask(), timeout=10) == 200
            assert thread.run(ask(), timeout=10) == 200  # at once: the kept connection
            assert replica.accepted == 1
            time.sleep(1.5)  # past the front's limit, well within the replica's
            assert thread.run(ask(), timeout=10) == 200
            assert replica.accepted == 2  # a new connection, not the idle one
            _wait_for(lambda: replica.connections == 1)  # the front closed the old one
            assert thread.run(state(), timeout=10) == (False, 1)
            # The front's periodic sweep closes idle ones without waiting for a request.
            thread.run(expire(2.0), timeout=10)
            assert thread.run(state(), timeout=10) == (False, 0)
            _wait_for(lambda: replica.connections == 0)
        finally:

            async def close() -> None:
                backends.close()

            thread.run(close(), timeout=10)
