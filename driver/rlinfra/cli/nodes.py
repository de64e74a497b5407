"""Commands on one node: exec, ssh."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from rlinfra import ui
from rlinfra.cli.common import ClusterArg
from rlinfra.errors import UsageError


def node_of(cluster: str, node: int) -> tuple[Path, Any]:
    from rlinfra.deploy import require_cluster

    folder, record = require_cluster(cluster)
    hosts = list(record.hosts)
    if not hosts:
        raise UsageError(f"cluster {cluster!r} is down")
    if not 0 <= node < len(hosts):
        raise UsageError(f"--node {node}: cluster {cluster!r} has nodes 0-{len(hosts) - 1}")
    return folder, hosts[node]


def exec_(
    cluster: ClusterArg,
    command: Annotated[list[str], typer.Argument(help="Command to run (after --).")],
    node: Annotated[int, typer.Option("--node", help="Node rank to run on (0 = head).")] = 0,
    all_nodes: Annotated[bool, typer.Option("--all", help="Run on every node, in order.")] = False,
) -> None:
    """Run a command on a node with the node environment (RLINFRA_*, SKYPILOT_*) loaded."""
    import shlex

    from rlinfra.deploy import require_cluster
    from rlinfra.runners import ssh

    text = command[0] if len(command) == 1 else shlex.join(command)
    folder, record = require_cluster(cluster)
    hosts = list(record.hosts) if all_nodes else [node_of(cluster, node)[1]]
    worst = 0
    for host in hosts:
        if all_nodes:
            ui.err.print(f"--- {host.name}")
        code = ssh.run(folder, host, text).returncode
        worst = worst or code
    raise typer.Exit(worst)


def ssh(
    cluster: ClusterArg,
    node: Annotated[int, typer.Option("--node", help="Node rank (0 = head).")] = 0,
) -> None:
    """Open an interactive shell on a node."""
    from rlinfra.runners import ssh as ssh_runner

    folder, host = node_of(cluster, node)
    argv = ssh_runner.ssh_argv(folder, host, tty=True)
    os.execvp(argv[0], argv)
