"""Two clusters, one retriever: the front's allow list, the reach check run from a client
cluster's head, and the search tool's probe when the service refuses it.

Real sockets on this machine: loopback and its own non-loopback address (a connection to it
arrives from it), so both an allowed and a refused peer are real peers here. Across hosts and
clusters: tests/e2e/test_ssh_cloud.py.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest

from helpers.emulators import own_address
from rlinfra.errors import OperationError
from rlinfra.ops import reach
from rlinfra.record import Host
from rlinfra_node import search_tool
from rlinfra_node.retrieval import serve_app
from rlinfra_node.retrieval.front import FrontServer
from rlinfra_node.retrieval.settings import Settings
from rlinfra_node.retrieval.wire import Server, networks


@pytest.fixture
def front() -> Iterator[FrontServer]:
    """A front on every interface that lets in 10.77.0.0/16 (not this machine) and loopback."""
    server = FrontServer("0.0.0.0", 0, 1 << 20, allow=("10.77.0.0/16",))
    try:
        yield server
    finally:
        server.close()


def _get(host: str, port: int, path: str = "/healthz") -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=10) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_the_front_refuses_a_peer_outside_its_allow_list_naming_its_address(
    front: FrontServer,
) -> None:
    address = own_address()
    status, body = _get(address, front.port)
    assert status == 403
    assert body["status"] == 403
    message = str(body["error"])
    assert message.startswith(f"{address} may not use this service")
    assert "serving.retrieval.clients" in message
    # Loopback always may: no replica yet, so the front itself answers 503, not 403.
    assert _get("127.0.0.1", front.port)[0] == 503


def test_a_refused_peer_gets_403_on_the_head_before_its_body_is_read(
    front: FrontServer,
) -> None:
    """The head says 64 MiB are coming (above the front's limit, so it would be a 413 if read);
    none is sent, and the 403 still arrives: the refusal does not wait for the body."""
    address = own_address()
    with socket.create_connection((address, front.port), timeout=10) as sock:
        sock.sendall(
            b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 67108864\r\n\r\n"
        )
        answer = sock.makefile("rb").read()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 403 "), head
    assert json.loads(body)["error"].startswith(f"{address} may not use this service")


def test_an_allowed_network_gets_through() -> None:
    address = own_address()
    server = FrontServer("0.0.0.0", 0, 1 << 20, allow=(f"{address}/32",))
    try:
        assert _get(address, server.port)[0] == 503
    finally:
        server.close()


def test_without_an_allow_list_everyone_who_reaches_it_may_ask() -> None:
    server = Server(handler=None, host="0.0.0.0", port=0, max_body=1)  # type: ignore[arg-type]
    assert server.refused("203.0.113.5") is None
    listed = Server(
        handler=None,  # type: ignore[arg-type]
        host="0.0.0.0",
        port=0,
        max_body=1,
        allow=networks(["203.0.113.0/28", "10.0.0.7"]),
    )
    assert listed.refused("203.0.113.14") is None
    assert listed.refused("10.0.0.7") is None
    assert listed.refused("::ffff:10.0.0.7") is None
    assert listed.refused("127.0.0.1") is None and listed.refused("::1") is None
    assert str(listed.refused("203.0.113.16")).startswith("203.0.113.16 may not use")
    assert str(listed.refused("10.0.0.8")).startswith("10.0.0.8 may not use")
    with pytest.raises(ValueError, match="'10.0.0.300' is not an IPv4 address or CIDR block"):
        networks(["10.0.0.300"])


def test_the_serve_config_carries_the_allow_list_only_when_set(tmp_path: object) -> None:
    settings = Settings(data_dir="/checkpoints/retrieval/x")
    plain = serve_app.serve_config(settings, serve_app.Deployment())
    listed = serve_app.serve_config(
        settings, serve_app.Deployment(host="0.0.0.0", allow=("10.1.0.0/16", "10.2.3.4/32"))
    )
    assert "allow" not in plain["applications"][1]["args"]
    assert "allow" not in plain["applications"][0]["args"]
    # The replicas apply the same list (their ports are on the nodes' network too).
    assert listed["applications"][0]["args"]["allow"] == ["10.1.0.0/16", "10.2.3.4/32"]
    front_args = listed["applications"][1]["args"]
    assert front_args["allow"] == ["10.1.0.0/16", "10.2.3.4/32"]
    assert front_args["host"] == "0.0.0.0"
    with pytest.raises(ValueError, match="allow needs the front router"):
        serve_app.Deployment(router="serve-proxy", allow=("10.1.0.0/16",))
    with pytest.raises(ValueError, match="retrieval deployment: allow: 'x' is not"):
        serve_app.Deployment(allow=("x",))


def test_deploy_prints_the_front_with_its_allow_list_and_refuses_a_bad_one() -> None:
    argv = [
        sys.executable,
        "-m",
        "rlinfra_node.retrieval",
        "deploy",
        "--data-dir",
        "/checkpoints/retrieval/x",
        "--host",
        "0.0.0.0",
        "--allow=10.1.0.0/16",
        "--allow=10.9.9.9/32",
        "--print-config",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    config = json.loads(done.stdout)
    assert config["applications"][1]["args"]["allow"] == ["10.1.0.0/16", "10.9.9.9/32"]
    bad = subprocess.run(
        [*argv[:-2], "--allow=10.1.0.0/99", "--print-config"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2
    assert bad.stderr.strip().startswith("Error: retrieval deployment: allow: '10.1.0.0/99'")


def _check(port: int, *addresses: str) -> list[reach.Attempt]:
    """The reach check's script, run here as it runs on a client's head."""
    done = subprocess.run(
        ["python3", "-", str(port), *addresses],
        input=reach.CHECK_SCRIPT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return [reach.Attempt(**row) for row in json.loads(done.stdout)]


HEAD = Host("t0", 0, "198.51.100.20", "10.5.0.20", "eth0", "root")


@contextlib.contextmanager
def _standing_replica() -> Iterator[str]:
    """A plain HTTP server that answers every GET 200 (what the front asks of a replica)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b'{"status": "ok"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_reach_check_reports_refusal_answer_and_closed_port(front: FrontServer) -> None:
    address = own_address()
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        closed_port = closed.getsockname()[1]
    refused, empty = _check(front.port, address, "127.0.0.1")
    assert refused.status == 403 and refused.source == address
    assert "may not use this service" in refused.describe()
    # The front answers loopback, but routes to no replica yet: not a usable retriever.
    assert empty.status == 503 and empty.replicas == 0
    assert not empty.usable(front=True) and not empty.usable(front=False)
    assert "routes to no replica yet" in empty.describe(front=True)
    with pytest.raises(OperationError) as caught:
        reach.choose("retr", "trainer", HEAD, front.port, [refused, empty], front=True)
    assert f"{address}: refused (403): {address} may not use this service" in str(caught.value)
    assert "rlinfra up --cluster retr" in str(caught.value.hint)
    # With a replica registered (an HTTP server standing in for one), loopback is usable and
    # wins over the refused address tried first.
    with _standing_replica() as replica_url:
        front.register("r1", replica_url)
        deadline = time.monotonic() + 10
        while front.replicas() < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        refused, answered = _check(front.port, address, "127.0.0.1")
    assert answered.status == 200 and answered.replicas == 1 and answered.usable(front=True)
    chosen = reach.choose("retr", "trainer", HEAD, front.port, [refused, answered], front=True)
    assert chosen["url"] == f"http://127.0.0.1:{front.port}"
    assert chosen["from"] == "trainer" and chosen["checked"]["status"] == 200
    # Another service that answers 200 at the address is not taken for the retriever.
    other = reach.Attempt("10.42.0.5", "10.42.0.9", 200, "{}", None, None)
    assert other.usable(front=False) and not other.usable(front=True)
    assert "not the retrieval front" in other.describe(front=True)
    (nothing,) = _check(closed_port, "127.0.0.1")
    assert nothing.status is None and nothing.error and not nothing.usable(front=False)
    with pytest.raises(OperationError) as caught:
        reach.choose("retr", "trainer", HEAD, closed_port, [nothing])
    assert "trainer's head (t0) cannot use port" in str(caught.value)
    hint = str(caught.value.hint)
    assert "serving.retrieval.clients of retr's profile" in hint
    assert "127.0.0.1" in hint and "SSH reaches it at 198.51.100.20" in hint


def test_the_candidates_are_the_private_address_then_the_ssh_one() -> None:
    assert reach.candidates(HEAD) == ["10.5.0.20", "198.51.100.20"]
    same = Host("s0", 0, "10.5.0.21", "10.5.0.21", "eth0", "root")
    assert reach.candidates(same) == ["10.5.0.21"]


def test_the_probe_stops_at_a_refusal_and_says_why(front: FrontServer) -> None:
    address = own_address()
    lines: list[str] = []
    slept: list[float] = []
    with pytest.raises(search_tool.SearchToolError) as caught:
        search_tool.probe(
            f"http://{address}:{front.port}",
            tries=30,
            interval=5,
            log=lines.append,
            sleep=slept.append,
        )
    assert caught.value.exit_code == 1
    assert "refused this node: HTTP 403" in str(caught.value)
    assert f"{address} may not use this service" in str(caught.value)
    # Once, not 30 times 5 s apart: a refusal does not pass with time.
    assert len(lines) == 1 and slept == []
