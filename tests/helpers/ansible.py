"""Ansible in the tests: the offline wheelhouse, the machine's Python, and running a
playbook with ansible-runner as the driver does."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from helpers.locks import fill_once
from helpers.paths import REPO

ANSIBLE = REPO / "ansible"
VENV_BIN = Path(sys.executable).parent
PACKAGES = ["ray[default]==2.60.0", "torch==2.13.0"]
# Nodes see the machine's /var/tmp and /root but have their own /tmp and /opt, so everything the
# nodes must read from the controller lives under /var/tmp.
WHEELHOUSE = Path("/var/tmp/rlinfra-test-wheelhouse")
UV_CACHE = Path("/var/tmp/rlinfra-test-uvcache")
PYCACHE = Path("/var/tmp/rlinfra-test-pycache")


def system_python() -> str:
    """The machine's python3 (outside any virtual environment), as an absolute path."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    path = ":".join(p for p in env.get("PATH", "").split(":") if Path(p) != VENV_BIN)
    exe = shutil.which("python3", path=path)
    assert exe, "no python3 on PATH outside the project venv"
    out = subprocess.run(
        [exe, "-c", "import sys; print(sys.executable)"],
        env=env,
        text=True,
        capture_output=True,
        check=True,
    )
    return out.stdout.strip()


@dataclass
class PlaybookRun:
    rc: int
    status: str
    stats: dict[str, dict[str, int]]
    events: list[dict[str, Any]]
    stdout: str
    seconds: float

    def changed(self) -> dict[str, int]:
        return dict(self.stats.get("changed", {}))

    def changed_tasks(self) -> list[str]:
        return [
            f"{e['event_data'].get('host')}: {e['event_data'].get('task')}"
            for e in self.events
            if e.get("event") == "runner_on_ok" and e["event_data"].get("res", {}).get("changed")
        ]

    def failures(self) -> list[str]:
        return [
            f"{e['event_data'].get('host')}: {e['event_data'].get('task')}: "
            f"{e['event_data'].get('res', {}).get('msg', '')}"
            for e in self.events
            if e.get("event") in ("runner_on_failed", "runner_on_unreachable")
            and not e["event_data"].get("ignore_errors")
        ]


def run_playbook(
    tmp: Path, playbook: str, inventory: dict[str, Any], extravars: dict[str, Any]
) -> PlaybookRun:
    """Run ansible/playbooks/<playbook> with ansible-runner, as the driver does."""
    import ansible_runner

    tmp.mkdir(parents=True, exist_ok=True)
    inv = tmp / "inventory.yml"
    inv.write_text(yaml.safe_dump(inventory, sort_keys=False))
    env = {
        "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"),
        "ANSIBLE_LOCAL_TEMP": str(tmp / "ansible-local"),
        "ANSIBLE_NOCOLOR": "1",
        "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}",
    }
    start = time.monotonic()
    runner = ansible_runner.run(
        private_data_dir=str(tmp),
        playbook=str(ANSIBLE / "playbooks" / playbook) if "/" not in playbook else playbook,
        inventory=str(inv),
        extravars=extravars,
        envvars=env,
        quiet=True,
    )
    seconds = time.monotonic() - start
    stdout = runner.stdout.read() if runner.stdout else ""
    (tmp / "stdout.txt").write_text(stdout)
    return PlaybookRun(
        rc=runner.rc,
        status=runner.status,
        stats=runner.stats or {},
        events=list(runner.events),
        stdout=stdout,
        seconds=seconds,
    )


def build_wheelhouse() -> Path:
    """Wheels for PACKAGES, downloaded once per machine (pip takes CPU torch from its local
    find-links); a second test process waits for the first one's download."""
    digest = hashlib.sha256(json.dumps(PACKAGES).encode()).hexdigest()[:12]

    def download(folder: Path) -> None:
        argv = [sys.executable, "-m", "pip", "download", "-qq", "--only-binary=:all:"]
        subprocess.run([*argv, "-d", str(folder), *PACKAGES], check=True)

    fill_once(WHEELHOUSE, download, marker=f".complete-{digest}")
    return WHEELHOUSE
