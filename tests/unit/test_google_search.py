"""rlinfra_node.google_search against a fake Google Custom Search (a thread of this process).

The fake answers in the Custom Search JSON API's shapes and records every request. The server
under test is the real module, run as a subprocess with a canary key in its environment, so the
tests see what its users see: answers, retries counted at the fake, exit codes, its logs and its
/proc/PID/cmdline. The pure parts (error classification, Retry-After, redaction) are also
checked in-process.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from rlinfra_node import google_search as gs

DRIVER = Path(__file__).resolve().parents[2] / "driver"
# '+', '/' and '=' change when URL-encoded: the encoded forms must not leak either.
CANARY = "AIzaCANARY+k3y/=only-in-env"
CSE_ID = "cse-0123456789abcdef"
LEAKS = (
    "CANARY",
    CANARY,
    urllib.parse.quote(CANARY, safe=""),
    urllib.parse.quote_plus(CANARY),
)
# The main server's flags: short waits, 2 retries (3 tries), default top-k 2.
FLAGS = (
    *("--topk", "2", "--retries", "2", "--backoff", "0.01", "--backoff-max", "0.3"),
    *("--timeout", "5", "--workers", "4"),
)
# Answers from the client side never go through a proxy of the test machine.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))

# An answer of the fake: (status, JSON body, headers); None: the normal search results.
Answer = tuple[int, dict[str, Any], dict[str, str]] | None


def assert_no_key(text: str) -> None:
    for form in LEAKS:
        assert form not in text


def google_error(code: int, message: str, reason: str, status: str = "") -> dict[str, Any]:
    """Google's error body (``@KEY@`` and ``@PATH@`` in ``message`` echo the request's)."""
    error: dict[str, Any] = {
        "code": code,
        "message": message,
        "errors": [{"message": message, "domain": "global", "reason": reason}],
    }
    if status:
        error["status"] = status
    return {"error": error}


# What Custom Search answers today for a bad key (a 400, the reason in ``details``).
BAD_KEY_400 = {
    "error": {
        "code": 400,
        "message": "API key not valid. Please pass a valid API key.",
        "errors": [
            {
                "message": "API key not valid. Please pass a valid API key.",
                "domain": "global",
                "reason": "badRequest",
            }
        ],
        "status": "INVALID_ARGUMENT",
        "details": [
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "API_KEY_INVALID",
                "domain": "googleapis.com",
                "metadata": {"service": "customsearch.googleapis.com"},
            }
        ],
    }
}


def search_results(query: str, num: int) -> dict[str, Any]:
    """Custom Search's answer: up to 12 results, ``num`` honoured; none for 'nothing ...'."""
    info = {"totalResults": "0" if query.startswith("nothing") else "12"}
    answer: dict[str, Any] = {"kind": "customsearch#search", "searchInformation": info}
    if query.startswith("nothing"):
        return answer  # Google leaves ``items`` out when it finds nothing
    slug = query.replace(" ", "-")
    answer["items"] = [
        {
            "kind": "customsearch#result",
            "title": f"{query} title {i}",
            "link": f"https://example.org/{slug}/{i}",
            "displayLink": "example.org",
            "snippet": f"{query} snippet {i}",
        }
        for i in range(min(num, 12))
    ]
    return answer


@dataclass
class Seen:
    at: float
    path: str
    params: dict[str, list[str]]


@dataclass
class FakeGoogle:
    """Custom Search's JSON API. ``script[q]`` lists answers served in turn (the last repeats);
    other queries get ``search_results``. ``delay[q]`` holds an answer back."""

    script: dict[str, list[Answer]] = field(default_factory=dict)
    delay: dict[str, float] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    url: str = ""
    in_flight: int = 0
    most_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def hits(self, query: str) -> list[Seen]:
        with self.lock:
            return [s for s in self.seen if s.params.get("q") == [query]]

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        parts = urllib.parse.urlsplit(handler.path)
        params = urllib.parse.parse_qs(parts.query)
        query = params.get("q", [""])[0]
        with self.lock:
            self.seen.append(Seen(time.monotonic(), parts.path, params))
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            queue = self.script.get(query)
            planned = (queue.pop(0) if len(queue) > 1 else queue[0]) if queue else None
        try:
            time.sleep(self.delay.get(query, 0.0))
            headers: dict[str, str] = {}
            if planned is None:
                status = 200
                text = json.dumps(search_results(query, int(params["num"][0])))
            else:
                status, body, headers = planned
                text = json.dumps(body).replace("@KEY@", params["key"][0])
                text = text.replace("@PATH@", handler.path)
            data = text.encode()
            handler.send_response(status)
            for name, value in {"Content-Type": "application/json", **headers}.items():
                handler.send_header(name, value)
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        finally:
            with self.lock:
                self.in_flight -= 1


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeGoogle]:
    google = FakeGoogle()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            google.answer(self)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    google.url = f"http://127.0.0.1:{server.server_address[1]}/customsearch/v1"
    try:
        yield google
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_env(endpoint: str, **changes: str | None) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(DRIVER),
        "GOOGLE_API_KEY": CANARY,
        "GOOGLE_CSE_ID": CSE_ID,
        "GOOGLE_CSE_ENDPOINT": endpoint,
    }
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    url: str
    out: Path
    err: Path

    def err_lines(self) -> list[str]:
        return self.err.read_text().splitlines()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise


