"""The built-in `local` cloud: hosts in network namespaces on this machine.

Each host is a network namespace on a per-cluster bridge with its own sshd, /opt and /tmp, so
Ansible, Ray and collectives run across real addresses without any cloud account.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlinfra.clouds.base import Cloud, Gone, UpQuestion
from rlinfra.context import Context
from rlinfra.controller import pycache_dir
from rlinfra.errors import OperationError, UsageError
from rlinfra.plan import Plan, Site
from rlinfra.profile import Profile

ROOTS: dict[str, tuple[str, ...]] = {
    "storage": ("local_bucket",),
    "cluster": ("local_cluster",),
}

# The module's script, relative to the cluster root it is copied into.
HOST_SCRIPT = Path("modules") / "local_cluster" / "scripts" / "host.sh"

REQUIRED_TOOLS = {"ip": "iproute2", "unshare": "util-linux", "sshd": "openssh-server"}

# Every local cluster's bridge is a /24 in here.
LOCAL_SUPERNET = ipaddress.IPv4Network("10.213.0.0/16")
# More hosts than this on one machine is a mistake, not a cluster.
MAX_NODES = 64


def local_subnet(cluster: str) -> str:
    """A stable /24 for a local cluster, derived from its name (inside 10.213.0.0/16).

    Third octets 240-255 are left for tests and explicit profile subnets.
    """
    digest = hashlib.sha256(cluster.encode()).digest()
    third = 16 + digest[0] % 224
    return f"10.213.{third}.0/24"


def bucket_root(ctx: Context) -> Path:
    """Where the local buckets live (folders, one per bucket), seen by every local host."""
    return ctx.home / "buckets"


def _state_resources(module: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = list(module.get("resources") or [])
    for child in module.get("child_modules") or []:
        out += _state_resources(child)
    return out


def _input(resource: dict[str, Any]) -> dict[str, Any]:
    given: dict[str, Any] = (resource.get("values") or {}).get("input") or {}
    return given


def _check(script: Path, command: str, env: dict[str, str]) -> str | None:
    """None when host.sh's check finds everything there, else what it found missing."""
    result = subprocess.run(
        ["bash", str(script), command],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode == 0:
        return None
    if result.returncode == 3 and result.stdout.strip():
        return result.stdout.strip().splitlines()[-1]
    detail = (result.stderr.strip().splitlines() or ["no output"])[-1]
    raise OperationError(f"{script} {command} failed (exit {result.returncode}): {detail}")


class LocalCloud(Cloud):
    """Hosts in network namespaces on this machine; buckets are folders under rlinfra's home."""

    name = "local"
    hosts_see_controller_files = True
    buckets_per_account = False  # buckets are folders of this machine

    def up_question(self, plan: Plan) -> UpQuestion | None:
        return None  # hosts of this machine: nothing to pay for, nothing of the user's touched

    roots = ROOTS

    def site(self, profile: Profile, source: str, cluster: str, offered: set[str] | None) -> Site:
        """No machines to choose: hosts on this machine, on the profile's or a derived /24."""
        if profile.resources.accelerator_candidates:
            raise UsageError(
                f"{source}: resources.accelerators: the local cloud has no GPUs",
                "Remove resources.accelerators, or pick a cloud that has them.",
            )
        subnet = profile.network.subnet or local_subnet(cluster)
        net = ipaddress.IPv4Network(subnet)
        if net.prefixlen != 24 or not net.subnet_of(LOCAL_SUPERNET):
            raise UsageError(
                f"{source}: network.subnet: the local cloud needs a /24 inside {LOCAL_SUPERNET}"
            )
        if profile.resources.num_nodes > MAX_NODES:
            raise UsageError(
                f"{source}: resources.num_nodes: the local cloud makes at most {MAX_NODES}"
            )
        retrieval = profile.serving.retrieval if profile.serving else None
        if retrieval is not None and retrieval.clients:
            raise UsageError(
                f"{source}: serving.retrieval.clients: the local cloud's clusters cannot reach "
                "each other (each stays on its own bridge); use the retriever from its own nodes"
            )
        return Site(accelerator=None, subnet=subnet)

    def tfvars(self, plan: Plan, ctx: Context) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {
            "cluster": {
                "cluster_name": plan.cluster,
                "node_count": plan.num_nodes,
                "subnet_cidr": plan.subnet,
                "state_dir": str(ctx.deployment_dir / "nodes"),
                "ssh_authorized_key": ctx.ssh_public_key,
            }
        }
        if plan.storage_buckets:
            out["storage"] = {
                "buckets": plan.storage_buckets,
                "bucket_root": str(bucket_root(ctx)),
            }
        return out

    def ansible_vars(self, plan: Plan, ctx: Context) -> dict[str, Any]:
        """Local hosts share the machine's /etc and have no internet."""
        python = plan.profile.software.python
        return {
            # Hosts share this machine's filesystem: the interpreter behind rlinfra is there too,
            # and interpreter discovery could pick a shim that does not work in a plain shell.
            "ansible_python_interpreter": ctx.controller.system_python,
            "base_manage_limits": False,
            "python_env_python": ctx.controller.system_python if python == "system" else python,
            "python_env_cache_dir": str(ctx.cache / "uv"),
            "python_env_uv_binary_host_src": ctx.controller.uv_binary_on_hosts or "",
            "python_env_cache_shared": True,
            # The hosts see that cache through another mount than their own /opt, where hardlinks
            # fail (EXDEV) and uv would copy every file of torch and Ray into every host. Symlinks
            # share one copy (and its page cache); the cache outlives the hosts' venvs.
            "python_env_link_mode": "symlink",
            # So every host's venv is the same files at the same path: torch and Ray are compiled to
            # bytecode once on this machine, not once per host and per cluster.
            "python_env_pycache_prefix": str(pycache_dir(ctx.cache, plan.pins)),
            "storage_backend": "local",
            "storage_local_root": str(bucket_root(ctx)),
        }

    def check_inputs(self, plan: Plan) -> None:
        """Nothing the profile alone decides is left to check here (preflight checks the tools)."""

    def account_id(self, environ: Mapping[str, str], required: bool) -> str | None:
        """Local buckets are this machine's folders: no account names them."""
        return None

    def preflight(self, plan: Plan) -> None:
        """The local cloud creates namespaces and bridges: it needs root and a few tools."""
        if os.geteuid() != 0:
            raise UsageError(
                "the local cloud needs root (it creates network namespaces, a bridge and sshd "
                "hosts)",
                "Run rlinfra as root, e.g. `sudo -E rlinfra up --profile local`.",
            )
        missing = [
            f"{tool} (Debian package {package})"
            for tool, package in REQUIRED_TOOLS.items()
            if shutil.which(tool) is None and not os.path.exists(f"/usr/sbin/{tool}")
        ]
        if missing:
            raise UsageError(
                "the local cloud needs " + ", ".join(missing),
                "Install them, e.g. `apt-get install -y openssh-server iproute2`.",
            )

    def check_context(self, plan: Plan, ctx: Context) -> None:
        """Hosts have their own /tmp: what they read from the controller must live elsewhere."""
        paths: list[tuple[str, Path | str | None]] = [
            ("RLINFRA_CACHE (wheelhouse, uv cache)", ctx.cache),
            ("software.wheelhouse", ctx.controller.wheelhouse),
        ]
        if plan.profile.storage:
            paths.append(("the local buckets (RLINFRA_HOME/buckets)", bucket_root(ctx)))
        for label, path in paths:
            if path is not None and str(path).rstrip("/").split("/")[1:2] == ["tmp"]:
                raise UsageError(
                    f"{label} is under /tmp ({path}), which every local host replaces with its own",
                    "Point RLINFRA_CACHE (or RLINFRA_HOME) elsewhere, e.g. /var/tmp/rlinfra.",
                )

    def gone_resources(self, root: str, root_dir: Path, state: dict[str, Any]) -> list[Gone]:
        """What the state holds but this machine lost: after a restart, or a host's sshd killed.

        Terraform's built-in resources have nothing to refresh, so a plan would call such a cluster
        unchanged; the driver asks Terraform to replace these instead. A lost bridge takes every
        node with it (their links hung on it).
        """
        if root != "cluster":
            return []
        script = root_dir / HOST_SCRIPT
        resources = [
            r
            for r in _state_resources(state.get("values", {}).get("root_module", {}))
            if r.get("type") == "terraform_data" and r.get("mode") == "managed"
        ]
        bridges = [r for r in resources if r.get("name") == "bridge"]
        nodes = [r for r in resources if r.get("name") == "node"]
        found: list[Gone] = []
        for bridge in bridges:
            name = _input(bridge)["bridge"]
            reason = _check(script, "bridge-check", {"RLINFRA_BRIDGE": name})
            if reason:
                found.append(Gone(bridge["address"], f"bridge {name}", reason))
        if found:
            return found + [
                Gone(n["address"], f"node {_input(n)['name']}", "its bridge is gone") for n in nodes
            ]
        for node in nodes:
            given = _input(node)
            reason = _check(
                script,
                "node-check",
                {
                    "RLINFRA_NETNS": given["netns"],
                    "RLINFRA_VETH": given["veth"],
                    "RLINFRA_BRIDGE": given["bridge"],
                    "RLINFRA_NODE_DIR": given["dir"],
                    # Hosts made before disks were sized have plain folders.
                    "RLINFRA_NODE_DISK_SIZE": given.get("disk_size") or "",
                },
            )
            if reason:
                found.append(Gone(node["address"], f"node {given['name']}", reason))
        return found


CLOUD = LocalCloud()
