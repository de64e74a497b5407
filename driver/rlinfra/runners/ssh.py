"""SSH to cluster nodes with the deployment's key."""

from __future__ import annotations

import shlex
import socket
import subprocess
from pathlib import Path

from rlinfra import layout
from rlinfra.render import Host

NODE_ENV = layout.NODE_ENV


def ssh_argv(
    folder: Path, host: Host, *extra: str, tty: bool = False, known_hosts: str | None = None
) -> list[str]:
    """``ssh`` to ``host`` with its key (or the agent), port and bastion; ``known_hosts``: a
    file other than the deployment's (preflight, before the deployment folder exists)."""
    identity = (
        []
        if host.ssh_agent
        else ["-i", host.ssh_key or str(folder / "ssh" / "id_ed25519"), "-o", "IdentitiesOnly=yes"]
    )
    argv = [
        "ssh",
        *identity,
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        f"UserKnownHostsFile={known_hosts or folder / 'ssh' / 'known_hosts'}",
        "-o",
        "ConnectTimeout=10",
        "-o",
        "LogLevel=ERROR",
    ]
    if host.ssh_port != 22:
        argv += ["-p", str(host.ssh_port)]
    if host.ssh_proxy:
        argv += ["-o", f"ProxyCommand={host.ssh_proxy}"]
    if not tty:
        argv += ["-o", "BatchMode=yes"]
    else:
        argv += ["-t"]
    return [*argv, *extra, f"{host.ssh_user}@{host.ssh_host}"]


def remote_command(command: str) -> str:
    """Run ``command`` in bash on the node with the node contract loaded."""
    script = f"[ -r {NODE_ENV} ] && . {NODE_ENV}; cd ~ && {command}"
    return "bash -c " + shlex.quote(script)


def run(
    folder: Path,
    host: Host,
    command: str,
    capture: bool = False,
    timeout: float | None = None,
    stdin: bytes | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` on ``host``; ``stdin`` (bytes) is how secrets travel: never in argv."""
    if stdin is None:
        return subprocess.run(
            [*ssh_argv(folder, host), remote_command(command)],
            capture_output=capture,
            text=True,
            check=False,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    raw = subprocess.run(
        [*ssh_argv(folder, host), remote_command(command)],
        capture_output=capture,
        check=False,
        timeout=timeout,
        input=stdin,
    )
    return subprocess.CompletedProcess(
        raw.args,
        raw.returncode,
        raw.stdout.decode(errors="replace") if raw.stdout is not None else None,
        raw.stderr.decode(errors="replace") if raw.stderr is not None else None,
    )


def port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def free_local_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
