"""The fast path of an unchanged `up`: prove the nodes configured instead of re-applying Ansible.

The playbook is idempotent but not cheap: some ninety tasks, each a round trip per node. When
Terraform changed nothing, the cluster's last configuration run succeeded, and the digest of
everything that run was given (the rendered Ansible folder, the extra vars and the
controller-side files it copies to the nodes) is the one it recorded, the playbook could only
repair drift on the nodes. So `up` looks for drift instead, with one SSH call per node
(``rlinfra_node.verify_node``), all in parallel. Clean nodes: the playbook is skipped. Any
problem: the playbook runs as usual and repairs it. `rlinfra up --full` always runs it.
"""

from __future__ import annotations

import enum
import hashlib
import json
import os
import subprocess
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlinfra import layout
from rlinfra.record import Host
from rlinfra.runners import ssh

# Written by the last play of site.yml on every node, holding the digest it applied.
MARKER = layout.CONVERGED
RAY_HELPER = layout.RAY_HELPER
RAY_TOKEN = layout.RAY_TOKEN
RETRIEVAL_APP = "retrieval"
# With the `front` router (the default), the endpoint is this Serve application on the head.
RETRIEVAL_FRONT_APP = "retrieval-front"
# Files above this size are identified by size and modification time, not by their bytes.
HASH_LIMIT = 4 << 20
# The rendered variables that name controller-side files or folders the playbook copies to nodes.
SHIPPED_LIST_KEYS = ("python_env_find_links",)


class ProblemKind(str, enum.Enum):
    """What kind of thing is wrong on a node."""

    UNREACHABLE = "unreachable"  # SSH or the check itself gave no answer
    CONFIG = "config"  # the configuration marker or a file of the node contract
    MOUNT = "mount"  # a bucket is not mounted
    RAY = "ray"  # its raylet, or (on the head) the cluster Ray sees
    SERVICE = "service"  # a Serve application


@dataclass(frozen=True)
class Problem:
    """One problem a node's check found."""

    host: str
    kind: ProblemKind
    text: str

    @property
    def lost(self) -> bool:
        """Whether it stops an all-reduce: the node cannot be reached or is gone from Ray."""
        return self.kind in (ProblemKind.UNREACHABLE, ProblemKind.RAY)

    def __str__(self) -> str:
        return f"{self.host}: {self.text}"


@dataclass
class Verification:
    ok: bool
    problems: list[Problem] = field(default_factory=list)

    @property
    def reason(self) -> str:
        return str(self.problems[0]) if self.problems else ""


def _file_identity(path: Path) -> bytes:
    stat = path.stat()
    if stat.st_size <= HASH_LIMIT:
        return hashlib.sha256(path.read_bytes()).hexdigest().encode()
    return f"{stat.st_size}:{stat.st_mtime_ns}".encode()


def _walk(folder: Path) -> Iterator[Path]:
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            yield Path(root) / name


def shipped_paths(variables: Mapping[str, Any]) -> list[str]:
    """Controller paths named by the rendered variables whose contents reach the nodes."""
    out: list[str] = []
    for key, value in sorted(variables.items()):
        if key.endswith("_src") and isinstance(value, str) and value:
            out.append(value)
        elif key in SHIPPED_LIST_KEYS and isinstance(value, list):
            out += [str(v) for v in value if v]
    return out


def inputs_digest(ansible_dir: Path, extravars: Mapping[str, Any]) -> str:
    """Digest of what a playbook run on this deployment is given; equal digests, equal runs."""
    digest = hashlib.sha256()
    for path in _walk(ansible_dir):
        rel = path.relative_to(ansible_dir)
        if rel.parts[0] == ".runner":
            continue
        digest.update(b"F" + str(rel).encode() + b"\0" + _file_identity(path) + b"\0")
    digest.update(b"E" + json.dumps(dict(extravars), sort_keys=True).encode() + b"\0")
    variables = yaml.safe_load((ansible_dir / "vars.yml").read_text()) or {}
    for shipped in shipped_paths(variables):
        source = Path(shipped)
        digest.update(b"S" + shipped.encode() + b"\0")
        if source.is_file():
            digest.update(_file_identity(source))
        elif source.is_dir():
            for item in _walk(source):
                stat = item.stat()
                name = str(item.relative_to(source))
                digest.update(f"{name}:{stat.st_size}:{stat.st_mtime_ns}".encode() + b"\0")
        else:
            digest.update(b"<missing>")
        digest.update(b"\0")
    return digest.hexdigest()