def start_server(folder: Path, endpoint: str, *flags: str) -> Server:
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    out, err = folder / "stdout", folder / "stderr"
    argv = [sys.executable, "-m", "rlinfra_node.google_search", "--port", str(port), *flags]
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = subprocess.Popen(argv, stdout=stdout, stderr=stderr, env=server_env(endpoint))
    server = Server(proc, f"http://127.0.0.1:{port}", out, err)
    deadline = time.monotonic() + 20
    while True:
        try:
            with OPENER.open(f"{server.url}/healthz", timeout=2) as response:
                if response.status == 200:
                    return server
        except (urllib.error.URLError, ConnectionError):
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            server.stop()
            pytest.fail(f"google_search did not start: {err.read_text()}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def server(fake: FakeGoogle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    started = start_server(tmp_path_factory.mktemp("google"), fake.url, *FLAGS)
    try:
        yield started
    finally:
        started.stop()


def call(url: str, payload: Any = None, *, raw: bytes | None = None) -> tuple[int, Any]:
    """POST JSON (or ``raw`` bytes) to ``url``, or GET it; (status, parsed body). No answer may
    hold the key."""
    data = raw if raw is not None else None if payload is None else json.dumps(payload).encode()
    headers = {"Content-Type": "application/json"} if data is not None else {}
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with OPENER.open(request, timeout=30) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as exc:
        with exc:
            status, body = exc.code, exc.read()
    assert_no_key(body.decode())
    return status, json.loads(body)


def raw_http(url: str, head: bytes) -> tuple[int, Any]:
    """Send a hand-made request head (no body) and read the answer to the end."""
    parts = urllib.parse.urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(head)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    status_line, _, rest = b"".join(chunks).partition(b"\r\n")
    body = rest.partition(b"\r\n\r\n")[2]
    return int(status_line.split()[1]), json.loads(body)


# ---------------------------------------------------------------- answers


def test_results_are_mapped_to_the_retrieval_api(fake: FakeGoogle, server: Server) -> None:
    queries = ["alpha search", "beta search"]
    status, body = call(
        f"{server.url}/retrieve", {"queries": queries, "topk": 3, "return_scores": True}
    )
    assert status == 200
    expected = [
        [
            {
                "document": {
                    "id": f"https://example.org/{q.replace(' ', '-')}/{i}",
                    "contents": f"{q} title {i}\n{q} snippet {i}",
                },
                "score": pytest.approx(1.0 / (i + 1)),
            }
            for i in range(3)
        ]
        for q in queries
    ]
    assert body == {"result": expected}
    for query in queries:
        (seen,) = fake.hits(query)
        assert seen.path == "/customsearch/v1"
        # The key and the engine id reach Google; num is the top-k; nothing else is sent.
        assert seen.params == {"key": [CANARY], "cx": [CSE_ID], "q": [query], "num": ["3"]}


def test_topk_defaults_to_the_flag_and_asks_google_for_at_most_ten(
    fake: FakeGoogle, server: Server
) -> None:
    status, body = call(f"{server.url}/retrieve", {"queries": ["gamma default"]})
    assert status == 200
    assert [hit["document"]["id"] for hit in body["result"][0]] == [
        "https://example.org/gamma-default/0",
        "https://example.org/gamma-default/1",
    ]
    assert all("score" not in hit for hit in body["result"][0])  # return_scores left out
    assert fake.hits("gamma default")[0].params["num"] == ["2"]  # --topk 2

    status, body = call(f"{server.url}/retrieve", {"queries": ["delta many"], "topk": 12})
    assert status == 200 and len(body["result"][0]) == 10
    assert fake.hits("delta many")[0].params["num"] == ["10"]


def test_a_query_google_finds_nothing_for_gets_an_empty_list(
    fake: FakeGoogle, server: Server
) -> None:
    status, body = call(
        f"{server.url}/retrieve",
        {"queries": ["nothing at all", "epsilon found"], "topk": 1, "return_scores": True},
    )
    assert status == 200
    assert body["result"][0] == []
    assert [h["document"]["id"] for h in body["result"][1]] == [
        "https://example.org/epsilon-found/0"
    ]
    assert len(fake.hits("nothing at all")) == 1


def test_the_queries_of_one_request_go_to_google_concurrently(
    fake: FakeGoogle, server: Server
) -> None:
    queries = ["zeta one", "zeta two", "zeta three"]
    fake.delay.update(dict.fromkeys(queries, 0.5))
    with fake.lock:
        fake.most_in_flight = 0
    status, body = call(f"{server.url}/retrieve", {"queries": queries, "topk": 1})
    assert status == 200
    assert [r[0]["document"]["id"] for r in body["result"]] == [
        f"https://example.org/{q.replace(' ', '-')}/0" for q in queries
    ]
    assert fake.most_in_flight == 3


# ---------------------------------------------------------------- Google's errors


@pytest.mark.parametrize(
    ("answer", "status", "phrase"),
    [
        pytest.param(
            (403, google_error(403, "API key not valid: @KEY@ (@PATH@)", "keyInvalid"), {}),
            502,
            "Google Custom Search refused the key: HTTP 403 keyInvalid: API key not valid: ***",
            id="403-keyInvalid-echoing-the-key",
        ),
        pytest.param(
            (400, BAD_KEY_400, {}),
            502,
            "Google Custom Search refused the key: HTTP 400 badRequest/API_KEY_INVALID/"
            "INVALID_ARGUMENT: API key not valid.",
            id="400-API_KEY_INVALID",
        ),
        pytest.param(
            (403, google_error(403, "Daily Limit Exceeded", "dailyLimitExceeded"), {}),
            503,
            "Google Custom Search quota or rate limit: HTTP 403 dailyLimitExceeded",
            id="403-dailyLimitExceeded",
        ),
        pytest.param(
            (400, google_error(400, "Invalid Value", "invalid"), {}),
            502,
            "Google Custom Search refused the request: HTTP 400 invalid: Invalid Value",
            id="400-invalid",
        ),
    ],
)
def test_a_refusal_is_answered_at_once_without_retry(
    fake: FakeGoogle,
    server: Server,
    request: pytest.FixtureRequest,
    answer: Answer,
    status: int,
    phrase: str,
) -> None:
    query = f"refused {request.node.callspec.id}"
    fake.script[query] = [answer]
    before = len(server.err_lines())
    got, body = call(f"{server.url}/retrieve", {"queries": ["eta fine", query]})
    assert (got, body["status"]) == (status, status)
    assert body["error"].startswith(phrase)
    assert len(fake.hits(query)) == 1
    (line,) = server.err_lines()[before:]
    assert "query 2/2, try 1/3" in line and line.endswith("not retried")
    assert_no_key(line)


def test_a_rate_limit_is_retried_a_bounded_number_of_times_then_reported_as_quota(
    fake: FakeGoogle, server: Server
) -> None:
    query = "theta limited"
    limited = google_error(
        429, "Quota exceeded for quota metric 'Queries'", "rateLimitExceeded", "RESOURCE_EXHAUSTED"
    )
    fake.script[query] = [(429, limited, {"Retry-After": "5"})]
    before = len(server.err_lines())
    status, body = call(f"{server.url}/retrieve", {"queries": [query]})
    assert status == 503
    assert body["error"].startswith("Google Custom Search quota or rate limit: HTTP 429")
    assert body["error"].endswith("(after 3 tries)")
    hits = fake.hits(query)
    assert len(hits) == 3  # --retries 2
    # Retry-After (5 s) is honoured but capped by --backoff-max (0.3 s): not --backoff's 0.01 s.
    gaps = [b.at - a.at for a, b in itertools.pairwise(hits)]
    assert all(0.25 <= gap < 2.0 for gap in gaps), gaps
    lines = server.err_lines()[before:]
    assert len(lines) == 3
    assert [line.rsplit("; ", 1)[1] for line in lines] == [
        "retrying in 0.30 s",
        "retrying in 0.30 s",
        "giving up",
    ]


def test_a_server_error_then_success_answers_the_results(fake: FakeGoogle, server: Server) -> None:
    query = "iota flaky"
    fake.script[query] = [(500, google_error(500, "Backend Error", "backendError"), {}), None]
    before = len(server.err_lines())
    status, body = call(f"{server.url}/retrieve", {"queries": [query], "topk": 2})
    assert status == 200
    assert [h["document"]["id"] for h in body["result"][0]] == [
        "https://example.org/iota-flaky/0",
        "https://example.org/iota-flaky/1",
    ]
    assert len(fake.hits(query)) == 2
    (line,) = server.err_lines()[before:]
    assert "HTTP 500 backendError: Backend Error; retrying in 0.01 s" in line


def test_an_unreachable_google_is_retried_then_502_and_sigterm_stops_the_server(
    tmp_path: Path,
) -> None:
    closed = f"http://127.0.0.1:{free_port()}/customsearch/v1"
    flags = ("--retries", "1", "--backoff", "0.01", "--backoff-max", "0.05", "--timeout", "2")
    unreachable = start_server(tmp_path, closed, *flags)
    try:
        status, body = call(f"{unreachable.url}/retrieve", {"queries": ["kappa"]})
        lines = unreachable.err_lines()
    finally:
        code = unreachable.stop()
    assert status == 502
    assert body["error"].startswith("Google Custom Search unreachable: URLError")
    assert body["error"].endswith("(after 2 tries)")
    assert len(lines) == 2 and "Connection refused" in lines[0]
    assert code == 0
    assert "serving POST /retrieve on http://127.0.0.1:" in unreachable.out.read_text()


# ---------------------------------------------------------------- requests and routes


@pytest.mark.parametrize(
    ("raw", "status", "phrase"),
    [
        (b"not json", 400, "not valid JSON"),
        (b'["lambda"]', 400, "must be a JSON object"),
        (json.dumps({"queries": ["q"] * 129}).encode(), 413, "at most 128 per request"),
        (b'{"queries": "lambda"}', 422, "'queries' must be a list"),
        (b'{"queries": []}', 422, "'queries' is empty"),
        (b'{"queries": ["  "]}', 422, "queries[0] is blank"),
        (b'{"queries": ["lambda"], "topk": 0}', 422, "'topk' is 0"),
        (b'{"queries": ["lambda"], "topk": 51}', 422, "'topk' is 51"),
        (b'{"queries": ["lambda"], "topk": "3"}', 422, "'topk' must be an integer"),
        (b'{"queries": ["lambda"], "return_scores": "yes"}', 422, "'return_scores' must be"),
        (b'{"queries": ["lambda"], "top_k": 3}', 422, "unknown field(s) top_k"),
    ],
)
def test_a_bad_request_gets_its_4xx_and_asks_google_nothing(
    fake: FakeGoogle, server: Server, raw: bytes, status: int, phrase: str
) -> None:
    asked = len(fake.seen)
    got, body = call(f"{server.url}/retrieve", raw=raw)
    assert (got, body["status"]) == (status, status)
    assert phrase in body["error"]
    assert len(fake.seen) == asked


def test_a_body_too_large_or_without_length_is_refused_unread(
    fake: FakeGoogle, server: Server
) -> None:
    asked = len(fake.seen)
    head = b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    status, body = raw_http(server.url, head + b"Content-Length: 99999999\r\n\r\n")
    assert (status, body["status"]) == (413, 413) and "larger than" in body["error"]
    status, body = raw_http(server.url, head + b"\r\n")
    assert (status, body["status"]) == (411, 411) and "Content-Length" in body["error"]
    assert len(fake.seen) == asked


def test_probe_routes_answer_without_asking_google(fake: FakeGoogle, server: Server) -> None:
    asked = len(fake.seen)
    status, body = call(f"{server.url}/")
    assert status == 200
    assert body["service"] == "rlinfra-google-search" and body["status"] == "ok"
    assert (body["default_topk"], body["max_results"], body["retries"]) == (2, 10, 2)
    assert call(f"{server.url}/healthz") == (200, {"status": "ok", "service": body["service"]})
    assert call(f"{server.url}/retrieve")[0] == 405
    assert call(f"{server.url}/healthz", raw=b"{}")[0] == 405
    assert call(f"{server.url}/nowhere") == (404, {"error": "no route GET /nowhere", "status": 404})
    assert len(fake.seen) == asked


# ---------------------------------------------------------------- start-up and the key


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"GOOGLE_CSE_ID": None}, "GOOGLE_CSE_ID"),
        ({"GOOGLE_API_KEY": ""}, "GOOGLE_API_KEY"),
        ({"GOOGLE_CSE_ENDPOINT": "http://search.example.com/customsearch/v1"}, "plain http"),
        ({"GOOGLE_CSE_ENDPOINT": "https://h.example/v1?key=" + CANARY}, "without ?query"),
    ],
)
def test_bad_environment_exits_2_with_one_line(changes: dict[str, str | None], named: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rlinfra_node.google_search", "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=30,
        env=server_env("https://www.googleapis.com/customsearch/v1", **changes),
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("Error: ") and named in line
    assert_no_key(line)


def test_the_key_is_in_no_argument_log_or_answer(fake: FakeGoogle, server: Server) -> None:
    # The failures whose texts would carry the key: an upstream message echoing it and the URL.
    query = "mu echo"
    echo = google_error(403, "API key @KEY@ refused for @PATH@", "forbidden")
    fake.script[query] = [(403, echo, {})]
    status, body = call(f"{server.url}/retrieve", {"queries": [query]})
    assert status == 502 and body["error"].count("***") == 2
    assert fake.hits(query)[0].params["key"] == [CANARY]  # it was the key that was hidden
    cmdline = Path(f"/proc/{server.proc.pid}/cmdline").read_bytes().decode().split("\0")
    assert "rlinfra_node.google_search" in cmdline
    assert_no_key(" ".join(cmdline))
    logs = server.out.read_text() + server.err.read_text()
    assert "refused the key" in logs and "POST /retrieve: 502" in logs
    assert_no_key(logs)


# ---------------------------------------------------------------- the pure parts


@pytest.mark.parametrize(
    ("status", "body", "kind", "retry"),
    [
        (429, google_error(429, "Quota", "rateLimitExceeded"), "quota", True),
        (403, google_error(403, "Slow down", "userRateLimitExceeded"), "quota", True),
        (403, google_error(403, "Daily Limit", "dailyLimitExceeded"), "quota", False),
        (403, google_error(403, "Bad key", "keyInvalid"), "key", False),
        (403, google_error(403, "No access", "forbidden"), "key", False),
        (400, BAD_KEY_400, "key", False),
        (400, google_error(400, "Invalid Value", "invalid"), "request", False),
        (500, google_error(500, "Backend Error", "backendError"), "upstream", True),
        (503, {}, "upstream", True),
        (404, {}, "upstream", False),
    ],
)
def test_google_errors_are_classified(
    status: int, body: dict[str, Any], kind: str, retry: bool
) -> None:
    failure = gs.classify(status, json.dumps(body).encode())
    assert (failure.kind, failure.retry) == (kind, retry)
    assert failure.detail.startswith(f"HTTP {status}")


def test_retry_waits_follow_retry_after_or_backoff_and_are_capped() -> None:
    assert gs.parse_retry_after("7") == 7.0
    now = 1_700_000_000.0
    assert gs.parse_retry_after(formatdate(now + 30, usegmt=True), now=now) == 30.0
    assert gs.parse_retry_after("soon") is None and gs.parse_retry_after(None) is None
    waits = [gs.retry_delay(attempt, None, 0.5, 4.0) for attempt in range(1, 6)]
    assert waits == [0.5, 1.0, 2.0, 4.0, 4.0]
    assert gs.retry_delay(1, 60.0, 0.5, 4.0) == 4.0
    assert gs.classify(429, b"", "3").retry_after == 3.0


def test_redact_hides_the_key_in_every_form() -> None:
    url = gs.Upstream("https://g.example/v1", CANARY, CSE_ID).url("q", 3)
    text = f"{url} | {CANARY} | {urllib.parse.quote(CANARY)} | ?key=other&cx=x"
    shown = gs.redact(text, CANARY)
    assert_no_key(shown)
    assert "other" not in shown and f"cx={CSE_ID}" in shown
    assert CANARY not in repr(gs.Upstream("https://g.example/v1", CANARY, CSE_ID))


@pytest.mark.parametrize(
    ("endpoint", "ok"),
    [
        ("https://www.googleapis.com/customsearch/v1", True),
        ("http://127.0.0.1:9/customsearch/v1", True),
        ("http://localhost:9/v1", True),
        ("http://[::1]:9/v1", True),
        ("http://googleapis.example/v1", False),
        ("https://user:secret@googleapis.example/v1", False),
        ("https://googleapis.example:99999/v1", False),
        ("ftp://googleapis.example/v1", False),
    ],
)
def test_endpoint_must_be_https_or_loopback(endpoint: str, ok: bool) -> None:
    if ok:
        assert gs.check_endpoint(endpoint) == endpoint
        return
    with pytest.raises(gs.UsageError, match="GOOGLE_CSE_ENDPOINT") as err:
        gs.check_endpoint(endpoint)
    assert "secret" not in str(err.value)
