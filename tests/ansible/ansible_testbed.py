"""Throwaway hosts for the Ansible tests: network namespaces on a bridge, each with its own sshd,
/opt and /tmp (see shared TESTBED notes). Needs root, iproute2, util-linux (unshare) and sshd.

Layout (all names start with `rlt-`): bridge rlt-br0 holding GATEWAY, node i in namespace
rlt-n<i> with its end of the veth pair rlt-v<i> renamed eth0 and address SUBNET.(10+i), a default
route via the bridge (no NAT, no forwarding: nothing leaves the machine).

Run `python tests/ansible/ansible_testbed.py up|down` by hand to debug; the pytest fixture does the same.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "rlt-"
SUBNET = "10.213.251"
GATEWAY = f"{SUBNET}.1"
BRIDGE = f"{PREFIX}br0"
NODE_IFACE = "eth0"
DEFAULT_ROOT = Path("/var/tmp/rlt-testbed")
# `ip netns exec NAME` bind-mounts /etc/netns/NAME/* over /etc/*. The machine's nameserver is
# not reachable from the hosts (no forwarding), and every reverse lookup (torch.distributed's
# rendezvous does several) would wait for its timeout; a nameserver on the host's own loopback
# answers "refused" at once.
NETNS_ETC = Path("/etc/netns")
RESOLV_CONF = "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def _run(*argv: str, check: bool = True, capture: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), check=check, text=True, capture_output=capture)


def missing_requirements() -> list[str]:
    """Why this machine cannot host the testbed (empty when it can)."""
    problems = []
    if os.geteuid() != 0:
        problems.append("needs root")
    for tool in ("ip", "unshare", "ssh-keygen", "ssh"):
        if shutil.which(tool) is None:
            problems.append(f"needs {tool}")
    if not os.path.exists(SSHD):
        problems.append("needs sshd (openssh-server)")
    return problems


@dataclass
class Node:
    index: int
    name: str
    netns: str
    ip: str
    host_veth: str
    dir: Path
    sshd: subprocess.Popen[bytes] | None = None

    @property
    def opt(self) -> Path:
        return self.dir / "opt"

    @property
    def tmp(self) -> Path:
        return self.dir / "tmp"

    def exec_argv(self, *argv: str) -> list[str]:
        """argv that runs a command inside this host (its network, /opt and /tmp)."""
        script = f'mount --bind {self.opt} /opt && mount --bind {self.tmp} /tmp && exec "$@"'
        return [
            "ip",
            "netns",
            "exec",
            self.netns,
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
            *argv,
        ]


@dataclass
class Testbed:
    __test__ = False  # not a pytest test class

    root: Path
    nodes: list[Node] = field(default_factory=list)

    @property
    def key(self) -> Path:
        return self.root / "id_ed25519"

    def inventory(self) -> dict:
        def hostvars(node: Node) -> dict:
            return {
                "ansible_host": node.ip,
                "ansible_user": "root",
                "ansible_ssh_private_key_file": str(self.key),
                # The hosts share this machine's /root, whose shell setup puts pyenv shims first
                # on PATH; those break Ansible's interpreter discovery (python3.13 -> error).
                "ansible_python_interpreter": "/usr/bin/python3",
                "rlinfra_node_rank": node.index,
                "rlinfra_private_ip": node.ip,
                "rlinfra_interface_hint": NODE_IFACE,
            }

        head, workers = self.nodes[0], self.nodes[1:]
        return {
            "all": {
                "children": {
                    "rlinfra_nodes": {
                        "children": {
                            "rlinfra_head": {"hosts": {head.name: hostvars(head)}},
                            "rlinfra_workers": {"hosts": {n.name: hostvars(n) for n in workers}},
                        }
                    }
                }
            }
        }

    def ssh(
        self, node: Node, command: str, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run a shell command on a node over SSH, as Ansible does."""
        return subprocess.run(
            [
                "ssh",
                "-i",
                str(self.key),
                "-o",
                "StrictHostKeyChecking=no",
                "-o",
                "UserKnownHostsFile=/dev/null",
                "-o",
                "LogLevel=ERROR",
                "-o",
                "BatchMode=yes",
                "-o",
                "ConnectTimeout=5",
                f"root@{node.ip}",
                command,
            ],
            text=True,
            capture_output=True,
            timeout=timeout,
        )


def _netns_pids(netns: str) -> list[int]:
    out = _run("ip", "netns", "pids", netns, check=False)
    return [int(p) for p in out.stdout.split() if p.strip().isdigit()]


def kill_netns(netns: str, timeout: float = 10) -> None:
    """Kill every process in a network namespace (SIGKILL), until none is left."""
    deadline = time.monotonic() + timeout
    while True:
        pids = [p for p in _netns_pids(netns) if p != os.getpid()]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes left in {netns}: {pids}")
        time.sleep(0.2)


