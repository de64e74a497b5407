"""End to end on the `ssh` cloud: machines that exist before rlinfra, reached over SSH.

The test makes its own hosts, not through rlinfra's local cloud: a bridge and three network
namespaces, each with its own sshd, /opt and /tmp (the local cloud's host script, run directly).
`n0` and `n1` are the cluster (head and worker); `bastion` is a jump host, and the head accepts
the test's key only from the bastion's address, so everything that reaches the head (Ansible,
`exec`, jobs, `status --endpoint`) goes through the bastion. `r0` holds a second cluster, a
retrieval service whose only client is the first cluster's head (two clusters, one retriever). The hosts share this machine's
files, so the profile sets `ssh.shared_filesystem` (a local bucket, one package cache).

Preflight refusals run first on the fresh hosts (one per kind this machine can make real; the
others, whose hosts cannot be had here, are unit tests in tests/unit/test_ssh_profile.py); then one
cluster is brought up (taking over a worker with a stray Ray) and every later test uses it, down
to `down` and `down --purge`.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from helpers.cli import Rlinfra, cli_env
from helpers.cluster import missing_requirements
from helpers.emulators import aws_emulator
from helpers.netbed import claim_subnet
from helpers.paths import REPO
from helpers.terraform import mirror_env

pytestmark = pytest.mark.e2e

HOST_SH = REPO / "terraform" / "modules" / "local_cluster" / "scripts" / "host.sh"


if missing_requirements("ssh-keygen"):
    pytest.skip(missing_requirements("ssh-keygen") or "", allow_module_level=True)


@dataclass
class Node:
    name: str
    netns: str
    veth: str
    ip: str
    dir: Path


@dataclass
class Bed:
    ident: str
    root: Path
    home: Path
    key: Path
    subnet: str
    bridge: str
    nodes: dict[str, Node]
    env: dict[str, str]
    cluster: str
    profile_data: dict[str, object]
    started: list[int] = field(default_factory=list)

    @property
    def folder(self) -> Path:
        return self.home / "clusters" / self.cluster

    @property
    def retrieval_cluster(self) -> str:
        return f"retr-{self.ident}"

    @property
    def mount(self) -> str:
        return str(self.root / "ckpt")

    def cli(
        self,
        *argv: str,
        check: bool = True,
        timeout: float = 900,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        return Rlinfra(self.env).run(
            *argv, check=check, timeout=timeout, env=env, explain=_ansible_tail
        )

    def json(self, *argv: str, env: dict[str, str] | None = None) -> dict[str, object]:
        data: dict[str, object] = json.loads(self.cli(*argv, "--json", env=env).stdout)
        return data

    def profile(self, name: str, change: dict[str, object] | None = None) -> Path:
        """The test's profile, with ``change`` merged into it (one level deep)."""
        data = json.loads(json.dumps(self.profile_data))
        for key, value in (change or {}).items():
            if isinstance(value, dict) and isinstance(data.get(key), dict):
                data[key] = {**data[key], **value}
            else:
                data[key] = value
        path = self.root / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    def on(self, node: str, command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run a shell command on a host as the test itself (not through rlinfra)."""
        target = self.nodes[node]
        argv = [
            "ssh",
            "-i",
            str(self.key),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "LogLevel=ERROR",
            "-o",
            "ConnectTimeout=5",
        ]
        if node == "n0":
            proxy = [*argv, "-W", "%h:%p", f"root@{self.nodes['bastion'].ip}"]
            argv += ["-o", "ProxyCommand=" + shlex.join(proxy)]
        return subprocess.run(
            [*argv, f"root@{target.ip}", command],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )


def _ansible_tail(stderr: str) -> str:
    """The end of the Ansible output an error names (the bed's folder is gone after the test)."""
    found = re.search(r"Full output: (\S+)", stderr)
    if not found or not Path(found.group(1)).is_file():
        return ""
    lines = Path(found.group(1)).read_text(errors="replace").splitlines()
    return "\n--- Ansible output, last 40 lines ---\n" + "\n".join(lines[-40:])


def _host_sh(command: str, env: dict[str, str]) -> None:
    done = subprocess.run(
        ["bash", str(HOST_SH), command],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, (command, done.stdout, done.stderr)


def _leftovers(bed: Bed) -> list[str]:
    found = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [f"netns {n.split()[0]}" for n in netns.splitlines() if f"rs-{bed.ident}-" in n]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    found += [
        f"link {line.split(':')[1].strip()}"
        for line in links.splitlines()
        if f"rsv{bed.ident}" in line or bed.bridge in line
    ]
    mounts = Path("/proc/mounts").read_text()
    found += [f"mount {m.split()[1]}" for m in mounts.splitlines() if str(bed.root) in m]
    return found


@pytest.fixture(scope="module")
def bed() -> Iterator[Bed]:
    ident = uuid.uuid4().hex[:6]
    claim = claim_subnet()
    third = claim.third
    root = Path(tempfile.mkdtemp(prefix=f"rlinfra-ssh-{ident}-", dir="/var/tmp"))
    key = root / "id_test"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "e2e", "-f", str(key)], check=True
    )
    public = key.with_suffix(".pub").read_text().strip()
    bridge = f"rsb-{ident}"
    nodes = {
        name: Node(
            name, f"rs-{ident}-{i}", f"rsv{ident}{i}", f"10.213.{third}.{10 + i}", root / name
        )
        for i, name in enumerate(("n0", "n1", "bastion", "r0"))
    }
    home = root / "home"
    env = cli_env(home)
    base = yaml.safe_load((REPO / "profiles" / "local.yaml").read_text())
    mount = str(root / "ckpt")
    bucket = f"rlinfra-ssh-{ident}"
    data: dict[str, object] = {
        **{k: v for k, v in base.items() if k not in ("cloud", "resources", "storage")},
        "description": "e2e: hosts the test made, over SSH",
        "cloud": "ssh",
        "storage": [{"bucket": bucket, "mount_path": mount, "mode": "MOUNT"}],
        "ssh": {
            "identity_file": str(key),
            "shared_filesystem": True,
            # Each host's /opt is a 4 GiB tmpfs.
            "min_free_gb": 1,
            "hosts": [
                {
                    "name": "n0",
                    "address": nodes["n0"].ip,
                    "jump": {"address": nodes["bastion"].ip},
                },
                {"name": "n1", "address": nodes["n1"].ip},
            ],
        },
    }
    serving = data["serving"]
    assert isinstance(serving, dict)
    serving["model"]["model_path"] = f"{mount}/hf_model"
    # One step of the local profile's Verl job, saved and merged: enough to prove that Verl's
    # ranks are placed on both existing hosts through the bastion and that the merged model is
    # served; the whole job's run (steps, resume, checkpoint cadence) is the local e2e's.
    workload = data["workload"]
    assert isinstance(workload, dict)
    workload["overrides"] = {
        **workload["overrides"],
        "trainer.total_training_steps": 1,
        "trainer.save_freq": 1,
    }
    handle = Bed(
        ident, root, home, key, f"10.213.{third}.0/24", bridge, nodes, env, f"ssh-{ident}", data
    )
    try:
        _host_sh(
            "bridge-create",
            {
                "RLINFRA_CLUSTER": handle.cluster,
                "RLINFRA_BRIDGE": bridge,
                "RLINFRA_BRIDGE_MAC": f"02:5e:{ident[0:2]}:{ident[2:4]}:{ident[4:6]}:01",
                "RLINFRA_GATEWAY_CIDR": f"10.213.{third}.1/24",
                "RLINFRA_SUBNET_CIDR": handle.subnet,
            },
        )
        for i, node in enumerate(nodes.values()):
            # The head takes the key only from the bastion: this machine reaches it through it.
            authorized = f'from="{nodes["bastion"].ip}" {public}' if node.name == "n0" else public
            _host_sh(
                "node-create",
                {
                    "RLINFRA_CLUSTER": handle.cluster,
                    "RLINFRA_NODE_NAME": node.name,
                    "RLINFRA_NETNS": node.netns,
                    "RLINFRA_VETH": node.veth,
                    "RLINFRA_BRIDGE": bridge,
                    "RLINFRA_NODE_IP": node.ip,
                    "RLINFRA_NODE_MAC": f"02:5e:{ident[0:2]}:{ident[2:4]}:{ident[4:6]}:{16 + i:02x}",
                    "RLINFRA_PREFIX_LEN": "24",
                    "RLINFRA_GATEWAY": f"10.213.{third}.1",
                    "RLINFRA_NODE_DIR": str(node.dir),
                    "RLINFRA_AUTHORIZED_KEY": authorized,
                },
            )
        for name in ("n0", "n1"):
            # The team's own files on its machines, which rlinfra must never touch.
            done = handle.on(name, "mkdir -p /opt/team && echo precious > /opt/team/keep.txt")
            assert done.returncode == 0, done.stderr
        yield handle
    finally:
        for cluster in (handle.cluster, handle.retrieval_cluster):
            if (handle.home / "clusters" / cluster / "record.json").is_file():
                handle.cli("down", cluster, "--yes", "--purge", "--delete-buckets", check=False)
        for node in nodes.values():
            _host_sh(
                "node-destroy",
                {
                    "RLINFRA_NETNS": node.netns,
                    "RLINFRA_VETH": node.veth,
                    "RLINFRA_NODE_DIR": str(node.dir),
                },
            )
        _host_sh("bridge-destroy", {"RLINFRA_BRIDGE": bridge})
        claim.release()
        left = _leftovers(handle)
        if not left:
            shutil.rmtree(root, ignore_errors=True)
        assert not left, left


def _opt(bed: Bed) -> dict[str, str]:
    """What each cluster host has under /opt (the test's own folder only, before `up`)."""
    out = {}
    for name in ("n0", "n1"):
        done = bed.on(name, "cd /opt && find . -mindepth 1 -maxdepth 2 | sort | tr '\\n' ' '")
        assert done.returncode == 0, done.stderr
        out[name] = done.stdout.strip()
    return out


FRESH = "./team ./team/keep.txt"


def _refused(bed: Bed, profile: Path, host: str, fragment: str, *flags: str) -> None:
    started = time.monotonic()
    result = bed.cli("up", "-p", str(profile), "-c", bed.cluster, "--yes", *flags, check=False)
    took = time.monotonic() - started
    assert result.returncode == 2, (result.stdout, result.stderr)
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "preflight refused 1 of" in errors[0], result.stderr
    assert "nothing was changed" in errors[0]
    lines = [
        line.strip() for line in result.stderr.splitlines() if line.strip().startswith(f"{host}:")
    ]
    assert len(lines) == 1 and fragment in lines[0], result.stderr
    # Nothing changed: no deployment folder here, nothing of rlinfra's on any host.
    assert not bed.folder.exists()
    assert took < 60, took


def test_preflight_refuses_an_unreachable_host(bed: Bed) -> None:
    ssh = dict(bed.profile_data["ssh"])  # type: ignore[call-overload]
    ssh["hosts"] = [*ssh["hosts"], {"name": "gone", "address": bed.subnet.replace(".0/24", ".99")}]
    _refused(bed, bed.profile("unreachable", {"ssh": ssh}), "gone", "unreachable over SSH")
    assert _opt(bed) == {"n0": FRESH, "n1": FRESH}


def test_preflight_refuses_too_little_disk(bed: Bed) -> None:
    profile = bed.profile("disk", {"ssh": {"min_free_gb": 100000}})
    result = bed.cli("up", "-p", str(profile), "-c", bed.cluster, "--yes", check=False)
    assert result.returncode == 2, result.stderr
    # Both hosts fail, each on one line.
    assert "preflight refused 2 of 2 host(s)" in result.stderr
    for host in ("n0", "n1"):
        line = [s.strip() for s in result.stderr.splitlines() if s.strip().startswith(f"{host}:")]
        assert len(line) == 1 and "needs 100000 GB (ssh.min_free_gb)" in line[0], result.stderr
    assert _opt(bed) == {"n0": FRESH, "n1": FRESH} and not bed.folder.exists()


def test_preflight_refuses_a_gpu_count_it_does_not_see(bed: Bed) -> None:
    profile = bed.profile(
        "gpus", {"resources": {"accelerators": "H100:1"}, "workload": None, "serving": None}
    )
    result = bed.cli("up", "-p", str(profile), "-c", bed.cluster, "--yes", check=False)
    assert result.returncode == 2, result.stderr
    assert "0 GPU(s) seen by nvidia-smi, the profile declares 1 per node" in result.stderr
    assert _opt(bed) == {"n0": FRESH, "n1": FRESH} and not bed.folder.exists()


def test_gpus_are_detected_over_ssh_and_these_hosts_have_none(bed: Bed) -> None:
    """ssh.detect_gpus reads each host with the preflight probe, through real SSH; these hosts
    have no nvidia-smi, so the plan's nodes are CPU nodes (the unit tests give hosts GPUs)."""
    profile = bed.profile("detect", {"ssh": {"detect_gpus": True}})
    summary = bed.json("plan", "-p", str(profile), "-c", bed.cluster)
    assert summary["accelerator"] is None
    overrides: list[dict[str, str]] = summary["overrides"]  # type: ignore[assignment]
    changed = [(o["old"], o["new"]) for o in overrides if o["field"] == "resources.accelerators"]
    assert changed == [("detect", "none")]
    assert _opt(bed) == {"n0": FRESH, "n1": FRESH} and not bed.folder.exists()


def test_preflight_refuses_a_port_in_use(bed: Bed) -> None:
    listener = (
        "nohup python3 -c 'import socket, time; s = socket.socket(); "
        's.bind(("0.0.0.0", 6379)); s.listen(); time.sleep(600)\' >/dev/null 2>&1 & echo $!'
    )
    pid = bed.on("n1", listener).stdout.strip()
    try:
        time.sleep(0.5)
        _refused(bed, bed.profile("main"), "n1", "port(s) 6379 already in use")
    finally:
        bed.on("n1", f"kill {pid}")
    assert _opt(bed) == {"n0": FRESH, "n1": FRESH}


def test_preflight_refuses_a_host_of_another_rlinfra_cluster(bed: Bed) -> None:
    info = json.dumps({"cluster": "someone-else", "cloud": "ssh"})
    contract = json.dumps({"RLINFRA_CLUSTER_INFO": info})
    assert (
        bed.on(
            "n1", f"mkdir -p /opt/rlinfra && printf '%s\\n' '{contract}' > /opt/rlinfra/node.json"
        ).returncode
        == 0
    )
    try:
        _refused(bed, bed.profile("main"), "n1", "runs rlinfra cluster 'someone-else'")
        assert _opt(bed)["n1"] == f"./rlinfra ./rlinfra/node.json {FRESH}"
    finally:
        bed.on("n1", "rm -rf /opt/rlinfra")
    assert _opt(bed) == {"n0": FRESH, "n1": FRESH}


def test_preflight_refuses_a_ray_that_rlinfra_did_not_start(bed: Bed) -> None:
    """A raylet that is not rlinfra's stays refused until `up --take-over` (the next test)."""
    started = bed.on(
        "n1", "cp /bin/sleep /tmp/raylet && (nohup /tmp/raylet 900 >/dev/null 2>&1 & echo $!)"
    )
    assert started.returncode == 0, started.stderr
    _refused(bed, bed.profile("main"), "n1", "runs a Ray that rlinfra did not start (/tmp/raylet)")
    assert _opt(bed) == {"n0": FRESH, "n1": FRESH}


# The one step the profile above asks for.
STEPS = 1


def test_up_takes_over_then_checks_and_runs_the_job(bed: Bed) -> None:
    """`up --take-over` on the two hosts (head through the bastion): Ansible's roles, Ray, the
    all-reduce check, then one step of the local profile's Verl job, saved and merged."""
    started = time.monotonic()
    result = bed.json(
        "up", "-p", str(bed.profile("main")), "-c", bed.cluster, "--yes", "--take-over"
    )
    took = time.monotonic() - started
    nodes = result["nodes"]
    assert isinstance(nodes, list) and [n["name"] for n in nodes] == ["n0", "n1"]
    assert nodes[0]["ssh_proxy"] and not nodes[1]["ssh_proxy"]
    check = result["check"]
    assert isinstance(check, dict) and check["world_size"] == 2
    assert result["job"]
    print(f"up (2 hosts, take-over, warm cache) took {took:.1f} s")
    again = bed.json("check", bed.cluster)
    assert again["world_size"] == 2
    follow = bed.cli("logs", bed.cluster, "--follow", timeout=1500)
    log = follow.stdout
    for step in range(1, STEPS + 1):
        assert re.search(rf"step:{step} - ", log), (step, log[-4000:])
    assert "job_runner: merge done" in log, log[-4000:]
    ips = [bed.nodes["n0"].ip, bed.nodes["n1"].ip]
    placed = set(re.findall(r"verl_cpu: rank \d of 2 joined over gloo on node (\S+)", log))
    assert placed >= set(ips), (placed, ips)
    bucket = bed.home / "buckets" / f"rlinfra-ssh-{bed.ident}"
    assert (bucket / "latest_checkpointed_iteration.txt").read_text().strip() == str(STEPS)
    assert not re.search(rf"step:{STEPS + 1} - ", log), log[-4000:]


def test_exec_reaches_the_head_only_through_the_bastion(bed: Bed) -> None:
    direct = subprocess.run(
        [
            "ssh",
            "-i",
            str(bed.key),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "ConnectTimeout=5",
            f"root@{bed.nodes['n0'].ip}",
            "true",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert direct.returncode != 0  # the head refuses this machine's direct login
    out = bed.cli(
        "exec", bed.cluster, "--all", "--", "echo rank=$RLINFRA_NODE_RANK ip=$(hostname -I)"
    )
    assert re.findall(r"rank=(\d) ip=(\S+)", out.stdout) == [
        ("0", bed.nodes["n0"].ip),
        ("1", bed.nodes["n1"].ip),
    ], out.stdout


def test_status_and_endpoints_through_the_bastion(bed: Bed) -> None:
    state = bed.json("status", bed.cluster)
    assert state["stage"] == "ready" and state["cloud"] == "ssh"
    ray = state["ray"]
    assert isinstance(ray, dict) and ray["alive_nodes"] == 2 and ray["missing_nodes"] == []
    jobs = state["jobs"]
    assert isinstance(jobs, list) and jobs[-1]["status"] == "SUCCEEDED", jobs
    dashboard = bed.json("status", bed.cluster, "--endpoint", "8265")
    assert dashboard["via"] == "ssh-tunnel"
    token = Path(str(dashboard["ray_token_file"])).read_text().strip()
    request = urllib.request.Request(
        f"{dashboard['url']}/api/version", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 200
    # The URL comes before the server answers: exit 1 says nothing listens there yet.
    given = bed.cli("status", bed.cluster, "--endpoint", "9090", "--json", check=False)
    assert given.returncode in (0, 1), given.stderr
    model = json.loads(given.stdout)
    assert model["via"] == "ssh-tunnel"
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"{model['url']}/v1/models", timeout=10) as answer:
                assert answer.status == 200
                break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(2)


def _retrieval_profile(bed: Bed) -> Path:
    """The retrieval service of retrieval-local.yaml on the host r0, serving the first cluster's
    head (n0) only: `clients` names n0's address, not n1's."""
    data = yaml.safe_load((REPO / "profiles" / "retrieval-local.yaml").read_text())
    retrieval = data["serving"]["retrieval"]
    retrieval.update(
        replicas=1,
        corpus="sample-300",
        corpus_source="sample:300",
        clients=[f"{bed.nodes['n0'].ip}/32"],
    )
    data.pop("resources")
    data.update(
        description="e2e: a retrieval service on an existing host, for another cluster",
        cloud="ssh",
        storage=[
            {
                "bucket": f"rlinfra-retr-{bed.ident}",
                "mount_path": str(bed.root / "retr"),
                "mode": "MOUNT",
            }
        ],
        ssh={
            "identity_file": str(bed.key),
            "shared_filesystem": True,
            "min_free_gb": 1,
            "hosts": [{"name": "r0", "address": bed.nodes["r0"].ip}],
        },
    )
    path = bed.root / "retrieval.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# The job's probe step as a job runs it: the node's Python in the job's working dir, which holds
# rlinfra_node (the main job left one on the head).
PROBE = (
    'cd "$(ls -d /opt/rlinfra/jobs/*/work | head -n 1)" && '
    "/opt/rlinfra/venv/bin/python -m rlinfra_node.search_tool probe --tries 1 --url "
)
# A plain POST /retrieve with the standard library: prints the status, then the body.
_POST_SCRIPT = """
import sys, urllib.error, urllib.request
request = urllib.request.Request(
    sys.argv[1] + "/retrieve", data=b'{"queries": ["x"]}',
    headers={"Content-Type": "application/json"},
)
try:
    answer = urllib.request.urlopen(request, timeout=30)
    print(answer.status)
    print(answer.read().decode())
except urllib.error.HTTPError as exc:
    print(exc.code)
    print(exc.read().decode())
"""


def _post(url: str) -> str:
    """A shell command that runs _POST_SCRIPT against ``url`` on a node."""
    encoded = base64.b64encode(_POST_SCRIPT.encode()).decode()
    script = f"import base64; exec(base64.b64decode('{encoded}'))"
    return f"python3 -c {shlex.quote(script)} {shlex.quote(url)}"


def test_two_clusters_one_retriever(bed: Bed) -> None:
    """A retrieval cluster on r0 lists the first cluster's head in serving.retrieval.clients:
    `status --endpoint 8000 --from` finds the URL from that head, the search tool's probe (what
    a trainer's job runs before training) gets passages there, and the first cluster's worker,
    not listed, is refused with its own address named."""
    retr = bed.retrieval_cluster
    up = bed.json("up", "-p", str(_retrieval_profile(bed)), "-c", retr, "--yes")
    assert [n["name"] for n in up["nodes"]] == ["r0"]  # type: ignore[union-attr]
    r0, n0, n1 = (bed.nodes[name].ip for name in ("r0", "n0", "n1"))
    # From this machine (not a client): the endpoint refuses it, so status gives a tunnel,
    # which arrives on r0's loopback.
    here = bed.json("status", retr, "--endpoint", "8000")
    assert here["via"] == "ssh-tunnel", here
    request = urllib.request.Request(
        f"{here['url']}/retrieve",
        data=json.dumps({"queries": ["passage"], "topk": 2}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        assert len(json.loads(answer.read())["result"][0]) == 2
    # From the trainer cluster's head, checked there (through the bastion).
    found = bed.json("status", retr, "--endpoint", "8000", "--from", bed.cluster)
    assert found["url"] == f"http://{r0}:8000", found
    assert found["checked"] == {
        "node": "n0",
        "source": n0,
        "request": "GET /healthz",
        "status": 200,
    }, found
    probe = bed.cli("exec", bed.cluster, "--", PROBE + str(found["url"]))
    assert f"search_tool: http://{r0}:8000/retrieve answered (try 1/1)" in probe.stdout + (
        probe.stderr
    ), (probe.stdout, probe.stderr)
    # The worker is not a client: refused, its address named.
    refused = bed.cli("exec", bed.cluster, "--node", "1", "--", _post(str(found["url"])))
    status, body = refused.stdout.strip().split("\n", 1)
    assert status == "403", refused.stdout
    assert json.loads(body)["error"].startswith(f"{n1} may not use this service"), body
    # Asked from a cluster that is not listed, --from says what each address did and fails.
    other = bed.cli("status", bed.cluster, "--endpoint", "8000", "--from", retr, check=False)
    assert other.returncode == 1, (other.stdout, other.stderr)
    assert f"{retr}'s head (r0) cannot use port 8000 of {bed.cluster}'s head" in other.stderr
    down = bed.cli("down", retr, "--yes", "--purge", "--delete-buckets")
    assert "the machine is kept" in down.stdout
    assert bed.on("r0", RLINFRA_PROCESSES).stdout.strip() == ""
    assert not (bed.home / "clusters" / retr).exists()


KEY_ID = "AKIACANARYE2EBUCKETKEY"
SECRET = "canary-e2e-secret-of-the-hosts-bucket-key"


def _s3_profile(bed: Bed, bucket: str) -> Path:
    """The host r0 with an S3 bucket (ssh.buckets), no workload: the pipeline up to the mount."""
    data = json.loads(json.dumps(bed.profile_data))
    for key in ("workload", "serving"):
        data.pop(key, None)
    data["description"] = "e2e: an S3 bucket for an existing host"
    data["storage"] = [{"bucket": bucket, "mount_path": str(bed.root / "s3ckpt"), "mode": "MOUNT"}]
    data["ssh"] = {
        "identity_file": str(bed.key),
        # The package cache is shared; the bucket is not: it lives in S3 (the emulator).
        "shared_filesystem": True,
        "min_free_gb": 1,
        "hosts": [{"name": "r0", "address": bed.nodes["r0"].ip}],
        "buckets": {"cloud": "aws", "region": "us-east-1"},
    }
    path = bed.root / "s3.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_an_s3_bucket_for_existing_hosts_with_a_key_sent_over_ssh(bed: Bed) -> None:
    """ssh.buckets: Terraform makes the bucket in S3 (an AWS API emulator on the hosts' bridge),
    `up` sends the hosts' key over SSH, rclone mounts the bucket with it and a file written on
    the host lands in S3; the key is in no file, state, log or argument; `down` takes the key
    away and keeps the bucket; `down --delete-buckets` deletes it."""
    cluster = f"s3-{bed.ident}"
    bucket = f"rlinfra-s3-{bed.ident}"
    mount = bed.root / "s3ckpt"
    gateway = bed.subnet.replace(".0/24", ".1")
    # Its own emulator: the hosts reach it on their bridge, not on loopback.
    with aws_emulator(bed.root / "aws", host=gateway) as emu:
        env = {
            "RLINFRA_AWS_ENDPOINT_URL": emu.url,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "BUCKET_AWS_ACCESS_KEY_ID": KEY_ID,
            "BUCKET_AWS_SECRET_ACCESS_KEY": SECRET,
            **mirror_env(),
        }
        s3 = emu.client("s3")
        said: list[str] = []
        try:
            up = bed.cli("up", "-p", str(_s3_profile(bed, bucket)), "-c", cluster, "--yes", env=env)
            said += [up.stdout, up.stderr]
            assert "bucket key to 1 host(s) over SSH" in up.stderr, up.stderr
            assert bucket in [b["Name"] for b in s3.list_buckets()["Buckets"]]
            key_file = bed.on("r0", "stat -c '%a %U' /opt/rlinfra/secrets /opt/rlinfra/secrets/*")
            assert key_file.stdout.split("\n")[:2] == ["700 root", "600 root"], key_file.stdout
            wrote = bed.cli(
                "exec",
                cluster,
                "--",
                f"mountpoint -q {mount} && echo from-r0 > {mount}/written-on-r0.txt && "
                "ps -eo args=",
                env=env,
            )
            said += [wrote.stdout, wrote.stderr]
            # rclone's write cache uploads in the background.
            deadline = time.monotonic() + 60
            while True:
                try:
                    body = s3.get_object(Bucket=bucket, Key="written-on-r0.txt")["Body"].read()
                    break
                except s3.exceptions.NoSuchKey:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(1)
            assert body == b"from-r0\n"
            # The key is nowhere but in the host's 0600 file: not in a process argument (the
            # `ps` above, rclone's included), nor in rlinfra's output, files, state or logs.
            for text in said:
                assert KEY_ID not in text and SECRET not in text
            assert "rclone mount" in wrote.stdout
            folder = bed.home / "clusters" / cluster
            for path in folder.rglob("*"):
                if path.is_file():
                    content = path.read_text(errors="replace")
                    assert KEY_ID not in content and SECRET not in content, path
            # `down` keeps the bucket and takes the key away with the node contract; a file
            # written just before, still in rclone's write cache, is uploaded first.
            bed.cli("exec", cluster, "--", f"echo late > {mount}/late.txt", env=env)
            bed.cli("down", cluster, "--yes", env=env)
            late = s3.get_object(Bucket=bucket, Key="late.txt")["Body"].read()
            assert late == b"late\n"
            gone = bed.on(
                "r0",
                "test -e /opt/rlinfra/secrets && echo key || echo no-key; "
                f"mountpoint -q {mount} && echo mounted || echo unmounted",
            )
            assert gone.stdout.split() == ["no-key", "unmounted"], gone.stdout
            assert bucket in [b["Name"] for b in s3.list_buckets()["Buckets"]]
            deleted = bed.cli("down", cluster, "--yes", "--purge", "--delete-buckets", env=env)
            assert "object version(s)" in deleted.stdout + deleted.stderr
            assert bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]
        finally:
            if (bed.home / "clusters" / cluster / "record.json").is_file():
                bed.cli(
                    "down", cluster, "--yes", "--purge", "--delete-buckets", check=False, env=env
                )


def test_second_up_passes_preflight_and_changes_nothing(bed: Bed) -> None:
    """The cluster's own Ray holds its ports and its contract names it: preflight lets `up`
    converge, and the unchanged nodes verify instead of running Ansible."""
    result = bed.json("up", "-p", str(bed.profile("main")), "-c", bed.cluster, "--yes", "--no-run")
    assert result["configured"] == "verified", result
    assert result["ansible_changed"] == 0


RLINFRA_PROCESSES = (
    "ps -eo args= | grep -E '/opt/rlinfra|raylet|gcs_server|ray::' | grep -v grep || true"
)


def test_down_leaves_the_machines_without_rlinfras_processes(bed: Bed) -> None:
    shown = bed.cli("down", bed.cluster, "--yes")
    assert "release node n0" in shown.stdout and "the machine is kept" in shown.stdout
    assert "destroy node" not in shown.stdout
    for name in ("n0", "n1"):
        alive = bed.on(name, "echo alive")
        assert alive.stdout.strip() == "alive", alive.stderr
        left = bed.on(name, RLINFRA_PROCESSES)
        assert left.stdout.strip() == "", (name, left.stdout)
        files = bed.on(name, "ls -A /opt/rlinfra; cat /opt/team/keep.txt")
        assert "node.env" not in files.stdout and "node.json" not in files.stdout
        assert "venv" in files.stdout and "precious" in files.stdout
        mounted = bed.on(name, f"mountpoint -q {bed.mount} && echo mounted || echo none")
        assert mounted.stdout.strip() == "none"
    record = json.loads((bed.folder / "record.json").read_text())
    assert record["stage"] == "down"  # the bucket is kept, and with it the record


def test_down_purge_removes_what_rlinfra_installed_and_nothing_else(bed: Bed) -> None:
    shown = bed.cli("down", bed.cluster, "--yes", "--purge")
    assert "PURGE on n0: /opt/rlinfra" in shown.stdout, shown.stdout
    for name in ("n0", "n1"):
        assert bed.on(name, "echo alive").stdout.strip() == "alive"
        assert bed.on(name, RLINFRA_PROCESSES).stdout.strip() == ""
    assert _opt(bed) == {"n0": FRESH, "n1": FRESH}
    assert bed.on("n1", "cat /opt/team/keep.txt").stdout.strip() == "precious"
    # The bucket (this machine's folder) is kept until --delete-buckets.
    assert (bed.home / "buckets" / f"rlinfra-ssh-{bed.ident}").is_dir()
    bed.cli("down", bed.cluster, "--yes", "--delete-buckets")
    assert not bed.folder.exists()
