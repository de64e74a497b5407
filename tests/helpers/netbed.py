"""Throwaway hosts on this machine: network namespaces on a bridge, each with its own sshd, /opt
and /tmp (see the shared TESTBED notes). Needs root, iproute2, util-linux (unshare) and sshd.

Every testbed is its own: its names carry an id of its own (bridge ``rltb<id>``, namespaces
``rlt-<id>-n<i>``, veths ``rltv<id><i>``), its subnet is claimed (``claim_subnet``) so that two
test processes never take the same /24, and its teardown removes only what it made. Node i has
the address <subnet>.(10+i) and a default route via the bridge (no NAT, no forwarding: nothing
leaves the machine).

Run ``python -m helpers.netbed up [COUNT]`` / ``down ID`` from tests/ by hand to debug.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from helpers.locks import file_lock

NODE_IFACE = "eth0"
STATE_ROOT = Path("/var/tmp")
# `ip netns exec NAME` bind-mounts /etc/netns/NAME/* over /etc/*. The machine's nameserver is
# not reachable from the hosts (no forwarding), and every reverse lookup (torch.distributed's
# rendezvous does several) would wait for its timeout; a nameserver on the host's own loopback
# answers "refused" at once.
NETNS_ETC = Path("/etc/netns")
RESOLV_CONF = "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"

# Test subnets: 10.213.<third>.0/24 for these thirds. The local cloud derives its clusters'
# subnets from 16-239 and the built-in profiles name 240-241, so tests never meet them.
TEST_THIRDS = range(254, 241, -1)
CLAIMS = STATE_ROOT / "rlinfra-test-subnets"


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), check=check, text=True, capture_output=True)


def missing_requirements() -> list[str]:
    """Why this machine cannot host a testbed (empty when it can)."""
    problems = []
    if os.geteuid() != 0:
        problems.append("needs root")
    for tool in ("ip", "unshare", "ssh-keygen", "ssh"):
        if shutil.which(tool) is None:
            problems.append(f"needs {tool}")
    if not os.path.exists(SSHD):
        problems.append("needs sshd (openssh-server)")
    return problems


# ---- subnets --------------------------------------------------------------------------------


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _thirds_in_use() -> set[int]:
    text = _run("ip", "-o", "-4", "addr", "show", check=False).stdout
    text += _run("ip", "-4", "route", "show", "table", "all", check=False).stdout
    return {int(m) for m in re.findall(r"\b10\.213\.(\d+)\.", text)}


@dataclass
class SubnetClaim:
    """10.213.<third>.0/24, held by this process until ``release``."""

    third: int
    path: Path

    @property
    def cidr(self) -> str:
        return f"10.213.{self.third}.0/24"

    @property
    def prefix(self) -> str:
        return f"10.213.{self.third}"

    @property
    def gateway(self) -> str:
        return f"{self.prefix}.1"

    def address(self, host: int) -> str:
        return f"{self.prefix}.{host}"

    def release(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def claim_subnet() -> SubnetClaim:
    """A test /24 that no interface, route or other live claim on this machine uses.

    Claims are files named by the third octet holding the claiming pid; a claim whose process
    is gone is free again. The search and the claim run under one lock.
    """
    CLAIMS.mkdir(parents=True, exist_ok=True)
    with file_lock(CLAIMS / ".lock"):
        used = _thirds_in_use()
        for third in TEST_THIRDS:
            path = CLAIMS / str(third)
            if path.exists():
                with contextlib.suppress(ValueError, OSError):
                    if _pid_alive(int(path.read_text().split()[0])):
                        continue
            if third in used:
                continue
            path.write_text(f"{os.getpid()}\n")
            return SubnetClaim(third, path)
    raise RuntimeError(f"no free test subnet: 10.213.{TEST_THIRDS.stop + 1}-{TEST_THIRDS.start}")


def new_id() -> str:
    return uuid.uuid4().hex[:6]


# ---- the testbed ----------------------------------------------------------------------------


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

    ident: str
    root: Path
    subnet: SubnetClaim
    nodes: list[Node] = field(default_factory=list)

    @property
    def key(self) -> Path:
        return self.root / "id_ed25519"

    @property
    def bridge(self) -> str:
        return f"rltb{self.ident}"

    @property
    def netns_prefix(self) -> str:
        return f"rlt-{self.ident}-"

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

    def leftovers(self) -> list[str]:
        """What of this testbed is still on the machine (empty after ``teardown``)."""
        found = [f"netns {n}" for n in _netns_names() if n.startswith(self.netns_prefix)]
        links = _run("ip", "-o", "link", check=False).stdout
        found += [
            f"link {name}"
            for name in re.findall(r"^\d+: ([^:@]+)", links, flags=re.MULTILINE)
            if name in (self.bridge,) or name.startswith((f"rltv{self.ident}", f"rltp{self.ident}"))
        ]
        mounts = Path("/proc/mounts").read_text()
        found += [f"mount {m.split()[1]}" for m in mounts.splitlines() if str(self.root) in m]
        if self.root.exists():
            found.append(f"folder {self.root}")
        return found

    def teardown(self) -> None:
        """Remove everything this testbed made (also a half-made one). Safe to call twice."""
        for netns in _netns_names():
            if netns.startswith(self.netns_prefix):
                kill_netns(netns)
                _run("ip", "netns", "del", netns, check=False)
                shutil.rmtree(NETNS_ETC / netns, ignore_errors=True)
        with contextlib.suppress(OSError):
            if NETNS_ETC.exists() and not any(NETNS_ETC.iterdir()):
                NETNS_ETC.rmdir()
        for node in self.nodes:
            _run("ip", "link", "del", node.host_veth, check=False)
        _run("ip", "link", "del", self.bridge, check=False)
        shutil.rmtree(self.root, ignore_errors=True)
        self.subnet.release()


def _netns_names() -> list[str]:
    existing = _run("ip", "-j", "netns", "list", check=False).stdout.strip()
    return [n["name"] for n in json.loads(existing or "[]")]


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


def _sshd_config(node: Node, etc: Path) -> str:
    return "\n".join(
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


def setup(count: int = 2) -> Testbed:
    """Create ``count`` hosts of a testbed of their own. On any failure, removes what it made
    and raises."""
    ident = new_id()
    bed = Testbed(ident=ident, root=STATE_ROOT / f"rlt-testbed-{ident}", subnet=claim_subnet())
    try:
        bed.root.mkdir(parents=True)
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "rlt-testbed", "-f", str(bed.key))
        pubkey = bed.key.with_suffix(".pub").read_text()
        _run("ip", "link", "add", bed.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{bed.subnet.gateway}/24", "dev", bed.bridge)
        _run("ip", "link", "set", bed.bridge, "up")
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        for i in range(count):
            node = Node(
                index=i,
                name=f"rlt-n{i}",
                netns=f"{bed.netns_prefix}n{i}",
                ip=bed.subnet.address(10 + i),
                host_veth=f"rltv{ident}{i}",
                dir=bed.root / f"n{i}",
            )
            bed.nodes.append(node)
            for sub in ("opt", "tmp", "etc"):
                (node.dir / sub).mkdir(parents=True)
            node.tmp.chmod(0o1777)
            peer = f"rltp{ident}{i}"
            _run("ip", "netns", "add", node.netns)
            (NETNS_ETC / node.netns).mkdir(parents=True)
            (NETNS_ETC / node.netns / "resolv.conf").write_text(RESOLV_CONF)
            _run("ip", "link", "add", node.host_veth, "type", "veth", "peer", "name", peer)
            _run("ip", "link", "set", node.host_veth, "master", bed.bridge)
            _run("ip", "link", "set", node.host_veth, "up")
            _run("ip", "link", "set", peer, "netns", node.netns)
            ns = ("ip", "netns", "exec", node.netns)
            _run(*ns, "ip", "link", "set", peer, "name", NODE_IFACE)
            _run(*ns, "ip", "addr", "add", f"{node.ip}/24", "dev", NODE_IFACE)
            _run(*ns, "ip", "link", "set", NODE_IFACE, "up")
            _run(*ns, "ip", "link", "set", "lo", "up")
            _run(*ns, "ip", "route", "add", "default", "via", bed.subnet.gateway)

            etc = node.dir / "etc"
            host_key = str(etc / "ssh_host_ed25519_key")
            _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", host_key)
            (etc / "authorized_keys").write_text(pubkey)
            (etc / "authorized_keys").chmod(0o600)
            (etc / "sshd_config").write_text(_sshd_config(node, etc))
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
        bed.teardown()
        raise
    return bed


def teardown_id(ident: str) -> None:
    """Remove a testbed made by hand (``up``) by its id."""
    Testbed(
        ident=ident,
        root=STATE_ROOT / f"rlt-testbed-{ident}",
        subnet=SubnetClaim(0, CLAIMS / "none"),
        # Deleting a namespace deletes its veth pair; the list only names them for `ip link del`.
        nodes=[Node(i, "", "", "", f"rltv{ident}{i}", Path()) for i in range(8)],
    ).teardown()


if __name__ == "__main__":
    if sys.argv[1:2] == ["up"]:
        made = setup(int(sys.argv[2]) if len(sys.argv) > 2 else 2)
        # Its claim ends with this process; the bridge's address keeps the subnet taken.
        print(json.dumps({"id": made.ident, "inventory": made.inventory()}, indent=2))
    elif sys.argv[1:2] == ["down"] and len(sys.argv) == 3:
        teardown_id(sys.argv[2])
    else:
        sys.exit("usage: python -m helpers.netbed up [COUNT] | down ID")
