"""Commands on one node: exec, ssh."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from rlinfra import ui
from rlinfra.cli.common import ClusterArg, error_line
from rlinfra.errors import NodeUnreachableError


def exec_(
    cluster: ClusterArg,
    command: Annotated[list[str], typer.Argument(help="Command to run (after --).")],
    node: Annotated[
        int, typer.Option("--node", metavar="RANK", help="Node rank to run on (0 = head).")
    ] = 0,
    all_nodes: Annotated[bool, typer.Option("--all", help="Run on every node, in order.")] = False,
) -> None:
    """Run a command on a node with the node environment (RLINFRA_*, SKYPILOT_*) loaded."""
    import shlex

    from rlinfra.deploy import require_cluster
    from rlinfra.ops.nodes import node_of, run_command

    text = command[0] if len(command) == 1 else shlex.join(command)
    folder, record = require_cluster(cluster)
    hosts = list(record.hosts) if all_nodes else [node_of(cluster, node)[1]]
    worst = 0
    for host in hosts:
        if all_nodes:
            ui.err.print(f"--- {host.name}")
        try:
            code = run_command(cluster, folder, host, text)
        except NodeUnreachableError as exc:
            if not all_nodes:
                raise
            # With --all the other nodes still run it; this node's line says why it did not.
            ui.err.print(error_line(exc), style="red", soft_wrap=True)
            code = exc.exit_code
        worst = worst or code
    raise typer.Exit(worst)


def ssh(
    cluster: ClusterArg,
    node: Annotated[int, typer.Option("--node", metavar="RANK", help="Node rank (0 = head).")] = 0,
) -> None:
    """Open an interactive shell on a node."""
    from rlinfra.ops.nodes import node_of
    from rlinfra.runners import ssh as ssh_runner

    folder, host = node_of(cluster, node)
    argv = ssh_runner.ssh_argv(folder, host, tty=True)
    os.execvp(argv[0], argv)
