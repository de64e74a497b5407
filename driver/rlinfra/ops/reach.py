"""Whether one cluster's nodes reach a service on another cluster's head, checked from there.

A trainer cluster that uses a retrieval cluster (``serving.retrieval.clients``) needs an address
of the retrieval head that the trainer's nodes reach, and the retrieval service must let the
trainer's address in. Neither can be seen from the controller: clouds put the clusters in
networks of their own, and the controller's view (an SSH tunnel, a public address) is not the
trainer's. ``rlinfra status RETRIEVAL --endpoint PORT --from TRAINER`` therefore runs a check on
the trainer's head, over SSH: for each address of the service's head (its private address, then
the one SSH uses), it connects, asks ``GET /healthz`` and reports the status line and the source
address its packets left from. The first address that answers with success (for the retrieval
endpoint: the front's own header, naming at least one replica) is the URL to give the trainer
(``--env RETRIEVAL_SERVICE_URL=...``); when none does, the error says what each address did
and which address to list in the service's ``clients``.

``listening`` is the plainer check behind ``rlinfra status CLUSTER --endpoint PORT``: whether
anything accepts a TCP connection on a port of a node, tried on that node (a service may listen
on its loopback only, where the controller cannot look).
"""

from __future__ import annotations

import http.client
import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlinfra.errors import OperationError
from rlinfra.record import Host

# Runs on the client's head with its system Python (standard library only): argv is the port,
# then the addresses to try; prints one JSON list.
CHECK_SCRIPT = r"""
import json, socket, sys

port = int(sys.argv[1])
rows = []
for address in sys.argv[2:]:
    row = {"address": address, "source": None, "status": None, "body": "", "error": None,
           "replicas": None}
    try:
        probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        probe.connect((address, port))
        row["source"] = probe.getsockname()[0]
        probe.close()
    except OSError:
        pass
    try:
        conn = socket.create_connection((address, port), timeout=5)
    except OSError as exc:
        row["error"] = "timed out" if isinstance(exc, socket.timeout) else (exc.strerror or str(exc))
        rows.append(row)
        continue
    with conn:
        conn.settimeout(10)
        row["source"] = conn.getsockname()[0]
        try:
            conn.sendall(
                b"GET /healthz HTTP/1.1\r\nHost: " + address.encode() + b"\r\n"
                b"Connection: close\r\n\r\n"
            )
            data = b""
            while len(data) < 65536:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
        except OSError as exc:
            row["error"] = "no answer: " + (exc.strerror or str(exc) or type(exc).__name__)
            rows.append(row)
            continue
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    parts = lines[0].split()
    if len(parts) >= 2 and parts[0].startswith(b"HTTP/") and parts[1].isdigit():
        row["status"] = int(parts[1])
        row["body"] = body[:600].decode("utf-8", "replace")
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"x-rlinfra-replicas" and value.strip().isdigit():
                row["replicas"] = int(value.strip())
    else:
        row["error"] = "not HTTP: " + repr(data[:40])
    rows.append(row)
print(json.dumps(rows))
"""


# Runs on the node with its system Python (standard library only): argv is the port, then the
# addresses to try; prints the JSON list of those that accepted a connection.
LISTEN_SCRIPT = r"""
import json, socket, sys

port = int(sys.argv[1])
found = []
for address in sys.argv[2:]:
    try:
        socket.create_connection((address, port), timeout=3).close()
    except OSError:
        continue
    found.append(address)
print(json.dumps(found))
"""


@dataclass(frozen=True)
class Attempt:
    """What the client's head saw at one address of the service's head."""

    address: str
    source: str | None
    status: int | None
    body: str
    error: str | None
    # The retrieval front's x-rlinfra-replicas header (replicas it routes to), when it sent one.
    replicas: int | None = None

    def usable(self, front: bool) -> bool:
        """A success; for a retrieval front (``front``), also its own header with at least one
        replica: some other HTTP service at a private address that the two networks both use
        (clouds reuse ranges) does not pass."""
        ok = self.status is not None and 200 <= self.status < 400
        return ok and (not front or (self.replicas or 0) > 0)

    def describe(self, front: bool = False) -> str:
        if self.status == 403:
            return f"{self.address}: refused (403): {_error_text(self.body)}"
        if self.status is not None and front and self.replicas is None:
            return f"{self.address}: HTTP {self.status}, not the retrieval front (another service?)"
        if self.status is not None and front and not self.replicas:
            return f"{self.address}: HTTP {self.status}, the front routes to no replica yet"
        if self.status is not None:
            return f"{self.address}: HTTP {self.status}"
        return f"{self.address}: {self.error}"


def _error_text(body: str) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return body.strip()[:200]
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        return str(data["error"])
    return body.strip()[:200]


