"""A cluster's head node for unit tests, where no sshd runs: an ``ssh`` that runs the node's
commands on this machine, and Ray's dashboard as far as rlinfra's ``ray`` commands ask it.

- ``stand_in_ssh(folder)`` writes an ``ssh`` program into ``folder``, to be put first on PATH.
  It runs the remote command (``bash -c ...`` as rlinfra sends it) in a local shell, standard
  input passed on, and exits with its status; the head's venv (``layout.VENV``) is this test
  process's venv, so the node's ``ray`` is the real Ray CLI. ``ssh -N -L`` (rlinfra's tunnels)
  listens on the local port and closes each connection, as ssh does when nothing listens at the
  far end. Every call's arguments are logged (``calls``).
- ``RayDashboard`` answers on a loopback port what Ray's dashboard answers to the requests that
  ``ray list nodes``, ``ray list jobs`` and ``ray job logs`` make: the version, the state API's
  node and job lists, and a job's log (404 ``Job ID does not exist`` for an id it lacks).
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from helpers.paths import BIN
from rlinfra import layout

STAND_IN_SSH = r"""#!{python}
import json, os, socket, subprocess, sys

here = os.path.dirname(os.path.abspath(__file__))
args = sys.argv[1:]
with open(os.path.join(here, "calls.log"), "a") as log:
    log.write(json.dumps(args) + "\n")
if "-N" in args:
    bind, port = args[args.index("-L") + 1].split(":")[:2]
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((bind, int(port)))
    server.listen()
    while True:
        conn, _ = server.accept()
        conn.close()
remote = args[-1].replace({node_bin!r}, {venv_bin!r})
env = dict(os.environ, PATH={venv_bin!r} + os.pathsep + os.environ.get("PATH", ""))
sys.exit(subprocess.run(remote, shell=True, env=env).returncode)
"""


def stand_in_ssh(folder: Path) -> Path:
    """Write the stand-in ``ssh`` into ``folder``; returns the folder (for PATH)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "ssh"
    path.write_text(
        STAND_IN_SSH.format(
            python=sys.executable, node_bin=f"{layout.VENV}/bin/", venv_bin=f"{BIN}/"
        )
    )
    path.chmod(0o755)
    return folder


def calls(folder: Path) -> list[list[str]]:
    """The arguments of every call of the stand-in ``ssh`` in ``folder``."""
    log = folder / "calls.log"
    if not log.is_file():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def node_state(ip: str, head: bool) -> dict[str, Any]:
    """One alive node as Ray's state API lists it."""
    return {
        "node_id": f"{'0' * 40}{ip.replace('.', '')}"[-56:],
        "node_ip": ip,
        "is_head_node": head,
        "state": "ALIVE",
        "state_message": None,
        "node_name": ip,
        "resources_total": {"CPU": 1.0},
        "labels": {},
        "start_time_ms": 1,
        "end_time_ms": 0,
    }


class RayDashboard:
    """The answers of a Ray dashboard with ``alive`` node IPs and ``jobs`` (id -> log)."""

    def __init__(self, alive: list[str], jobs: dict[str, str]) -> None:
        self.alive = alive
        self.jobs = jobs
        self.requests: list[str] = []

    def answer(self, path: str) -> tuple[int, str, str]:
        """(status, content type, body) for a GET of ``path``."""
        import ray

        self.requests.append(path)
        route = urlparse(path).path
        if route == "/api/version":
            version = {"version": "4", "ray_version": ray.__version__, "ray_commit": "stand-in"}
            return 200, "application/json", json.dumps({**version, "session_name": "s"})
        if route in ("/api/v0/nodes", "/api/v0/jobs"):
            rows: list[dict[str, Any]] = (
                [node_state(ip, i == 0) for i, ip in enumerate(self.alive)]
                if route.endswith("nodes")
                else []
            )
            listing = {
                "total": len(rows),
                "num_after_truncation": len(rows),
                "num_filtered": len(rows),
                "result": rows,
                "partial_failure_warning": "",
                "warnings": None,
            }
            body = {"result": True, "msg": "", "data": {"result": listing}}
            return 200, "application/json", json.dumps(body)
        parts = route.strip("/").split("/")
        if len(parts) == 4 and parts[:2] == ["api", "jobs"] and parts[3] == "logs":
            if parts[2] not in self.jobs:
                return 404, "text/plain", f"Job {parts[2]} does not exist"
            return 200, "application/json", json.dumps({"logs": self.jobs[parts[2]]})
        return 404, "text/plain", "404: Not Found"


@contextmanager
def ray_dashboard(alive: list[str], jobs: dict[str, str] | None = None) -> Iterator[int]:
    """A ``RayDashboard`` served on a free loopback port (a thread): yields the port."""
    dashboard = RayDashboard(alive, jobs or {})

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, kind, body = dashboard.answer(self.path)
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