def node_spec(
    variables: Mapping[str, Any], hosts: list[Host], host: Host, digest: str
) -> dict[str, Any]:
    """What ``verify_node`` checks on ``host``, from the rendered variables."""
    head = hosts[0]
    venv = str(variables.get("python_env_venv") or layout.VENV)
    head_port = int(variables.get("ray_cluster_head_port", 6379))
    spec: dict[str, Any] = {
        "marker": MARKER,
        "digest": digest,
        "python": f"{venv}/bin/python",
        "files": [ssh.NODE_ENV, f"{venv}/bin/python"],
        "mounts": [
            str(m["mount_path"])
            for m in variables.get("storage_mounts") or []
            if str(m.get("mode", "MOUNT")).upper() == "MOUNT"
        ],
        "ray_helper": RAY_HELPER,
        "node_ip": host.private_ip,
        "gcs_address": f"{head.private_ip}:{head_port}",
    }
    if host.rank == 0:
        dashboard_host = str(variables.get("ray_cluster_dashboard_host", "127.0.0.1"))
        if dashboard_host in {"0.0.0.0", "::", "", "localhost"}:
            dashboard_host = "127.0.0.1"
        dashboard_port = int(variables.get("ray_cluster_dashboard_port", layout.RAY_DASHBOARD_PORT))
        spec["head"] = {
            "dashboard": f"http://{dashboard_host}:{dashboard_port}",
            "token_file": RAY_TOKEN,
            "node_ips": [h.private_ip for h in hosts],
            "serve": (
                {
                    "app": RETRIEVAL_APP,
                    "replicas": int(variables.get("retrieval_service_replicas", 1)),
                    "front": (
                        RETRIEVAL_FRONT_APP
                        if variables.get("retrieval_service_router", "front") == "front"
                        else None
                    ),
                }
                if variables.get("retrieval_service_enabled")
                else None
            ),
        }
    return spec


def _probe_source() -> bytes:
    import rlinfra_node.verify_node as probe

    return Path(probe.__file__).read_bytes()


def verify_node(
    folder: Path, host: Host, spec: dict[str, Any], probe: bytes, timeout: float = 60
) -> list[Problem]:
    """Problems found on ``host`` by ``probe`` (verify_node's source); empty: it verified."""
    import shlex

    def unreachable(text: str) -> list[Problem]:
        return [Problem(host.name, ProblemKind.UNREACHABLE, text)]

    python = spec["python"]
    command = f"{shlex.quote(python)} -I - {shlex.quote(json.dumps(spec))}"
    try:
        result = ssh.run(folder, host, command, capture=True, timeout=timeout, stdin=probe)
    except subprocess.TimeoutExpired:
        return unreachable(f"no answer within {timeout:.0f} s")
    if result.returncode != 0:
        last = (result.stderr or "").strip().splitlines() or [f"exit status {result.returncode}"]
        return unreachable(f"the check did not run ({last[-1][:200]})")
    try:
        answer = json.loads(result.stdout.strip().splitlines()[-1])
        return [
            Problem(host.name, ProblemKind(item["kind"]), str(item["text"]))
            for item in answer.get("problems", [])
        ]
    except (ValueError, IndexError, KeyError, TypeError):
        return unreachable("the check gave no answer")


def verify_cluster(
    folder: Path, hosts: list[Host], digest: str, timeout: float = 60
) -> Verification:
    """Every node checked at once (each within ``timeout`` s); problems in rank order."""
    variables = yaml.safe_load((folder / "ansible" / "vars.yml").read_text()) or {}
    specs = [node_spec(variables, hosts, host, digest) for host in hosts]
    probe = _probe_source()
    with ThreadPoolExecutor(max_workers=min(32, max(1, len(hosts)))) as pool:
        found = list(
            pool.map(
                lambda pair: verify_node(folder, pair[0], pair[1], probe, timeout),
                zip(hosts, specs, strict=True),
            )
        )
    problems = [problem for per_host in found for problem in per_host]
    return Verification(ok=not problems, problems=problems)
