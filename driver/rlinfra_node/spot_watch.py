"""Preemption notices of a spot node, written where the training job reads them.

    python -m rlinfra_node.spot_watch --provider aws|gcp --notice-dir DIR
        [--endpoint URL] [--interval S] [--node NAME]

Polls the node's metadata service every ``--interval`` seconds (AWS recommends 5; GCP gives 30 s
of notice, so 1 by default):

- ``aws``: IMDSv2. ``PUT /latest/api/token`` (header ``X-aws-ec2-metadata-token-ttl-seconds``)
  gives a token; ``GET /latest/meta-data/spot/instance-action`` with it (header
  ``X-aws-ec2-metadata-token``) answers 404 while no interruption is planned, and 200 with
  ``{"action": "terminate"|"stop"|"hibernate", "time": "2026-12-05T12:00:00Z"}`` about two
  minutes before it (``time`` is when the action starts: the deadline).
- ``gcp``: ``GET /computeMetadata/v1/instance/preempted`` (header ``Metadata-Flavor: Google``)
  answers ``FALSE``, then ``TRUE`` once the VM is being preempted; it has 30 s from then (the
  deadline is counted from the first ``TRUE`` seen).

On a notice it writes ``DIR/<node>.json`` (``Notice``: node, provider, action, deadline and when
it was seen, in epoch seconds; written to a temporary name and renamed, so a reader never sees
half a file) and logs one line. It keeps running and writes again only if the notice changes.
``DIR`` is a folder every node sees (the bucket's mount): the trainer, on whichever node it runs,
reads every node's notice there (``rlinfra_node.verl_cpu.patches``: a due notice makes Verl save a
checkpoint at the end of the step). A metadata error is logged once per kind and never stops the
watcher; SIGTERM stops it with exit code 0. Standard library only.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol

# The node contract's spot providers (rlinfra.layout.SPOT_PROVIDERS, which this package cannot
# import); tests/unit/test_layout.py checks that the two agree.
PROVIDERS = ("aws", "gcp")
DEFAULT_ENDPOINTS = {"aws": "http://169.254.169.254", "gcp": "http://metadata.google.internal"}
DEFAULT_INTERVAL_S = {"aws": 5.0, "gcp": 1.0}
# The environment variable that tells the trainer's processes where the notices are.
NOTICE_DIR_ENV = "RLINFRA_NOTICE_DIR"
# The notice GCP gives from the moment `preempted` turns TRUE.
GCP_NOTICE_S = 30.0
GCP_ACTION = "preempt"
AWS_TOKEN_TTL_S = 21600
HTTP_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class Notice:
    """A node's coming preemption: ``deadline`` (epoch seconds) is when the node goes."""

    node: str
    provider: str
    action: str
    deadline: float
    seen: float

    @classmethod
    def from_json(cls, data: object) -> Notice:
        if not isinstance(data, dict):
            raise ValueError("a notice is a JSON object")
        return cls(
            node=str(data["node"]),
            provider=str(data["provider"]),
            action=str(data["action"]),
            deadline=float(data["deadline"]),
            seen=float(data["seen"]),
        )


class MetadataError(Exception):
    """The metadata service did not answer as documented; ``kind`` groups errors for logging."""

    def __init__(self, kind: str, detail: str = "") -> None:
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind


# ------------------------------------------------------------------------------------------
# Pure: the answers, the notice files' names and contents, which notice is due.


def parse_aws_action(body: bytes) -> tuple[str, float]:
    """(action, deadline in epoch seconds) of an ``instance-action`` answer."""
    try:
        data = json.loads(body)
        action = str(data["action"])
        stamp = str(data["time"]).strip()
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except (ValueError, KeyError, TypeError) as error:
        raise MetadataError("bad instance-action answer", repr(body[:200])) from error
    if when.tzinfo is None:
        raise MetadataError("bad instance-action answer", f"time {stamp!r} has no zone")
    return action, when.timestamp()


def parse_gcp_preempted(body: bytes) -> bool:
    text = body.decode("utf-8", "replace").strip().upper()
    if text not in ("TRUE", "FALSE"):
        raise MetadataError("bad preempted answer", repr(body[:200]))
    return text == "TRUE"


def notice_path(notice_dir: Path, node: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in node).lstrip(".") or "node"
    return notice_dir / f"{safe}.json"


def read_notices(notice_dir: Path) -> list[Notice]:
    """Every readable notice in ``notice_dir`` (files that are not notices are skipped)."""
    notices = []
    for path in sorted(notice_dir.glob("*.json")):
        try:
            notices.append(Notice.from_json(json.loads(path.read_text())))
        except (OSError, ValueError, KeyError):
            continue
    return notices


def due_notice(notices: Iterable[Notice], window_s: float, now: float) -> Notice | None:
    """The notice whose node goes soonest, if it goes within ``window_s`` from ``now``. Notices
    whose deadline has passed are left out: their node is gone (or a notice of an earlier run)."""
    due = [n for n in notices if 0 < n.deadline - now <= window_s]
    return min(due, key=lambda n: n.deadline) if due else None


# ------------------------------------------------------------------------------------------
# The metadata services (HTTP, no proxy: the service is link-local).


