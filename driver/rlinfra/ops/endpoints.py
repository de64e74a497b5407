"""URLs for ports on the head node: direct, through an SSH tunnel, or from another cluster."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from rlinfra.deploy import RAY_TOKEN_FILE, require_cluster
from rlinfra.errors import OperationError
from rlinfra.ops.check import require_ready
from rlinfra.record import Record


class NotListening(OperationError):
    """Nothing listens on the port on the head node; ``endpoint`` is the URL it would have."""

    def __init__(self, message: str, hint: str, endpoint: dict[str, Any]) -> None:
        super().__init__(message, hint)
        self.endpoint = endpoint


def endpoint(cluster: str, port: int) -> dict[str, Any]:
    """A URL for ``port`` on the head node that works from this machine.

    Direct when the port answers on the head's address; otherwise through an SSH tunnel that
    rlinfra starts (and `down` stops). For Ray's dashboard (and job API) it also names the file
    that holds the cluster's token, which they ask for (never the token itself). The port is
    tried on the head first: when nothing listens there, NotListening carries the URL and names
    the ports the cluster serves.
    """
    from rlinfra.ops import reach

    folder, record = require_cluster(cluster)
    require_ready(cluster, record)
    head = record.hosts[0]
    listening = reach.listening(cluster, folder, head, port)
    info = endpoint_url(folder, record, port)
    if port == record.dashboard_port:
        info["ray_token_file"] = str(folder / RAY_TOKEN_FILE)
    info["listening"] = bool(listening)
    if not listening:
        raise NotListening(
            f"nothing listens on port {port} on the head node {head.name}",
            f"{cluster} serves {served(record)}",
            info,
        )
    return info


def served(record: Record) -> str:
    """The cluster's services and their ports, Ray's dashboard last: for a message."""
    rows = [f"{s.name} ({s.engine}) on port {s.port}" for s in record.services]
    rows.append(f"Ray's dashboard on port {record.dashboard_port}")
    return ", ".join(rows)


def endpoint_from(cluster: str, port: int, client: str) -> dict[str, Any]:
    """A URL for ``port`` on ``cluster``'s head that works from ``client``'s nodes, checked on
    ``client``'s head (see ``rlinfra.ops.reach``): what a trainer cluster gives its search tool."""
    from rlinfra.ops import reach

    _folder, record = require_cluster(cluster)
    require_ready(cluster, record)
    client_folder, client_record = require_cluster(client)
    require_ready(client, client_record)
    client_head = client_record.hosts[0]
    attempts = reach.run_check(client_folder, client_head, port, reach.candidates(record.hosts[0]))
    front = retrieval_port(record) == port
    return reach.choose(cluster, client, client_head, port, attempts, front=front)


def retrieval_port(record: Record, with_clients: bool = False) -> int | None:
    """The port of the cluster's retrieval endpoint (``with_clients``: only when it serves
    other clusters, and so checks who asks); None without one."""
    serving = (record.resolved_profile or {}).get("serving") or {}
    retrieval = serving.get("retrieval") or {}
    if not retrieval or (with_clients and not retrieval.get("clients")):
        return None
    return int(retrieval.get("port", 0))


def endpoint_url(folder: Path, record: Record, port: int) -> dict[str, Any]:
    from rlinfra.ops.reach import refuses
    from rlinfra.runners import ssh

    head = record.hosts[0]
    direct = not head.ssh_proxy and ssh.port_open(head.ssh_host, port)
    # A retrieval endpoint that serves other clusters (serving.retrieval.clients) may refuse
    # this machine: the tunnel arrives on the head's loopback, which it always lets in.
    if direct and retrieval_port(record, with_clients=True) == port:
        direct = not refuses(head.ssh_host, port)
    if direct:
        return {"url": f"http://{head.ssh_host}:{port}", "via": "direct", "port": port}
    tunnels = folder / "tunnels"
    tunnels.mkdir(exist_ok=True)
    meta_path = tunnels / f"{port}.json"
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        if pid_alive(meta["pid"]) and ssh.port_open("127.0.0.1", meta["local_port"]):
            return {
                "url": f"http://127.0.0.1:{meta['local_port']}",
                "via": "ssh-tunnel",
                "port": port,
                "pid": meta["pid"],
            }
    local = ssh.free_local_port()
    argv = ssh.ssh_argv(
        folder,
        head,
        "-N",
        "-o",
        "ExitOnForwardFailure=yes",
        "-L",
        f"127.0.0.1:{local}:127.0.0.1:{port}",
    )
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise OperationError(f"the SSH tunnel to {head.name}:{port} exited ({proc.returncode})")
        if ssh.port_open("127.0.0.1", local, timeout=0.3):
            break
        time.sleep(0.2)
    else:
        proc.terminate()
        raise OperationError(f"the SSH tunnel to {head.name}:{port} did not open")
    meta_path.write_text(json.dumps({"pid": proc.pid, "local_port": local, "remote_port": port}))
    return {"url": f"http://127.0.0.1:{local}", "via": "ssh-tunnel", "port": port, "pid": proc.pid}


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def stop_tunnels(folder: Path) -> None:
    tunnels = folder / "tunnels"
    if not tunnels.is_dir():
        return
    for meta_path in tunnels.glob("*.json"):
        pid = json.loads(meta_path.read_text()).get("pid")
        if pid and pid_alive(pid):
            os.kill(pid, signal.SIGTERM)
        meta_path.unlink()
