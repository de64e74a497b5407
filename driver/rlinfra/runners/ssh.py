"""SSH to cluster nodes with the deployment's key."""

from __future__ import annotations

import re
import shlex
import socket
import subprocess
from pathlib import Path

from rlinfra import layout
from rlinfra.record import Host

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


def run_attached(folder: Path, host: Host, command: str) -> tuple[int, str | None]:
    """Run ``command`` on ``host`` with its output on this terminal: (its exit status, why SSH
    could not connect, or None when the command ran).

    ssh writes its own messages to a log of its own (``-E``), apart from the command's standard
    error; a failure that is not a connection failure is passed on to standard error as ssh
    wrote it.
    """
    import sys
    import tempfile

    with tempfile.TemporaryDirectory(prefix="rlinfra-ssh-") as tmp:
        log = Path(tmp) / "ssh.log"
        code = subprocess.run(
            [*ssh_argv(folder, host, "-E", str(log)), remote_command(command)],
            check=False,
            stdin=subprocess.DEVNULL,
        ).returncode
        said = log.read_text(errors="replace") if log.is_file() else ""
    reason = connect_failure(code, said)
    if reason is None and said.strip():
        sys.stderr.write(said if said.endswith("\n") else said + "\n")
    return code, reason


# ssh's own lines when it could not reach a node or log in (its exit status is then 255, which
# a remote command may also exit with): the part after the pattern is the reason given.
_CONNECT_FAILURES = (
    re.compile(r"^ssh: connect to host \S+ port \d+: (?P<reason>.+)$"),
    re.compile(r"^ssh: Could not resolve hostname [^:]+: (?P<reason>.+)$"),
    re.compile(
        r"^(?:kex_exchange_identification: )?(?P<reason>Connection (?:closed|reset) by .+)$"
    ),
    re.compile(r"^(?P<reason>Connection timed out during banner exchange)$"),
    re.compile(r"^(?P<reason>Permission denied \(.+\))\.?$"),
    re.compile(r"^(?P<reason>Host key verification failed)\.?$"),
)
SSH_FAILED = 255


def connect_failure(returncode: int, stderr: str | None) -> str | None:
    """Why SSH reached no shell on the node (ssh's exit 255 and one of its own error lines),
    e.g. "Connection refused"; None when the command ran, whatever it exited with."""
    if returncode != SSH_FAILED or not stderr:
        return None
    for line in reversed(stderr.strip().splitlines()):
        for pattern in _CONNECT_FAILURES:
            found = pattern.match(line.strip())
            if found:
                return found["reason"].strip().rstrip(".")
    return None


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
