"""The acceptance check: an all-reduce across every node, run on the head."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from rlinfra import layout, ui
from rlinfra.deploy import cluster_lock, require_cluster, update_record
from rlinfra.errors import OperationError, UsageError
from rlinfra.record import Host, Record, Stage

# Where the acceptance role keeps the running check's pid and its script, on every node.
ACCEPTANCE_SCRIPT = layout.ACCEPTANCE_SCRIPT


ACCEPTANCE_PIDFILE = layout.ACCEPTANCE_PIDFILE


def start_check(folder: Path, hosts: list[Host]) -> None:
    """The check playbook; interrupted, it also ends the all-reduce it started on the nodes."""
    from rlinfra.runners.ansible import run_playbook

    try:
        run_playbook(folder / "ansible", "check.yml", "acceptance check (all-reduce)")
    except KeyboardInterrupt:
        with ui.step("interrupted: ending the all-reduce on the nodes"):
            stopped = stop_remote_checks(folder, hosts)
        for name in stopped:
            ui.info(f"stopped the all-reduce on {name}")
        raise


def stop_remote_checks(folder: Path, hosts: list[Host]) -> list[str]:
    """End a running acceptance check on every node; the nodes where one was running."""
    from concurrent.futures import ThreadPoolExecutor

    from rlinfra.ops.jobs import NODE_PYTHON
    from rlinfra.runners import ssh

    command = f"{NODE_PYTHON} {ACCEPTANCE_SCRIPT} --stop --pidfile {ACCEPTANCE_PIDFILE}"

    def stop(host: Host) -> str | None:
        try:
            done = ssh.run(folder, host, command, capture=True, timeout=30)
        except subprocess.TimeoutExpired:
            return None
        return host.name if done.returncode == 0 and "stopped" in (done.stdout or "") else None

    with ThreadPoolExecutor(max_workers=min(16, max(1, len(hosts)))) as pool:
        return [name for name in pool.map(stop, hosts) if name]


def read_check(folder: Path) -> dict[str, Any] | None:
    path = folder / "check.json"
    if not path.is_file():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


# How long `check` waits for each node's answer before calling it unreachable.
CHECK_REACH_S = 20.0


def check(cluster: str) -> dict[str, Any]:
    from rlinfra.ops import verify

    folder, record = require_cluster(cluster)
    require_ready(cluster, record)
    (folder / "check.json").unlink(missing_ok=True)
    with cluster_lock(folder, "check"):
        # A node that is unreachable or gone from Ray fails the check at once, by name, instead
        # of an all-reduce that waits for it.
        hosts = list(record.hosts)
        with ui.step(f"reach {len(hosts)} node(s) and their Ray"):
            found = verify.verify_cluster(
                folder, hosts, record.ansible_digest or "", timeout=CHECK_REACH_S
            )
        # A worker's own problem names the node that is gone; the head's report follows it.
        lost = sorted((p for p in found.problems if p.lost), key=lambda p: p.host == hosts[0].name)
        if lost:
            more = f" (+{len(lost) - 1} more)" if len(lost) > 1 else ""
            raise OperationError(
                f"acceptance check not run: {lost[0]}{more}",
                f"`rlinfra up {cluster}` heals the cluster; then check again.",
            )
        start_check(folder, hosts)
    result = read_check(folder)
    if result is None:
        raise OperationError("the acceptance check wrote no result")
    update_record(folder, check=result)
    return result


def require_ready(cluster: str, record: Record) -> None:
    if record.stage == Stage.DOWN or not record.hosts:
        raise UsageError(
            f"cluster {cluster!r} is down", f"Bring it up: rlinfra up --cluster {cluster}"
        )
