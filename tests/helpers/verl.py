"""The Verl tests' helpers: the node programs' environment, and stopping a Ray node by pid."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from helpers.paths import REPO

NODE_PACKAGE_ROOT = REPO / "driver"
OFFLINE = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "WANDB_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
}


def node_env(**extra: str) -> dict[str, str]:
    """The environment of a node program: offline, with ``rlinfra_node`` importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "VIRTUAL_ENV"))}
    env.update(OFFLINE, PYTHONPATH=str(NODE_PACKAGE_ROOT))
    env.update(extra)
    return env


@dataclass(frozen=True)
class RayNode:
    folder: Path
    # What a driver needs to join it: RAY_ADDRESS and the token settings.
    env: dict[str, str]


def pids_using(folder: Path, port: int) -> list[int]:
    """This node's Ray processes: those whose command line names ``folder`` or its GCS ``port``
    (the client server), and their descendants (Ray's agents rename their process title)."""
    gcs = re.compile(rf":{port}\b")
    parents: dict[int, int] = {}
    named: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
        if str(folder) in cmdline or gcs.search(cmdline):
            named.add(int(entry.name))
    found = set(named)
    while True:
        children = {pid for pid, parent in parents.items() if parent in found} - found
        if not children:
            return sorted(found)
        found |= children


def stop_ray_node(folder: Path, port: int) -> None:
    """SIGTERM this node's processes, SIGKILL those alive after 15 s (found once, up front:
    children whose parent died are no longer found by their parent)."""
    pids = pids_using(folder, port)

    def alive() -> list[int]:
        return [pid for pid in pids if Path(f"/proc/{pid}").exists()]

    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and alive():
        time.sleep(0.5)
    for pid in alive():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
