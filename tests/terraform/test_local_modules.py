"""Real `terraform apply` / `destroy` of the local cloud's modules: local_cluster and local_bucket.

The cluster tests build real hosts on this machine (a bridge, network namespaces, veth links, an
sshd per node), so they need root, iproute2 and openssh-server; they skip with the reason
otherwise. Each run uses its own cluster names and a /24 claimed for it (helpers.netbed), talks only to its
own node addresses, and removes everything it made, also when a test fails.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import textwrap
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from helpers.netbed import SubnetClaim, claim_subnet

REPO = Path(__file__).resolve().parents[2]
MODULES = REPO / "terraform" / "modules"
HOST_SCRIPT = MODULES / "local_cluster" / "scripts" / "host.sh"
VIEW_ROOT = Path("/run/rlinfra")


def _find_sshd() -> str | None:
    found = shutil.which("sshd")
    if found:
        return found
    return "/usr/sbin/sshd" if os.access("/usr/sbin/sshd", os.X_OK) else None


def _terraform_skip_reason() -> str | None:
    if shutil.which("terraform") is None:
        return "terraform is not on PATH"
    return None


def _hosts_skip_reason() -> str | None:
    reason = _terraform_skip_reason()
    if reason:
        return reason
    if os.geteuid() != 0:
        return "the local cloud needs root (network namespaces, veth links, bind mounts)"
    if _find_sshd() is None:
        return "sshd not found (Debian: apt-get install openssh-server)"
    for command, package in (
        ("ip", "iproute2"),
        ("unshare", "util-linux"),
        ("ssh", "openssh-client"),
        ("ssh-keygen", "openssh-client"),
    ):
        if shutil.which(command) is None:
            return f"{command} not found (Debian: apt-get install {package})"
    return None


needs_terraform = pytest.mark.skipif(
    _terraform_skip_reason() is not None, reason=str(_terraform_skip_reason())
)
needs_hosts = pytest.mark.skipif(_hosts_skip_reason() is not None, reason=str(_hosts_skip_reason()))


# --- helpers -------------------------------------------------------------------------------------


def short_id(cluster_name: str) -> str:
    """The module's `substr(sha1(cluster_name), 0, 8)`."""
    return hashlib.sha1(cluster_name.encode()).hexdigest()[:8]


def unique_cluster_name() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    kwargs.setdefault("timeout", 300)
    return subprocess.run(argv, **kwargs)


def ssh(key: Path, ip: str, command: str) -> subprocess.CompletedProcess[str]:
    return run(
        [
            "ssh",
            "-F",
            "/dev/null",
            "-i",
            str(key),
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=5",
            "-o",
            "LogLevel=ERROR",
            f"root@{ip}",
            command,
        ],
        timeout=60,
    )


def ssh_ok(key: Path, ip: str, command: str) -> str:
    result = ssh(key, ip, command)
    assert result.returncode == 0, f"ssh {ip} {command!r}: {result.stderr}"
    return result.stdout


