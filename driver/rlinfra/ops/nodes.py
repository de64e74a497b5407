"""One node of a cluster from this machine: pick it by rank, run a command on it over SSH, and
the one error for a node that SSH cannot reach."""

from __future__ import annotations

from pathlib import Path

from rlinfra.deploy import require_cluster
from rlinfra.errors import NodeUnreachableError, UsageError
from rlinfra.record import Host


def node_of(cluster: str, node: int) -> tuple[Path, Host]:
    """The deployment folder and the node of rank ``node``; UsageError for a rank it lacks."""
    folder, record = require_cluster(cluster)
    hosts = list(record.hosts)
    if not hosts:
        raise UsageError(f"cluster {cluster!r} is down")
    if not 0 <= node < len(hosts):
        raise UsageError(f"--node {node}: cluster {cluster!r} has nodes 0-{len(hosts) - 1}")
    return folder, hosts[node]


def address(host: Host) -> str:
    """Where SSH goes for ``host``: its address, and its port where it is not 22."""
    return host.ssh_host if host.ssh_port == 22 else f"{host.ssh_host} port {host.ssh_port}"


def unreachable(cluster: str, host: Host, reason: str) -> NodeUnreachableError:
    """SSH reached no shell on ``host``: the error that names it and what to do."""
    return NodeUnreachableError(
        f"SSH could not connect to node {host.name} ({address(host)}): {reason}",
        f"See the cluster with `rlinfra status {cluster}`; `rlinfra up -c {cluster}` replaces "
        "a node that is gone",
    )


def run_command(cluster: str, folder: Path, host: Host, command: str) -> int:
    """Run ``command`` on ``host``, its output on this terminal; the command's exit status.

    Raises NodeUnreachableError when SSH could not connect: a command that ran and failed
    returns its own status, 255 included.
    """
    from rlinfra.runners import ssh

    code, reason = ssh.run_attached(folder, host, command)
    if reason is not None:
        raise unreachable(cluster, host, reason)
    return code
