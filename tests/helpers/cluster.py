"""An rlinfra cluster on the local cloud, driven through the installed CLI (end-to-end tests),
and what of it is still on the machine."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helpers.cli import Rlinfra, cli_env

__all__ = ["Cluster", "cli_env", "leftovers", "missing_requirements", "netns_id"]


def missing_requirements(*tools: str) -> str | None:
    """Why this machine cannot make local hosts (None when it can)."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for tool in ("terraform", "ssh", "ip", "unshare", *tools):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    if not Path("/usr/sbin/sshd").exists():
        return "needs sshd (openssh-server)"
    return None


@dataclass
class Cluster:
    name: str
    home: Path
    env: dict[str, str]

    @property
    def folder(self) -> Path:
        return self.home / "clusters" / self.name

    def run(
        self, *argv: str, check: bool = True, timeout: float = 900
    ) -> subprocess.CompletedProcess[str]:
        return Rlinfra(self.env).run(*argv, check=check, timeout=timeout)

    def json(self, *argv: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.run(*argv, "--json").stdout)
        return data

    def record(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.folder / "record.json").read_text())
        return data


def netns_id(name: str) -> str:
    """The local cloud's id of a cluster in its namespace and link names."""
    return hashlib.sha1(name.encode()).hexdigest()[:8]


def leftovers(name: str) -> list[str]:
    """Namespaces, links, sshd processes and mounts of a cluster still on the machine."""
    ident = netns_id(name)
    found = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [f"netns {line.split()[0]}" for line in netns.splitlines() if f"rl-{ident}-" in line]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    found += [
        f"link {line.split(':')[1].strip()}"
        for line in links.splitlines()
        if f"rlv{ident}" in line or f"rlb-{ident}" in line
    ]
    mounts = Path("/proc/mounts").read_text()
    found += [
        f"mount {line.split()[1]}"
        for line in mounts.splitlines()
        if f"/clusters/{name}/" in line or f"rl-{ident}-" in line
    ]
    procs = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    found += [
        f"process {line.strip()}"
        for line in procs.splitlines()
        if f"/clusters/{name}/" in line and "sshd" in line
    ]
    return found