def pid_alive(pid: int) -> bool:
    """True for a running process; a zombie waiting for its parent counts as gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith("State:"):
            return line.split()[1] != "Z"
    return False


def netns_names() -> list[str]:
    out = run(["ip", "netns", "list"], check=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def link_names() -> list[str]:
    out = run(["ip", "-o", "link", "show"], check=True).stdout
    names = []
    for line in out.splitlines():
        # "7: rlv0123abcd1@if2: <...>"
        names.append(line.split(":", 2)[1].strip().split("@")[0])
    return names


def mounts_under(path: Path) -> list[str]:
    prefix = str(path)
    found = []
    for line in Path("/proc/mounts").read_text().splitlines():
        mount_point = line.split()[1]
        if mount_point == prefix or mount_point.startswith(prefix + "/"):
            found.append(mount_point)
    return found


@dataclass
class Terraform:
    """terraform in one working folder, with its own CLI config and no colour."""

    workdir: Path
    env: dict[str, str]

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = run(["terraform", *args], cwd=self.workdir, env=self.env)
        if check and result.returncode != 0:
            pytest.fail(
                f"terraform {' '.join(args)} exited {result.returncode}\n"
                f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
            )
        return result

    def init(self) -> None:
        self("init", "-input=false", "-no-color")

    def output(self, name: str) -> Any:
        return json.loads(self("output", "-no-color", "-json", name).stdout)


def terraform_env(tmp: Path) -> dict[str, str]:
    # The machine's environment may point TF_CLI_CONFIG_FILE at a missing file: use an empty one.
    cli_config = tmp / "terraformrc"
    cli_config.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_")}
    env.update(
        TF_CLI_CONFIG_FILE=str(cli_config),
        TF_IN_AUTOMATION="1",
        TF_INPUT="0",
        CHECKPOINT_DISABLE="1",
        # host.sh node-destroy: seconds between SIGTERM and SIGKILL (10 unless set).
        RLINFRA_KILL_WAIT_S="3",
    )
    return env


def example_root(tmp: Path, module: str) -> Terraform:
    """A copy of terraform/modules/<module> in tmp; returns terraform in its examples/basic."""
    copy = tmp / module
    shutil.copytree(
        MODULES / module,
        copy,
        ignore=shutil.ignore_patterns(".terraform", "*.tfstate*", ".terraform.lock.hcl", "nodes"),
    )
    tf = Terraform(copy / "examples" / "basic", terraform_env(tmp))
    tf.init()
    return tf


@dataclass
class LocalCluster:
    tf: Terraform
    name: str
    claim: SubnetClaim
    node_count: int
    state_dir: Path
    key: Path
    disk_size: str = "4g"
    inventory: dict[str, Any] = field(default_factory=dict)
    network: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return short_id(self.name)

    @property
    def subnet(self) -> str:
        return self.claim.cidr

    def vars(self, **overrides: str) -> list[str]:
        values = {
            "cluster_name": self.name,
            "node_count": str(self.node_count),
            "subnet_cidr": self.subnet,
            "state_dir": str(self.state_dir),
            "ssh_public_key_path": f"{self.key}.pub",
            "node_disk_size": self.disk_size,
            **overrides,
        }
        return [f"-var={k}={v}" for k, v in values.items()]

    def apply(self) -> subprocess.CompletedProcess[str]:
        result = self.tf("apply", "-auto-approve", "-input=false", "-no-color", *self.vars())
        self.inventory = self.tf.output("inventory")
        self.network = self.tf.output("network")
        return result

    def destroy(self, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.tf(
            "destroy", "-auto-approve", "-input=false", "-no-color", *self.vars(), check=check
        )

    def node_ips(self) -> list[str]:
        return [node["ssh_host"] for node in self.inventory["nodes"]]

    def sshd_pids(self) -> list[int]:
        pids = []
        for pid_file in self.state_dir.glob("*/sshd.pid"):
            text = pid_file.read_text().strip()
            if text.isdigit():
                pids.append(int(text))
        return pids

    def node_env(self, rank: int) -> dict[str, str]:
        """The RLINFRA_* inputs that the module hands host.sh node-create for one node."""
        node = self.inventory["nodes"][rank]
        return {
            **os.environ,
            "RLINFRA_CLUSTER": self.name,
            "RLINFRA_NODE_NAME": node["name"],
            "RLINFRA_NETNS": node["netns"],
            "RLINFRA_VETH": f"rlv{self.id}{rank}",
            "RLINFRA_BRIDGE": self.network["bridge"],
            "RLINFRA_NODE_IP": node["private_ip"],
            "RLINFRA_NODE_MAC": ":".join(["02", *textwrap.wrap(self.id, 2), f"{10 + rank:02x}"]),
            "RLINFRA_PREFIX_LEN": "24",
            "RLINFRA_GATEWAY": self.network["gateway"],
            "RLINFRA_NODE_DIR": str(self.state_dir / node["name"]),
            "RLINFRA_AUTHORIZED_KEY": Path(f"{self.key}.pub").read_text().strip(),
        }

    def leftovers(self) -> dict[str, list[Any]]:
        """What of this cluster is still on the machine; all lists empty once it is destroyed."""
        return {
            "netns": [n for n in netns_names() if n.startswith(f"rl-{self.id}-")],
            "links": [n for n in link_names() if n.startswith((f"rlv{self.id}", f"rlb-{self.id}"))],
            "mounts": mounts_under(self.state_dir),
            "node_dirs": sorted(p.name for p in self.state_dir.glob(f"{self.name}-*")),
            "views": sorted(p.name for p in VIEW_ROOT.glob(f"rl-{self.id}-*")),
        }

    def force_cleanup(self) -> None:
        """Fallback after a failed destroy: remove this cluster's namespaces, links and sshds."""
        pids = {p for p in self.sshd_pids() if pid_alive(p)}
        for ns in [n for n in netns_names() if n.startswith(f"rl-{self.id}-")]:
            out = run(["ip", "netns", "pids", ns]).stdout
            pids.update(int(p) for p in out.split() if p.isdigit())
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        for ns in [n for n in netns_names() if n.startswith(f"rl-{self.id}-")]:
            run(["ip", "netns", "delete", ns])
        for link in link_names():
            if link.startswith((f"rlv{self.id}", f"rlb-{self.id}")):
                run(["ip", "link", "delete", "dev", link])
        for view in VIEW_ROOT.glob(f"rl-{self.id}-*"):
            for mount_point in mounts_under(view):
                run(["umount", "-l", mount_point])
            view.rmdir()
        for node_dir in self.state_dir.glob(f"{self.name}-*"):
            for mount_point in mounts_under(node_dir):
                run(["umount", "-l", mount_point])
            shutil.rmtree(node_dir, ignore_errors=True)


