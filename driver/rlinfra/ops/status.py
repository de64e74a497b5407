"""`status`: the record, Ray's view of the nodes, the jobs and the training's progress."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from rlinfra import layout
from rlinfra.deploy import lock_holder, read_record, require_cluster
from rlinfra.errors import OperationError, UsageError
from rlinfra.record import Host, Stage

# The stage `status` shows for a ready cluster whose Ray misses some of its nodes (never a
# record's stage: the record says what the last command made).
DEGRADED = "degraded"


def status(cluster: str, live: bool = True) -> dict[str, Any]:
    folder, record = require_cluster(cluster)
    hosts = list(record.hosts)
    out: dict[str, Any] = {
        "cluster": cluster,
        "cloud": record.cloud,
        "profile": record.profile,
        "stage": record.stage.value,
        "error": record.error,
        "task_id": record.task_id,
        "nodes": [
            {
                "name": h.name,
                "rank": h.rank,
                "role": "head" if h.rank == 0 else "worker",
                "ssh_host": h.ssh_host,
                "private_ip": h.private_ip,
            }
            for h in hosts
        ],
        "buckets": list(record.buckets),
        "services": [s.model_dump() for s in record.services],
        "updated_at": record.updated_at,
        "recoveries": [r.model_dump() for r in record.recoveries],
        "lock": lock_holder(folder),
        "ray": None,
    }
    stopped = out["lock"] is not None and not out["lock"]["running"]
    live_stages = {Stage.READY, Stage.FAILED, Stage.INTERRUPTED}
    if live and hosts and (record.stage in live_stages or stopped):
        out["ray"] = ray_state(folder, hosts, record.dashboard_port)
        if record.stage == Stage.READY and out["ray"].get("missing_nodes"):
            # Ray answered, without some of the nodes `up` made ready.
            out["stage"] = DEGRADED
        if out["ray"].get("reachable") and record.stage == Stage.READY and record.jobs:
            from rlinfra.ops import jobs

            # A command at work on the cluster (an `up`) may change its stage meanwhile: the
            # jobs are then not readable, and status says so instead of failing.
            try:
                out["jobs"] = jobs.list_jobs(record.cluster or cluster)
            except (OperationError, UsageError, subprocess.TimeoutExpired) as exc:
                out["jobs_error"] = exc.message if isinstance(exc, UsageError) else str(exc)
            out["progress"] = training_progress(folder, hosts[0], out.get("jobs") or [])
    return out


def training_progress(folder: Path, head: Host, job_list: list[dict[str, Any]]) -> dict[str, Any]:
    """The latest job's last Verl step (from its log), the last checkpoint in the bucket, the
    served model's step and the spot nodes' preemption notices (rlinfra_node.progress on the
    head)."""
    import re
    import shlex

    import rlinfra_node.progress as probe
    from rlinfra.ops import jobs
    from rlinfra.runners import ssh

    try:
        spec = json.loads((folder / "job.json").read_text())
    except (OSError, ValueError):
        spec = {}
    record = read_record(folder)
    port = next((s.port for s in (record.services if record else []) if s.name == "model"), 0)
    out: dict[str, Any] = {
        "job_step": None,
        "checkpoint_step": None,
        "served_step": None,
        "notices": [],
    }
    from rlinfra_node.spot_watch import NOTICE_DIR_ENV

    env_vars = spec.get("runtime_env_vars")
    notice_dir = env_vars.get(NOTICE_DIR_ENV) if isinstance(env_vars, dict) else None
    if job_list:
        latest = str(job_list[-1]["submission_id"])
        try:
            steps = re.findall(r"(?m)\bstep:(\d+) - ", jobs.job_logs(folder.name, latest))
            out["job_step"] = int(steps[-1]) if steps else None
            out["job"] = latest
        except (OperationError, UsageError, subprocess.TimeoutExpired):
            pass
    command = shlex.join(
        [
            layout.PYTHON,
            "-I",
            "-",
            str(spec.get("checkpoint_dir") or ""),
            str(port),
            str(notice_dir or ""),
        ]
    )
    try:
        result = ssh.run(
            folder, head, command, capture=True, timeout=30, stdin=Path(probe.__file__).read_bytes()
        )
        if result.returncode == 0:
            found = json.loads(result.stdout.strip().splitlines()[-1])
            out.update({k: found.get(k) for k in ("checkpoint_step", "served_step")})
            out["notices"] = found.get("notices") or []
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        pass
    return out


def ray_state(folder: Path, hosts: list[Host], dashboard_port: int) -> dict[str, Any]:
    """Alive Ray nodes, asked of the head's dashboard over SSH (it listens on loopback only);
    when it cannot be asked, "error" and "hint" say why and what to do."""
    from rlinfra.ops.nodes import address
    from rlinfra.runners import ssh

    # ssh.run loads node.env, which carries the Ray token's settings.
    command = (
        f"{layout.VENV}/bin/ray list nodes --address http://127.0.0.1:{dashboard_port} "
        "--format json --filter state=ALIVE --limit 10000"
    )
    head = hosts[0]
    cluster = folder.name
    try:
        result = ssh.run(folder, head, command, capture=True, timeout=60)
    except subprocess.TimeoutExpired:
        return _ray_unreachable(cluster, head, "SSH gave no answer within 60 s")
    reason = ssh.connect_failure(result.returncode, result.stderr)
    if reason is not None:
        return {
            "reachable": False,
            "error": f"SSH could not connect to the head node {head.name} "
            f"({address(head)}): {reason}",
            "hint": f"`rlinfra up -c {cluster}` replaces a node that is gone",
        }
    # Ray's own words (its errors end in advice about installing Ray) are not repeated: the
    # head's Ray is rlinfra's to restart.
    if result.returncode != 0:
        return _ray_unreachable(
            cluster, head, f"`ray list nodes` failed against its dashboard on port {dashboard_port}"
        )
    try:
        nodes = json.loads(result.stdout[result.stdout.index("[") :])
    except ValueError:
        return _ray_unreachable(
            cluster, head, f"its dashboard on port {dashboard_port} gave no node list"
        )
    alive = sorted(n["node_ip"] for n in nodes)
    missing = [h.name for h in hosts if h.private_ip not in alive]
    out: dict[str, Any] = {
        "reachable": True,
        "alive_nodes": len(alive),
        "alive_ips": alive,
        "missing_nodes": missing,
    }
    if missing:
        out["hint"] = (
            f"`rlinfra up -c {cluster}` replaces a node that is gone and starts Ray again where "
            "it stopped"
        )
    return out


def _ray_unreachable(cluster: str, head: Host, why: str) -> dict[str, Any]:
    return {
        "reachable": False,
        "error": f"cannot be reached on the head node {head.name} ({why})",
        "hint": f"`rlinfra up -c {cluster}` checks every node and starts Ray again where it "
        f"stopped; `rlinfra check {cluster}` then runs the all-reduce",
    }