def teardown(root: Path = DEFAULT_ROOT, count: int = 8) -> None:
    """Remove everything a testbed (even a half-made one) may have left. Safe to call twice."""
    existing = _run("ip", "-j", "netns", "list", check=False).stdout.strip()
    names = [n["name"] for n in json.loads(existing or "[]") if n["name"].startswith(PREFIX)]
    for netns in names:
        kill_netns(netns)
        _run("ip", "netns", "del", netns, check=False)
    for etc in NETNS_ETC.glob(f"{PREFIX}*"):
        shutil.rmtree(etc, ignore_errors=True)
    if NETNS_ETC.exists() and not any(NETNS_ETC.iterdir()):
        NETNS_ETC.rmdir()
    for i in range(count):
        _run("ip", "link", "del", f"{PREFIX}v{i}", check=False)
    _run("ip", "link", "del", BRIDGE, check=False)
    if root.exists():
        shutil.rmtree(root, ignore_errors=True)


def _wait_port(ip: str, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((ip, port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def setup(count: int = 2, root: Path = DEFAULT_ROOT) -> Testbed:
    """Create `count` hosts. On any failure, removes what it made and raises."""
    teardown(root, count=max(count, 8))
    root.mkdir(parents=True)
    bed = Testbed(root=root)
    try:
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "rlt-testbed", "-f", str(bed.key))
        pubkey = bed.key.with_suffix(".pub").read_text()
        _run("ip", "link", "add", BRIDGE, "type", "bridge")
        _run("ip", "addr", "add", f"{GATEWAY}/24", "dev", BRIDGE)
        _run("ip", "link", "set", BRIDGE, "up")
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        for i in range(count):
            node = Node(
                index=i,
                name=f"{PREFIX}n{i}",
                netns=f"{PREFIX}n{i}",
                ip=f"{SUBNET}.{10 + i}",
                host_veth=f"{PREFIX}v{i}",
                dir=root / f"{PREFIX}n{i}",
            )
            bed.nodes.append(node)
            for sub in ("opt", "tmp", "etc"):
                (node.dir / sub).mkdir(parents=True)
            node.tmp.chmod(0o1777)
            peer = f"{PREFIX}p{i}"
            _run("ip", "netns", "add", node.netns)
            (NETNS_ETC / node.netns).mkdir(parents=True)
            (NETNS_ETC / node.netns / "resolv.conf").write_text(RESOLV_CONF)
            _run("ip", "link", "add", node.host_veth, "type", "veth", "peer", "name", peer)
            _run("ip", "link", "set", node.host_veth, "master", BRIDGE)
            _run("ip", "link", "set", node.host_veth, "up")
            _run("ip", "link", "set", peer, "netns", node.netns)
            ns = ("ip", "netns", "exec", node.netns)
            _run(*ns, "ip", "link", "set", peer, "name", NODE_IFACE)
            _run(*ns, "ip", "addr", "add", f"{node.ip}/24", "dev", NODE_IFACE)
            _run(*ns, "ip", "link", "set", NODE_IFACE, "up")
            _run(*ns, "ip", "link", "set", "lo", "up")
            _run(*ns, "ip", "route", "add", "default", "via", GATEWAY)

            etc = node.dir / "etc"
            _run(
                "ssh-keygen",
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-f",
                str(etc / "ssh_host_ed25519_key"),
            )
            (etc / "authorized_keys").write_text(pubkey)
            (etc / "authorized_keys").chmod(0o600)
            (etc / "sshd_config").write_text(
                "\n".join(
                    [
                        f"ListenAddress {node.ip}",
                        "Port 22",
                        f"HostKey {etc / 'ssh_host_ed25519_key'}",
                        f"PidFile {etc / 'sshd.pid'}",
                        f"AuthorizedKeysFile {etc / 'authorized_keys'}",
                        "PermitRootLogin prohibit-password",
                        "PasswordAuthentication no",
                        "KbdInteractiveAuthentication no",
                        "UsePAM no",
                        "StrictModes no",
                        "MaxSessions 64",
                        "MaxStartups 64:30:128",
                        "Subsystem sftp internal-sftp",
                        "",
                    ]
                )
            )
            log = open(node.dir / "sshd.log", "wb")  # noqa: SIM115 - kept open for the daemon
            node.sshd = subprocess.Popen(
                node.exec_argv(SSHD, "-D", "-e", "-f", str(etc / "sshd_config")),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        for node in bed.nodes:
            _wait_port(node.ip, 22, timeout=15)
    except BaseException:
        teardown(root, count=max(count, 8))
        raise
    return bed


if __name__ == "__main__":
    if sys.argv[1:2] == ["up"]:
        made = setup(int(sys.argv[2]) if len(sys.argv) > 2 else 2)
        print(json.dumps(made.inventory(), indent=2))
    elif sys.argv[1:2] == ["down"]:
        teardown()
    else:
        sys.exit("usage: ansible_testbed.py up [COUNT] | down")