def make_cluster(tmp: Path, node_count: int, disk_size: str = "4g") -> LocalCluster:
    key = tmp / "id_ed25519"
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    state_dir = tmp / "nodes"
    state_dir.mkdir()
    return LocalCluster(
        tf=example_root(tmp, "local_cluster"),
        name=unique_cluster_name(),
        claim=claim_subnet(),
        node_count=node_count,
        state_dir=state_dir,
        key=key,
        disk_size=disk_size,
    )


@pytest.fixture
def make_local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Factory of applied clusters; each is destroyed at the end, with a fallback cleanup."""
    made: list[LocalCluster] = []

    def make(node_count: int = 2, disk_size: str = "4g") -> LocalCluster:
        cluster = make_cluster(tmp_path_factory.mktemp("cluster"), node_count, disk_size)
        made.append(cluster)
        cluster.apply()
        return cluster

    yield make
    _teardown(made)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One two-node cluster, applied once, shared by the read-only checks."""
    reason = _hosts_skip_reason()
    if reason:
        pytest.skip(reason)
    made = [make_cluster(tmp_path_factory.mktemp("cluster"), 2)]
    try:
        made[0].apply()
        yield made[0]
    finally:
        _teardown(made)


def _teardown(clusters: list[LocalCluster]) -> None:
    failures = []
    for cluster in clusters:
        try:
            result = cluster.destroy(check=False)
            if result.returncode != 0:
                failures.append(f"{cluster.name}: terraform destroy failed:\n{result.stderr}")
        finally:
            cluster.force_cleanup()
            cluster.claim.release()
    if failures:
        pytest.fail("\n".join(failures))


# --- local_cluster -------------------------------------------------------------------------------


