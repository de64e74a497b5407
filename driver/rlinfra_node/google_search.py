"""Answer the retrieval API from Google Custom Search, with the API key kept to the environment.

    GOOGLE_API_KEY=... GOOGLE_CSE_ID=... python -m rlinfra_node.google_search
        [--host 127.0.0.1] [--port 8000] [--topk 3] [--timeout 10] [--retries 3]
        [--backoff 0.5] [--backoff-max 4] [--workers 4]

Search-R1's ``google_search_server.py`` (reference workflow 6) serves the same API but takes the
key on its command line, where ``ps`` and ``/proc/PID/cmdline`` show it to every user of the
node. This server reads the key and the engine id only from its environment and keeps the key out
of every log line, error message and answer.

Routes (the shapes of ``rlinfra_node.retrieval.api``, so Verl's search tool and
``rlinfra_node.search_tool probe`` talk to either service alike):

- ``POST /retrieve`` ``{"queries": ["q1", ...], "topk": 3, "return_scores": true}`` answers
  ``{"result": [[{"document": {"id": LINK, "contents": "TITLE\\nSNIPPET"}, "score": s}, ...],
  ...]}``: one list per query, in Google's order, at most ``min(topk, 10)`` long (10 results is
  the most one Custom Search request gives). A query Google finds nothing for gets ``[]``.
  ``score`` (only when ``return_scores`` is true) is rank-based, not a relevance measure Google
  gives: ``1 / (rank + 1)`` with rank 0 for the first result, so 1.0, 0.5, 0.333, ...
  ``topk`` defaults to ``--topk``. The request is checked by the retrieval API's own checks
  (``parse_request``), with its limits: 400 for a body that is not a JSON object, 411 without a
  Content-Length, 413 for more than 128 queries or too large a body, 422 for a field of the wrong
  type or out of range (``topk`` 1 to 50). Errors answer ``{"error": "...", "status": N}``.
  The queries of one request are sent to Google concurrently, at most ``--workers`` at a time
  across the whole server.
- ``GET /`` and ``GET /healthz``: 200 and a small JSON status once the server listens (readiness
  probes; neither calls Google, so probes spend no quota). Other paths: 404; a wrong method: 405.

Each query is one ``GET ENDPOINT?key=KEY&cx=CSE_ID&q=QUERY&num=min(topk,10)``; the ``items``
(``title``, ``snippet``, ``link``) are mapped in order. A failed try is logged as one line on
stderr, and a request answers with the error of its first failed query (its other queries are
not sent if they have not started):

- 400/401/403 that refuses the key or its project (``keyInvalid``, ``forbidden``,
  ``accessNotConfigured``, ``API_KEY_INVALID``, ...; any 401/403 not about quota): not retried;
  502 "Google Custom Search refused the key: ...". Any other 400: not retried; 502 "Google Custom
  Search refused the request: ...".
- 403 ``dailyLimitExceeded``/``quotaExceeded``: not retried (a day's quota does not come back in
  seconds); 503 "Google Custom Search quota or rate limit: ...".
- 429 (and 403 ``rateLimitExceeded``/``userRateLimitExceeded``), 5xx, network errors and
  timeouts: up to ``--retries`` more tries, the n-th after ``--backoff`` x 2^(n-1) seconds or the
  answer's Retry-After (seconds or a date), never more than ``--backoff-max``; then 503 "Google
  Custom Search quota or rate limit: ..." for quota and rate limits, 502 otherwise.
- Anything else (a redirect, another 4xx, a 200 that is not a JSON object): 502 at once.

A request may take up to (retries + 1) x timeout + retries x backoff-max seconds per query (52 s
with the defaults, when Google hangs); Verl's search tool waits ``default_timeout`` (30 s) and
retries on its side.

Environment:
    GOOGLE_API_KEY       the API key (required). Read only from here: no flag takes it.
    GOOGLE_CSE_ID        the Programmable Search Engine id, Google's ``cx`` (required).
    GOOGLE_CSE_ENDPOINT  the Custom Search JSON API's URL (default
                         https://www.googleapis.com/customsearch/v1); tests point it at a local
                         fake. It must be https (plain http only to a loopback host, as the key
                         would travel in clear) and carry no query, fragment or user:password@.

Google's API takes the key in the URL's query string, so every text that could hold a URL or an
upstream message goes through ``redact``, which writes ``***`` for the key (as given and
URL-encoded) and for any ``key=`` query value.

Exit codes: 0 stopped by SIGTERM or SIGINT, 1 cannot listen, 2 bad usage (a missing or empty
variable, named in one line; a bad flag; a refused endpoint).
"""