def candidates(head: Host) -> list[str]:
    """The service head's addresses a client may use: private first (same network), then the
    one SSH uses (often public); an address behind a jump host is still tried."""
    out: list[str] = []
    for address in (head.private_ip, head.ssh_host):
        if address and address not in out:
            out.append(address)
    return out


def _run_script(
    cluster: str | None,
    folder: Path,
    host: Host,
    what: str,
    script: str,
    port: int,
    addresses: list[str],
) -> list[Any]:
    """Run ``script`` on ``host`` with its system Python (the script on stdin, the port and
    addresses in argv) and return the JSON list it prints last. SSH that cannot connect is
    ``NodeUnreachableError`` naming the node (with ``cluster``)."""
    from rlinfra.ops.nodes import unreachable
    from rlinfra.runners import ssh

    command = shlex.join(["python3", "-", str(port), *addresses])
    done = ssh.run(folder, host, command, capture=True, timeout=60, stdin=script.encode())
    reason = ssh.connect_failure(done.returncode, done.stderr)
    if reason is not None and cluster is not None:
        raise unreachable(cluster, host, reason)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout or "").strip().splitlines()[-1:] or ["no output"]
        raise OperationError(f"the {what} on {host.name} exited {done.returncode}: {tail[0]}")
    try:
        rows = json.loads((done.stdout or "").strip().splitlines()[-1])
    except (ValueError, IndexError):
        rows = None
    if not isinstance(rows, list):
        raise OperationError(f"the {what} on {host.name} printed no result: {done.stdout!r:.200}")
    return rows


def run_check(
    client_folder: Path, client_head: Host, port: int, addresses: list[str]
) -> list[Attempt]:
    """Run ``CHECK_SCRIPT`` on ``client_head``: each address's answer to ``GET /healthz``."""
    rows = _run_script(
        None, client_folder, client_head, "reach check", CHECK_SCRIPT, port, addresses
    )
    return [
        Attempt(
            str(row["address"]),
            row.get("source"),
            row.get("status"),
            str(row.get("body") or ""),
            row.get("error"),
            row.get("replicas"),
        )
        for row in rows
    ]


def listening(cluster: str, folder: Path, host: Host, port: int) -> list[str]:
    """The node's addresses (loopback, then its private one) on which something accepts a TCP
    connection to ``port``, tried on the node itself over SSH."""
    addresses = ["127.0.0.1"]
    if host.private_ip and host.private_ip not in addresses:
        addresses.append(host.private_ip)
    found = _run_script(cluster, folder, host, "port check", LISTEN_SCRIPT, port, addresses)
    return [str(address) for address in found]


def choose(
    cluster: str,
    client: str,
    client_head: Host,
    port: int,
    attempts: list[Attempt],
    front: bool = False,
) -> dict[str, Any]:
    """The endpoint from the first usable attempt, or an error that says what to change;
    ``front``: the port is the cluster's retrieval endpoint."""
    for attempt in attempts:
        if attempt.usable(front):
            return {
                "url": f"http://{attempt.address}:{port}",
                "via": "from-cluster",
                "port": port,
                "from": client,
                "checked": {
                    "node": client_head.name,
                    "source": attempt.source,
                    "request": "GET /healthz",
                    "status": attempt.status,
                },
            }
    seen = "; ".join(attempt.describe(front) for attempt in attempts)
    sources = sorted({a.source for a in attempts if a.source})
    refused = any(a.status == 403 for a in attempts)
    if refused:
        hint = (
            f"Add the address the service named to serving.retrieval.clients in {cluster}'s "
            f"profile, then run `rlinfra up --cluster {cluster}` again."
        )
    else:
        named = ", ".join(sources) or "unknown"
        public = (
            f" or, where its traffic leaves through NAT, its public address (SSH reaches it at "
            f"{client_head.ssh_host})"
            if client_head.ssh_host not in sources
            else ""
        )
        hint = (
            f"Is the service on port {port} running (`rlinfra status {cluster}`)? If {cluster} "
            f"serves {client}, list {client}'s address ({named}{public}) in "
            f"serving.retrieval.clients of {cluster}'s profile and run `rlinfra up --cluster "
            f"{cluster}` again; the networks must also route to each other."
        )
    raise OperationError(
        f"{client}'s head ({client_head.name}) cannot use port {port} of {cluster}'s head: {seen}",
        hint,
    )


def refuses(address: str, port: int, timeout: float = 2.0) -> bool:
    """Whether an HTTP service at ``address:port`` answers this machine 403 (an allow list that
    does not name it); anything else, an error included, is False."""
    conn = http.client.HTTPConnection(address, port, timeout=timeout)
    try:
        conn.request("GET", "/healthz")
        return conn.getresponse().status == 403
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()