@needs_hosts
def test_cluster_inventory_follows_the_contract(cluster: LocalCluster) -> None:
    inventory = cluster.inventory
    assert set(inventory) == {"cluster_name", "ssh_user", "nodes"}
    assert inventory["cluster_name"] == cluster.name
    assert inventory["ssh_user"] == "root"
    base = cluster.subnet.rsplit(".", 1)[0]
    expected = [
        {
            "name": f"{cluster.name}-{rank}",
            "rank": rank,
            "ssh_host": f"{base}.{10 + rank}",
            "private_ip": f"{base}.{10 + rank}",
            "interface": "eth0",
            "netns": f"rl-{cluster.id}-{rank}",
        }
        for rank in range(2)
    ]
    assert inventory["nodes"] == expected
    assert cluster.network["bridge"] == f"rlb-{cluster.id}"
    assert cluster.network["gateway"] == f"{base}.1"


@needs_hosts
def test_cluster_node_routes_through_eth0(cluster: LocalCluster) -> None:
    for node in cluster.inventory["nodes"]:
        route = ssh_ok(cluster.key, node["ssh_host"], "ip route get 8.8.8.8")
        assert "dev eth0" in route, route
        addresses = ssh_ok(cluster.key, node["ssh_host"], "ip -o -4 addr show dev eth0")
        assert f"inet {node['private_ip']}/24" in addresses


@needs_hosts
def test_cluster_nodes_have_their_own_opt_and_tmp(cluster: LocalCluster) -> None:
    first, second = cluster.node_ips()
    marker = f"rlinfra-test-{uuid.uuid4().hex}"
    ssh_ok(cluster.key, first, f"touch /tmp/{marker} /opt/{marker}")
    for folder in ("tmp", "opt"):
        assert ssh(cluster.key, first, f"test -e /{folder}/{marker}").returncode == 0
        assert ssh(cluster.key, second, f"test -e /{folder}/{marker}").returncode == 1
        assert not Path(f"/{folder}/{marker}").exists(), f"/{folder} of the host sees the file"
        node_dir = cluster.state_dir / cluster.inventory["nodes"][0]["name"]
        assert (node_dir / folder / marker).exists()
    assert ssh_ok(cluster.key, first, "stat -c %a /tmp").strip() == "1777"


def mount_types_under(path: Path) -> dict[str, str]:
    """Mount point -> filesystem type, for the machine's mounts at or below a folder."""
    found = {}
    for line in Path("/proc/mounts").read_text().splitlines():
        _, mount_point, fs_type, *_ = line.split()
        if mount_point == str(path) or mount_point.startswith(f"{path}/"):
            found[mount_point] = fs_type
    return found


@needs_hosts
def test_cluster_node_disks_are_tmpfs_seen_from_the_machine(cluster: LocalCluster) -> None:
    """/opt and /tmp of a node are tmpfs mounts of the node folder, capped at node_disk_size."""
    first = cluster.node_ips()[0]
    seen = ssh_ok(cluster.key, first, "stat -f -c %T /opt /tmp; df -k --output=size /opt /tmp")
    kinds, sizes = seen.split()[:2], [int(v) for v in seen.split()[3:]]
    assert kinds == ["tmpfs", "tmpfs"]
    assert sizes == [4 * 1024 * 1024] * 2, "node_disk_size 4g caps each disk"
    node_dir = cluster.state_dir / cluster.inventory["nodes"][0]["name"]
    assert mount_types_under(node_dir) == {
        str(node_dir / "opt"): "tmpfs",
        str(node_dir / "tmp"): "tmpfs",
    }
    assert (node_dir / "opt").stat().st_mode & 0o7777 == 0o755


@needs_hosts
def test_cluster_empty_disk_size_keeps_plain_folders(make_local_cluster: Any) -> None:
    cluster = make_local_cluster(1, disk_size="")
    [ip] = cluster.node_ips()
    node_dir = cluster.state_dir / cluster.inventory["nodes"][0]["name"]
    assert mount_types_under(cluster.state_dir) == {}
    assert ssh_ok(cluster.key, ip, "stat -f -c %T /opt").strip() != "tmpfs"
    ssh_ok(cluster.key, ip, "echo on-disk > /opt/marker")
    assert (node_dir / "opt" / "marker").read_text() == "on-disk\n"