from __future__ import annotations

import argparse
import contextlib
import email.utils
import http.client
import ipaddress
import json
import os
import re
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from rlinfra_node.retrieval.api import BadRequest, max_body_bytes, parse_request
from rlinfra_node.retrieval.settings import Settings

SERVICE = "rlinfra-google-search"
KEY_ENV = "GOOGLE_API_KEY"
CSE_ENV = "GOOGLE_CSE_ID"
ENDPOINT_ENV = "GOOGLE_CSE_ENDPOINT"
DEFAULT_ENDPOINT = "https://www.googleapis.com/customsearch/v1"
# The most results one Custom Search request gives (its ``num`` is 1 to 10).
MAX_NUM = 10
# The retrieval service's request limits (Settings' defaults); this server keeps no corpus, so
# data_dir is a placeholder that nothing reads.
LIMITS = Settings(data_dir="-")
MAX_UPSTREAM_BYTES = 4 << 20
REDACTED = "***"

# Google's error reasons (``error.errors[].reason``, ``error.details[].reason``, ``error.status``).
RATE_REASONS = frozenset(
    {"rateLimitExceeded", "userRateLimitExceeded", "RATE_LIMIT_EXCEEDED", "RESOURCE_EXHAUSTED"}
)
DAILY_REASONS = frozenset({"dailyLimitExceeded", "dailyLimitExceededUnreg", "quotaExceeded"})
KEY_REASONS = frozenset(
    {
        "keyInvalid",
        "keyExpired",
        "forbidden",
        "accessNotConfigured",
        "ipRefererBlocked",
        "API_KEY_INVALID",
        "API_KEY_EXPIRED",
        "API_KEY_SERVICE_BLOCKED",
        "API_KEY_HTTP_REFERRER_BLOCKED",
        "API_KEY_IP_ADDRESS_BLOCKED",
        "SERVICE_DISABLED",
        "PERMISSION_DENIED",
    }
)

# Per kind of failure: the status this server answers and the start of its message.
ANSWERS = {
    "key": (502, "Google Custom Search refused the key"),
    "request": (502, "Google Custom Search refused the request"),
    "quota": (503, "Google Custom Search quota or rate limit"),
    "upstream": (502, "Google Custom Search failed"),
    "network": (502, "Google Custom Search unreachable"),
}
KEY_HINT = f"check {KEY_ENV} and that the Custom Search API is enabled for its project"

_KEY_PARAM = re.compile(r"([?&;]key=)[^&#;\s'\"<>]*")


class UsageError(Exception):
    """Bad flags or environment: one line, exit 2."""