class Source(Protocol):
    def poll(self, now: float) -> tuple[str, float] | None:
        """(action, deadline) while a preemption is coming, else None; MetadataError if the
        service did not answer as documented."""
        ...


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _http(method: str, url: str, headers: dict[str, str]) -> tuple[int, bytes]:
    request = urllib.request.Request(url, method=method, headers=headers)
    try:
        with _OPENER.open(request, timeout=HTTP_TIMEOUT_S) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read()
    except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
        reason = getattr(error, "reason", error)
        raise MetadataError("metadata service unreachable", f"{url}: {reason}") from error


class AwsMetadata:
    """IMDSv2: a session token, renewed before it expires or when refused."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.token: str | None = None
        self.token_until = 0.0

    def _token(self, now: float) -> str:
        if self.token is None or now >= self.token_until:
            status, body = _http(
                "PUT",
                f"{self.endpoint}/latest/api/token",
                {"X-aws-ec2-metadata-token-ttl-seconds": str(AWS_TOKEN_TTL_S)},
            )
            if status != 200 or not body.strip():
                raise MetadataError(f"token refused (HTTP {status})")
            self.token = body.decode().strip()
            self.token_until = now + AWS_TOKEN_TTL_S / 2
        return self.token

    def poll(self, now: float) -> tuple[str, float] | None:
        url = f"{self.endpoint}/latest/meta-data/spot/instance-action"
        status, body = _http("GET", url, {"X-aws-ec2-metadata-token": self._token(now)})
        if status == 401:  # the token expired early: a new one next time
            self.token = None
            raise MetadataError("token expired (HTTP 401)")
        if status == 404:
            return None
        if status != 200:
            raise MetadataError(f"instance-action answered HTTP {status}")
        return parse_aws_action(body)


class GcpMetadata:
    """The ``preempted`` key; the deadline is counted from the first TRUE."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.first_seen: float | None = None

    def poll(self, now: float) -> tuple[str, float] | None:
        url = f"{self.endpoint}/computeMetadata/v1/instance/preempted"
        status, body = _http("GET", url, {"Metadata-Flavor": "Google"})
        if status != 200:
            raise MetadataError(f"preempted answered HTTP {status}")
        if not parse_gcp_preempted(body):
            return None
        if self.first_seen is None:
            self.first_seen = now
        return GCP_ACTION, self.first_seen + GCP_NOTICE_S


SOURCES: dict[str, Callable[[str], Source]] = {"aws": AwsMetadata, "gcp": GcpMetadata}


# ------------------------------------------------------------------------------------------
# The watcher.


def write_notice(notice_dir: Path, notice: Notice) -> Path:
    """Write ``notice`` under its node's name, atomically (temporary file, then rename)."""
    notice_dir.mkdir(parents=True, exist_ok=True)
    target = notice_path(notice_dir, notice.node)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(asdict(notice), sort_keys=True) + "\n")
    os.replace(temporary, target)
    return target


class Watcher:
    """One poll per ``step``: writes a new or changed notice, logs each kind of error once."""

    def __init__(
        self,
        source: Source,
        provider: str,
        node: str,
        notice_dir: Path,
        log: Callable[[str], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.source = source
        self.provider = provider
        self.node = node
        self.notice_dir = notice_dir
        self.log = log
        self.clock = clock
        self.written: Notice | None = None
        self.errors_logged: set[str] = set()

    def _error_once(self, kind: str, text: str) -> None:
        if kind not in self.errors_logged:
            self.errors_logged.add(kind)
            self.log(f"spot_watch: {text} (logged once; still polling)")

    def step(self) -> Notice | None:
        now = self.clock()
        try:
            seen = self.source.poll(now)
        except MetadataError as error:
            self._error_once(error.kind, str(error))
            return self.written
        if seen is None:
            return self.written
        action, deadline = seen
        if self.written is not None and (self.written.action, self.written.deadline) == seen:
            return self.written
        notice = Notice(self.node, self.provider, action, deadline, now)
        try:
            path = write_notice(self.notice_dir, notice)
        except OSError as error:
            self._error_once("write", f"could not write the notice into {self.notice_dir}: {error}")
            return self.written
        self.written = notice
        when = datetime.fromtimestamp(deadline).astimezone().isoformat(timespec="seconds")
        self.log(
            f"spot_watch: preemption notice for node {self.node}: {self.provider} {action} at "
            f"{when} (in {deadline - now:.0f} s); wrote {path}"
        )
        return notice

    def run(self, interval_s: float, stop: threading.Event) -> None:
        while not stop.is_set():
            self.step()
            stop.wait(interval_s)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="spot_watch", description=__doc__.splitlines()[0])
    parser.add_argument("--provider", choices=PROVIDERS, required=True)
    parser.add_argument("--notice-dir", type=Path, required=True)
    parser.add_argument("--endpoint", default=None, help="the metadata service's base URL")
    parser.add_argument("--interval", type=float, default=None, help="seconds between polls")
    parser.add_argument("--node", default=None, help="this node's name (default: hostname)")
    args = parser.parse_args(argv)
    if args.interval is not None and args.interval <= 0:
        parser.error("--interval must be positive")
    endpoint = args.endpoint or DEFAULT_ENDPOINTS[args.provider]
    interval = args.interval or DEFAULT_INTERVAL_S[args.provider]
    node = args.node or socket.gethostname()

    def log(text: str) -> None:
        print(text, flush=True)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    log(
        f"spot_watch: watching {args.provider} metadata at {endpoint} every {interval:g} s for "
        f"node {node}; notices go to {args.notice_dir}"
    )
    watcher = Watcher(SOURCES[args.provider](endpoint), args.provider, node, args.notice_dir, log)
    watcher.run(interval, stop)
    log("spot_watch: stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