@needs_hosts
def test_cluster_nodes_have_their_own_bashrc(cluster: LocalCluster) -> None:
    """sshd runs each command through bash, which reads ~/.bashrc: a node's is its own, and silent
    for a non-interactive shell, while the machine's stays as it was."""
    machine_rc = Path(pwd.getpwnam("root").pw_dir) / ".bashrc"
    if not machine_rc.is_file():
        pytest.skip(f"{machine_rc} does not exist here: there is nothing for a node to cover")
    before = machine_rc.read_bytes()
    first = cluster.node_ips()[0]
    node_dir = cluster.state_dir / cluster.inventory["nodes"][0]["name"]
    seen = ssh_ok(cluster.key, first, "cat ~/.bashrc")
    assert seen == (node_dir / "bashrc").read_text()
    assert "return" in seen and cluster.inventory["nodes"][0]["name"] in seen
    assert machine_rc.read_bytes() == before


@needs_hosts
def test_cluster_head_reaches_worker(cluster: LocalCluster) -> None:
    first, second = cluster.node_ips()
    result = ssh(cluster.key, first, f"timeout 10 bash -c '</dev/tcp/{second}/22'")
    assert result.returncode == 0, result.stderr


@needs_hosts
def test_cluster_second_apply_changes_nothing(cluster: LocalCluster) -> None:
    pids_before = sorted(cluster.sshd_pids())
    plan = cluster.tf(
        "plan", "-detailed-exitcode", "-input=false", "-no-color", *cluster.vars(), check=False
    )
    assert plan.returncode == 0, plan.stdout + plan.stderr
    result = cluster.apply()
    assert "0 added, 0 changed, 0 destroyed" in result.stdout
    assert sorted(cluster.sshd_pids()) == pids_before


def node_check(env: dict[str, str]) -> tuple[int, str]:
    """host.sh node-check: (0, "") for a whole node, (3, what is missing) for a lost one."""
    result = run(["bash", str(HOST_SCRIPT), "node-check"], env=env)
    assert result.returncode in (0, 3), result.stderr
    return result.returncode, result.stdout.strip()


@needs_hosts
def test_cluster_node_create_converges(cluster: LocalCluster) -> None:
    """Running node-create again on a live node changes nothing; on a broken one it repairs it.

    node-check says which node is whole, and what a broken one lacks.
    """
    ip = cluster.node_ips()[1]
    env = cluster.node_env(1)
    pid_file = Path(env["RLINFRA_NODE_DIR"]) / "sshd.pid"
    pid = int(pid_file.read_text())
    assert node_check(env) == (0, "")
    again = run(["bash", str(HOST_SCRIPT), "node-create"], env=env)
    assert again.returncode == 0, again.stderr
    assert pid_alive(pid) and int(pid_file.read_text()) == pid, "a healthy sshd was restarted"

    # Break the node: its host-side veth (and with it eth0 inside) goes, and its sshd dies.
    run(["ip", "link", "delete", "dev", env["RLINFRA_VETH"]], check=True)
    assert node_check(env) == (3, f"link {env['RLINFRA_VETH']} is gone")
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    repaired = run(["bash", str(HOST_SCRIPT), "node-create"], env=env)
    assert repaired.returncode == 0, repaired.stderr
    assert int(pid_file.read_text()) != pid
    assert node_check(env) == (0, "")
    assert node_check({**env, "RLINFRA_NETNS": "rl-00000000-9"}) == (
        3,
        "network namespace rl-00000000-9 is gone",
    )
    assert node_check({**env, "RLINFRA_NODE_DIR": str(cluster.state_dir / "elsewhere")}) == (
        3,
        f"its /opt ({cluster.state_dir / 'elsewhere'}/opt) is not mounted",
    )
    bridge = run(["bash", str(HOST_SCRIPT), "bridge-check"], env=env)
    assert (bridge.returncode, bridge.stdout) == (0, "")
    bridge = run(["bash", str(HOST_SCRIPT), "bridge-check"], env={**env, "RLINFRA_BRIDGE": "rlb-0"})
    assert (bridge.returncode, bridge.stdout.strip()) == (3, "no such link")
    assert "dev eth0" in ssh_ok(cluster.key, ip, "ip route get 8.8.8.8")
    first = cluster.node_ips()[0]
    reach = ssh(cluster.key, first, f"timeout 10 bash -c '</dev/tcp/{ip}/22'")
    assert reach.returncode == 0, reach.stderr