class UpstreamError(Exception):
    """Google did not answer a query; ``status`` (502/503) and ``message`` go to the client."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def redact(text: str, secret: str) -> str:
    """``text`` with ``secret`` (as given and URL-encoded) and any ``key=`` query value as ***."""
    if secret:
        forms = {
            secret,
            urllib.parse.quote(secret),
            urllib.parse.quote(secret, safe=""),
            urllib.parse.quote_plus(secret),
        }
        for form in sorted(forms, key=len, reverse=True):
            text = text.replace(form, REDACTED)
    return _KEY_PARAM.sub(r"\1" + REDACTED, text)


def check_endpoint(url: str) -> str:
    """``url`` if it is a fit Custom Search endpoint, else UsageError naming GOOGLE_CSE_ENDPOINT."""
    text = url.strip()
    shown = redact(text, "")
    parts = urllib.parse.urlsplit(text)
    if "@" in parts.netloc:  # not shown: user:password@ may hold a secret
        raise UsageError(f"{ENDPOINT_ENV}: give the API's URL without user:password@")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"{ENDPOINT_ENV}: {shown!r} is not an http(s) URL")
    try:
        parts.port  # noqa: B018 - parsing the port is the check
    except ValueError as exc:
        raise UsageError(f"{ENDPOINT_ENV}: {shown!r}: {exc}") from None
    if parts.query or parts.fragment:
        raise UsageError(f"{ENDPOINT_ENV}: {shown!r}: give the API's URL without ?query or #")
    if parts.scheme == "http" and not _is_loopback(parts.hostname):
        raise UsageError(
            f"{ENDPOINT_ENV}: {shown!r}: plain http would send the key in clear; use https "
            "(http only to a loopback host)"
        )
    return text


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Upstream:
    """Where and how to ask Google. ``key`` is left out of repr, so no repr can leak it."""

    endpoint: str
    key: str = field(repr=False)
    cx: str = field(repr=False)
    timeout: float = 10.0
    retries: int = 3
    backoff: float = 0.5
    backoff_max: float = 4.0

    def url(self, query: str, num: int) -> str:
        params = {"key": self.key, "cx": self.cx, "q": query, "num": str(num)}
        return f"{self.endpoint}?{urllib.parse.urlencode(params)}"


def upstream_from_env(environ: Mapping[str, str], **knobs: Any) -> Upstream:
    """The Upstream from GOOGLE_API_KEY, GOOGLE_CSE_ID, GOOGLE_CSE_ENDPOINT and ``knobs``."""
    values = {}
    for name in (KEY_ENV, CSE_ENV):
        value = environ.get(name, "").strip()
        if not value:
            raise UsageError(
                f"{name} is not set or is empty: export it in the server's environment "
                "(it is never taken from the command line)"
            )
        values[name] = value
    endpoint = check_endpoint(environ.get(ENDPOINT_ENV, "").strip() or DEFAULT_ENDPOINT)
    return Upstream(endpoint, values[KEY_ENV], values[CSE_ENV], **knobs)


# ---------------------------------------------------------------- Google's answers, pure


@dataclass(frozen=True)
class Failure:
    """One failed try: its kind (a key of ANSWERS), a one-line detail, and whether to try again."""

    kind: str
    detail: str
    retry: bool
    retry_after: float | None = None


def google_error(body: bytes, secret: str = "") -> tuple[str, list[str]]:
    """(message, reasons) from Google's JSON error body; ("", []) when it is not one. The message
    is redacted (``secret``) before it is shortened, so no part of the key is left in it."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return "", []
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict):
        return "", []
    reasons: list[str] = []
    for entry in [*_list(error.get("errors")), *_list(error.get("details"))]:
        reason = entry.get("reason") if isinstance(entry, dict) else None
        if isinstance(reason, str) and reason not in reasons:
            reasons.append(reason)
    status = error.get("status")
    if isinstance(status, str) and status not in reasons:
        reasons.append(status)
    message = error.get("message")
    if not isinstance(message, str):
        return "", reasons
    return " ".join(redact(message, secret).split())[:300], reasons


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def classify(status: int, body: bytes, retry_after: str | None = None, secret: str = "") -> Failure:
    """What an HTTP error answer from Google means (see the module's docstring)."""
    message, reasons = google_error(body, secret)
    detail = f"HTTP {status}" + (f" {'/'.join(reasons)}" if reasons else "")
    detail += f": {message}" if message else ""
    found = set(reasons)
    wait = parse_retry_after(retry_after)
    if status == 429 or (status in (400, 403) and found & RATE_REASONS):
        return Failure("quota", detail, retry=True, retry_after=wait)
    if status in (400, 403) and found & DAILY_REASONS:
        return Failure("quota", detail, retry=False)
    if status in (401, 403) or (
        status == 400 and (found & KEY_REASONS or "api key" in message.lower())
    ):
        return Failure("key", f"{detail} ({KEY_HINT})", retry=False)
    if status == 400:
        return Failure("request", detail, retry=False)
    if status >= 500:
        return Failure("upstream", detail, retry=True, retry_after=wait)
    return Failure("upstream", detail, retry=False)


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Retry-After as seconds from now (it is seconds or an HTTP date); None if absent or bad."""
    text = (value or "").strip()
    if not text:
        return None
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def retry_delay(attempt: int, retry_after: float | None, base: float, cap: float) -> float:
    """Seconds to wait after failed try ``attempt`` (1, 2, ...): Retry-After if given, else
    ``base`` x 2^(attempt-1); at most ``cap``."""
    wait = retry_after if retry_after is not None else base * 2 ** (attempt - 1)
    return max(0.0, min(wait, cap))


def hits_from(data: Mapping[str, Any], topk: int, return_scores: bool) -> list[dict[str, Any]]:
    """Google's ``items`` as retrieval API hits, best first; score 1/(rank+1) when asked."""
    items = data.get("items")
    hits: list[dict[str, Any]] = []
    for item in items if isinstance(items, list) else []:
        if len(hits) == topk:
            break
        if not isinstance(item, dict):
            continue
        title = " ".join(str(item.get("title") or "").split())
        snippet = str(item.get("snippet") or "").strip()
        hit: dict[str, Any] = {
            "document": {"id": str(item.get("link") or ""), "contents": f"{title}\n{snippet}"}
        }
        if return_scores:
            hit["score"] = 1.0 / (len(hits) + 1)
        hits.append(hit)
    return hits


# ---------------------------------------------------------------- asking Google


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """The API never redirects; a redirect is an error, not a second request."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def log_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Google:
    """Runs one query against the Custom Search API, with the retries the module describes."""

    def __init__(
        self,
        upstream: Upstream,
        log: Callable[[str], None] = log_line,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.upstream = upstream
        self._log = log
        self._sleep = sleep
        self._opener = urllib.request.build_opener(_NoRedirect)

    def redact(self, text: str) -> str:
        return redact(text, self.upstream.key)

    def search(
        self, query: str, topk: int, return_scores: bool, label: str = "query"
    ) -> list[dict[str, Any]]:
        """The hits for ``query``; raises UpstreamError (message redacted) when Google fails."""
        url = self.upstream.url(query, min(topk, MAX_NUM))
        tries = self.upstream.retries + 1
        for attempt in range(1, tries + 1):
            answer = self._attempt(url)
            if not isinstance(answer, Failure):
                return hits_from(answer, topk, return_scores)
            status, prefix = ANSWERS[answer.kind]
            detail = self.redact(answer.detail)
            if answer.retry and attempt < tries:
                wait = retry_delay(
                    attempt, answer.retry_after, self.upstream.backoff, self.upstream.backoff_max
                )
                self._log(
                    f"google_search: {label}, try {attempt}/{tries}: {prefix}: {detail}; "
                    f"retrying in {wait:.2f} s"
                )
                self._sleep(wait)
                continue
            end = "giving up" if answer.retry else "not retried"
            self._log(f"google_search: {label}, try {attempt}/{tries}: {prefix}: {detail}; {end}")
            tried = f" (after {attempt} tries)" if attempt > 1 else ""
            raise UpstreamError(status, f"{prefix}: {detail}{tried}")
        raise AssertionError("unreachable: the last try returns or raises")

    def _attempt(self, url: str) -> dict[str, Any] | Failure:
        request = urllib.request.Request(
            url, headers={"Accept": "application/json", "User-Agent": SERVICE}
        )
        try:
            with self._opener.open(request, timeout=self.upstream.timeout) as response:
                body = response.read(MAX_UPSTREAM_BYTES + 1)
        except urllib.error.HTTPError as exc:
            with contextlib.closing(exc):
                try:
                    error_body = exc.read(MAX_UPSTREAM_BYTES)
                except (OSError, http.client.HTTPException):
                    error_body = b""
                retry_after = exc.headers.get("Retry-After") if exc.headers else None
                return classify(exc.code, error_body, retry_after, self.upstream.key)
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", None) or exc
            return Failure("network", f"{type(exc).__name__}: {reason}", retry=True)
        except ValueError as exc:  # http.client.InvalidURL and the like
            return Failure("upstream", f"{type(exc).__name__}: {exc}", retry=False)
        if len(body) > MAX_UPSTREAM_BYTES:
            return Failure("upstream", f"answer larger than {MAX_UPSTREAM_BYTES} bytes", False)
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            return Failure("upstream", "HTTP 200 with a body that is not JSON", retry=False)
        if not isinstance(data, dict):
            return Failure("upstream", "HTTP 200 with JSON that is not an object", retry=False)
        return data


# ---------------------------------------------------------------- the HTTP server


class App:
    """The retrieval API over Google: request checks from api.py, queries on a shared pool."""

    def __init__(self, google: Google, settings: Settings, workers: int) -> None:
        self.google = google
        self.settings = settings
        self.workers = workers
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="google")

    def retrieve(
        self, queries: list[str], topk: int, return_scores: bool
    ) -> list[list[dict[str, Any]]]:
        count = len(queries)
        futures = [
            self.pool.submit(
                self.google.search, query, topk, return_scores, f"query {i + 1}/{count}"
            )
            for i, query in enumerate(queries)
        ]
        try:
            return [future.result() for future in futures]
        finally:
            for future in futures:
                future.cancel()

    def describe(self) -> dict[str, Any]:
        return {
            "service": SERVICE,
            "status": "ok",
            "backend": "google-custom-search",
            "endpoint": self.google.upstream.endpoint,
            "default_topk": self.settings.default_topk,
            "max_topk": self.settings.max_topk,
            "max_results": MAX_NUM,
            "max_queries": self.settings.max_queries,
            "retries": self.google.upstream.retries,
            "workers": self.workers,
        }


def make_handler(app: App) -> type[BaseHTTPRequestHandler]:
    limit = max_body_bytes(app.settings)
    post_routes = {"/retrieve"}
    get_routes = {"/", "/healthz"}

    class Handler(BaseHTTPRequestHandler):
        server_version = SERVICE
        sys_version = ""
        timeout = 60  # seconds a client may take to send its request

        def log_message(self, format: str, *args: Any) -> None:
            return  # one line per /retrieve is printed below; probes are not logged

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, message: str) -> None:
            self._send(status, {"error": message, "status": status})

        def _path(self) -> str:
            return urllib.parse.urlsplit(self.path).path.rstrip("/") or "/"

        def do_GET(self) -> None:
            path = self._path()
            if path == "/":
                self._send(200, app.describe())
            elif path == "/healthz":
                self._send(200, {"status": "ok", "service": SERVICE})
            elif path in post_routes:
                self._error(405, f"use POST for {path}")
            else:
                self._error(404, f"no route GET {path}")

        def do_POST(self) -> None:
            path = self._path()
            if path not in post_routes:
                if path in get_routes:
                    self._error(405, f"use GET for {path}")
                else:
                    self._error(404, f"no route POST {path}")
                return
            began = time.monotonic()
            try:
                queries, topk, return_scores = parse_request(self._body(), app.settings)
                result = app.retrieve(queries, topk, return_scores)
            except BadRequest as exc:
                self._error(exc.status, exc.message)
                print(f"google_search: POST {path}: {exc.status}: {exc.message}", flush=True)
                return
            except UpstreamError as exc:  # its cause is logged on stderr already
                self._error(exc.status, exc.message)
                elapsed = time.monotonic() - began
                print(f"google_search: POST {path}: {exc.status} in {elapsed:.2f} s", flush=True)
                return
            except Exception as exc:
                message = app.google.redact(f"{type(exc).__name__}: {exc}")
                log_line(f"google_search: POST {path}: failed: {message}")
                self._error(500, f"search failed: {message}")
                return
            self._send(200, {"result": result})
            print(
                f"google_search: POST {path}: 200 in {time.monotonic() - began:.2f} s, "
                f"{len(queries)} queries",
                flush=True,
            )

        def _body(self) -> bytes:
            declared = self.headers.get("Content-Length")
            if declared is None:
                self.close_connection = True
                raise BadRequest(411, "send the JSON body with a Content-Length")
            if not declared.strip().isdigit():
                self.close_connection = True
                raise BadRequest(400, f"Content-Length {declared!r} is not a number")
            length = int(declared)
            if length > limit:
                self.close_connection = True  # the body is left unread
                raise BadRequest(413, f"request body is larger than {limit} bytes")
            return self.rfile.read(length)

    return Handler


def _http_server(
    host: str, port: int, handler: type[BaseHTTPRequestHandler], redactor: Callable[[str], str]
) -> ThreadingHTTPServer:
    class Server(ThreadingHTTPServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

        def handle_error(self, request: Any, client_address: Any) -> None:
            exc = sys.exc_info()[1]
            shown = redactor(f"{type(exc).__name__}: {exc}")
            log_line(f"google_search: a request from {client_address[0]} failed: {shown}")

    return Server((host, port), handler)


def serve(
    upstream: Upstream, host: str, port: int, topk: int = LIMITS.default_topk, workers: int = 4
) -> int:
    """Serve until SIGTERM or SIGINT; returns the exit code."""
    settings = Settings(data_dir=LIMITS.data_dir, default_topk=topk)
    google = Google(upstream)
    app = App(google, settings, workers)
    try:
        server = _http_server(host, port, make_handler(app), google.redact)
    except OSError as exc:
        log_line(f"Error: cannot listen on {host}:{port}: {exc}")
        return 1
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    where = f"[{host}]" if ":" in host else host
    print(
        f"google_search: serving POST /retrieve on http://{where}:{server.server_address[1]} "
        f"from {upstream.endpoint} (default top-k {topk}, {upstream.retries} retries, "
        f"{workers} workers)",
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        app.pool.shutdown(wait=False, cancel_futures=True)
    return 0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m rlinfra_node.google_search",
        description=(
            f"The retrieval API answered from Google Custom Search. {KEY_ENV} and {CSE_ENV} come "
            f"from the environment only; {ENDPOINT_ENV} overrides the API's URL."
        ),
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--topk", type=int, default=LIMITS.default_topk, help="results per query by default"
    )
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per Google request")
    parser.add_argument("--retries", type=int, default=3, help="more tries after a failed one")
    parser.add_argument("--backoff", type=float, default=0.5, help="seconds before the 1st retry")
    parser.add_argument("--backoff-max", type=float, default=4.0, help="longest wait, seconds")
    parser.add_argument("--workers", type=int, default=4, help="Google requests at a time")
    return parser.parse_args(argv)


def check_args(args: argparse.Namespace) -> None:
    problems = []
    if not 0 <= args.port <= 65535:
        problems.append("--port must be 0 to 65535")
    if not 1 <= args.topk <= LIMITS.max_topk:
        problems.append(f"--topk must be 1 to {LIMITS.max_topk}")
    if not args.timeout > 0:
        problems.append("--timeout must be > 0")
    if not 0 <= args.retries <= 10:
        problems.append("--retries must be 0 to 10")
    if not 0 <= args.backoff <= args.backoff_max:
        problems.append("--backoff must be >= 0 and at most --backoff-max")
    if not 1 <= args.workers <= 64:
        problems.append("--workers must be 1 to 64")
    if problems:
        raise UsageError("; ".join(problems))


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    args = parse_args(argv)
    try:
        check_args(args)
        upstream = upstream_from_env(
            os.environ if environ is None else environ,
            timeout=args.timeout,
            retries=args.retries,
            backoff=args.backoff,
            backoff_max=args.backoff_max,
        )
    except UsageError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2
    return serve(upstream, args.host, args.port, args.topk, args.workers)


if __name__ == "__main__":
    sys.exit(main())