@needs_hosts
def test_cluster_destroy_leaves_nothing(make_local_cluster: Any) -> None:
    started = time.monotonic()
    cluster = make_local_cluster(2)
    applied = time.monotonic()
    pids = cluster.sshd_pids()
    assert len(pids) == 2 and all(pid_alive(p) for p in pids)
    assert all(cluster.leftovers()[k] for k in ("netns", "links", "node_dirs"))
    # A process inside a node that ignores SIGTERM must be killed too.
    ssh_ok(
        cluster.key,
        cluster.node_ips()[0],
        "setsid bash -c 'trap \"\" TERM; exec sleep 600' </dev/null >/dev/null 2>&1 & echo $!",
    )
    # Each node has its own PID namespace: find the process's host pid through its network
    # namespace, and check that the node's own view of processes does not show the host's.
    netns = cluster.inventory["nodes"][0]["netns"]

    def sleepers() -> list[int]:
        host_pids = subprocess.run(
            ["ip", "netns", "pids", netns], capture_output=True, text=True, check=True
        ).stdout.split()
        found = []
        for pid in host_pids:
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep\x00600"):
                    found.append(int(pid))
        return found

    deadline = time.monotonic() + 10
    while not sleepers() and time.monotonic() < deadline:
        time.sleep(0.1)
    [stubborn] = sleepers()
    assert pid_alive(stubborn)
    seen = ssh_ok(cluster.key, cluster.node_ips()[0], "ls /proc | grep -c '^[0-9]' ")
    assert int(seen) < 20, "a node must see only its own processes"

    destroying = time.monotonic()
    cluster.destroy()
    done = time.monotonic()

    assert cluster.leftovers() == {
        "netns": [],
        "links": [],
        "mounts": [],
        "node_dirs": [],
        "views": [],
    }
    assert not any(pid_alive(p) for p in pids), "an sshd outlived destroy"
    assert not pid_alive(stubborn), "a process inside a node outlived destroy"
    # Destroying again, and destroying hosts that are already gone, succeed.
    cluster.destroy()
    gone = run(["bash", str(HOST_SCRIPT), "node-destroy"], env=cluster.node_env(0))
    assert gone.returncode == 0, gone.stderr
    print(
        f"apply {applied - started:.1f}s (with init), destroy {done - destroying:.1f}s"
        " (with a process that ignores SIGTERM)"
    )


@needs_hosts
def test_cluster_node_count_change_touches_only_tail_nodes(make_local_cluster: Any) -> None:
    cluster = make_local_cluster(1)
    [head_pid] = cluster.sshd_pids()

    cluster.node_count = 2
    grown = cluster.apply()
    assert "1 added, 0 changed, 0 destroyed" in grown.stdout
    head, worker = cluster.node_ips()
    assert ssh(cluster.key, head, f"timeout 10 bash -c '</dev/tcp/{worker}/22'").returncode == 0

    cluster.node_count = 1
    shrunk = cluster.apply()
    assert "0 added, 0 changed, 1 destroyed" in shrunk.stdout
    assert [n["name"] for n in cluster.inventory["nodes"]] == [f"{cluster.name}-0"]
    assert cluster.leftovers()["netns"] == [f"rl-{cluster.id}-0"]
    assert cluster.leftovers()["node_dirs"] == [f"{cluster.name}-0"]
    assert cluster.sshd_pids() == [head_pid] and pid_alive(head_pid)


@needs_terraform
@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("node_count", "0", "node_count must be a whole number from 1 to 64"),
        ("node_count", "65", "node_count must be a whole number from 1 to 64"),
        ("subnet_cidr", "10.213.0.0/16", "subnet_cidr must be an IPv4 network address"),
        ("subnet_cidr", "10.213.250.7/24", "subnet_cidr must be an IPv4 network address"),
        ("state_dir", "relative/nodes", "state_dir must be an absolute path"),
        ("cluster_name", "Bad_Name", "cluster_name must match"),
        ("node_disk_size", "4 GB", "node_disk_size must be empty or a size"),
    ],
)
def test_cluster_bad_variable_fails_at_plan(
    tmp_path: Path, variable: str, value: str, message: str
) -> None:
    tf = example_root(tmp_path, "local_cluster")
    key = tmp_path / "id_ed25519"
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    result = tf(
        "plan",
        "-input=false",
        "-no-color",
        f"-var=ssh_public_key_path={key}.pub",
        f"-var=state_dir={tmp_path / 'nodes'}",
        f"-var={variable}={value}",
        check=False,
    )
    assert result.returncode == 1
    assert message in " ".join(result.stderr.split()), result.stderr


@needs_hosts
def test_preflight_names_the_missing_command(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "id"):
        (bin_dir / tool).symlink_to(shutil.which(tool) or tool)
    result = run([str(bin_dir / "bash"), str(HOST_SCRIPT), "preflight"], env={"PATH": str(bin_dir)})
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "rlinfra local cloud: command 'ip' not found; install it "
        "(Debian: apt-get install openssh-server iproute2)"
    ]


@needs_hosts
def test_preflight_refuses_non_root() -> None:
    result = run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", "-s", "preflight"],
        input=HOST_SCRIPT.read_text(),
    )
    assert result.returncode == 1
    assert "needs root" in result.stderr


# --- local_bucket --------------------------------------------------------------------------------


@needs_terraform
def test_bucket_apply_creates_folder_and_destroy_removes_only_it(tmp_path: Path) -> None:
    tf = example_root(tmp_path, "local_bucket")
    root = tmp_path / "buckets"
    neighbour = root / "other-bucket"
    neighbour.mkdir(parents=True)
    (neighbour / "keep.txt").write_text("keep")
    name = f"rl-test.{uuid.uuid4().hex[:8]}"
    args = ["-input=false", "-no-color", f"-var=name={name}", f"-var=root={root}"]

    tf("apply", "-auto-approve", *args)
    bucket = tf.output("bucket")
    path = root / name
    assert bucket == {"name": name, "path": str(path), "url": f"file://{path}"}
    assert path.is_dir() and not any(path.iterdir())
    (path / "object.bin").write_bytes(b"x")
    assert tf("plan", "-detailed-exitcode", *args, check=False).returncode == 0

    tf("destroy", "-auto-approve", *args)
    assert not path.exists()
    assert (neighbour / "keep.txt").read_text() == "keep"
    assert sorted(p.name for p in root.iterdir()) == ["other-bucket"]


@needs_terraform
@pytest.mark.parametrize("name", ["ab", "Bucket", "-bucket", "a..b", "192.168.0.1", "a" * 64])
def test_bucket_bad_name_fails_at_plan(tmp_path: Path, name: str) -> None:
    tf = example_root(tmp_path, "local_bucket")
    result = tf(
        "plan",
        "-input=false",
        "-no-color",
        f"-var=name={name}",
        f"-var=root={tmp_path}",
        check=False,
    )
    assert result.returncode == 1
    assert "name must be 3-63 characters" in " ".join(result.stderr.split()), result.stderr
