"""A profile's workload as a Ray job on a running cluster: submit, follow, list.

The job is submitted to the cluster's job API on the head node (`ray job submit`, run over SSH
with the cluster's token), never through a hand-kept SSH session: Ray runs and supervises it,
and its logs and state stay with the cluster. What travels to the head, in one tar on SSH's
standard input (never in arguments): the JobSpec (no secret in it), the node-side package
(``rlinfra_node``, the job's working dir, so every node imports the same code) and, when the
run has secrets, a 0600 file of them that the job's entrypoint reads and deletes at once.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import shlex
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlinfra import layout, ui
from rlinfra.deploy import require_cluster, update_record
from rlinfra.errors import NodeUnreachableError, OperationError, UsageError
from rlinfra.jobspec import JobSpec, job_spec
from rlinfra.plan import Plan
from rlinfra.record import Host, JobEntry, Record, Stage

JOBS_DIR = layout.JOBS
# The node venv's interpreter (python_env_venv): the job runner, and the steps it starts, use it.
NODE_PYTHON = layout.PYTHON
TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}


@dataclass(frozen=True)
class Submitted:
    submission_id: str
    entrypoint: str


def _dashboard(record: Record) -> str:
    return f"http://127.0.0.1:{record.dashboard_port}"


def _ready(cluster: str) -> tuple[Path, Record, Host]:
    folder, record = require_cluster(cluster)
    if record.stage != Stage.READY:
        raise UsageError(
            f"cluster {cluster!r} is not ready (stage: {record.stage.value})",
            f"Bring it up first: rlinfra up --cluster {cluster}",
        )
    hosts = list(record.hosts)
    if not hosts:
        raise UsageError(f"cluster {cluster!r} has no nodes")
    return folder, record, hosts[0]


def submission_id(spec: JobSpec, now: dt.datetime | None = None) -> str:
    stamp = (now or dt.datetime.now(dt.timezone.utc)).strftime("%Y%m%d-%H%M%S")
    return f"{spec.submission_prefix}-{stamp}"


def bundle(spec: JobSpec, secrets: dict[str, str], package: Path) -> bytes:
    """The tar sent to the head: spec.json, work/rlinfra_node/..., and secrets.env (0600)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:

        def add(name: str, data: bytes, mode: int = 0o644) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = mode
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))

        add("spec.json", (json.dumps(spec.to_json(), indent=2) + "\n").encode())
        for path in sorted(package.rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts or path.suffix == ".pyc":
                continue
            rel = path.relative_to(package.parent).as_posix()
            add(f"work/{rel}", path.read_bytes())
        if secrets:
            for name, value in secrets.items():
                if "\n" in value or "\r" in value:
                    raise UsageError(
                        f"--secret {name}: the value spans lines, which is not allowed"
                    )
            text = "".join(f"{name}={value}\n" for name, value in sorted(secrets.items()))
            add("secrets.env", text.encode(), mode=0o600)
    return out.getvalue()


def submit(cluster: str, spec: JobSpec, secrets: dict[str, str]) -> Submitted:
    """Send the job's files to the head and submit it to Ray's job API (not waiting for it)."""
    import rlinfra_node
    from rlinfra.runners import ssh

    folder, record, head = _ready(cluster)
    job_id = submission_id(spec)
    where = f"{JOBS_DIR}/{job_id}"
    package = Path(rlinfra_node.__file__).parent
    sent = ssh.run(
        folder,
        head,
        f"umask 077 && mkdir -p {where} && tar -xzf - -C {where} --no-same-owner",
        capture=True,
        timeout=120,
        stdin=bundle(spec, secrets, package),
    )
    if sent.returncode != 0:
        raise OperationError(f"could not send the job to {head.name}: {sent.stderr.strip()}")
    runner = [NODE_PYTHON, "-m", "rlinfra_node.job_runner", "--spec", f"{where}/spec.json"]
    if secrets:
        runner += ["--secrets", f"{where}/secrets.env"]
    runtime_env = {"env_vars": dict(spec.runtime_env_vars)}
    command = shlex.join(
        [
            "ray",
            "job",
            "submit",
            "--address",
            _dashboard(record),
            "--no-wait",
            "--submission-id",
            job_id,
            "--working-dir",
            f"{where}/work",
            "--runtime-env-json",
            json.dumps(runtime_env, sort_keys=True),
            "--metadata-json",
            json.dumps({"rlinfra_cluster": cluster, "workload": spec.workload_type}),
            "--",
            *runner,
        ]
    )
    try:
        result = ssh.run(folder, head, command, capture=True, timeout=180)
    except BaseException:
        # Interrupted or timed out: the job may never start to read (and delete) the secrets.
        _remove_secrets(folder, head, where)
        raise
    if result.returncode != 0:
        _remove_secrets(folder, head, where)
        tail = (result.stderr.strip() or result.stdout.strip()).splitlines()[-3:]
        raise OperationError(f"Ray refused the job: {' '.join(tail)}")
    jobs = [*record.jobs, JobEntry(submission_id=job_id, workload=spec.workload_type)]
    update_record(folder, jobs=jobs[-20:])
    return Submitted(job_id, shlex.join(runner))


def _remove_secrets(folder: Path, head: Any, where: str) -> None:
    from rlinfra.runners import ssh

    ssh.run(folder, head, f"rm -f {where}/secrets.env", capture=True, timeout=60)


def latest_job(cluster: str) -> str:
    _, record = require_cluster(cluster)
    jobs = record.jobs
    if not jobs:
        raise UsageError(f"cluster {cluster!r} has run no job", f"Start one: rlinfra run {cluster}")
    return jobs[-1].submission_id


def _ray_job(cluster: str, *args: str, timeout: float = 120) -> str:
    from rlinfra.runners import ssh

    folder, record, head = _ready(cluster)
    command = shlex.join(["ray", "job", *args, "--address", _dashboard(record)])
    result = ssh.run(folder, head, command, capture=True, timeout=timeout)
    _require_connected(cluster, head, result)
    if result.returncode != 0:
        tail = (result.stderr.strip() or result.stdout.strip()).splitlines()[-2:]
        raise OperationError(f"ray job {args[0]} failed on {head.name}: {' '.join(tail)}")
    return result.stdout


def _require_connected(cluster: str, head: Host, result: Any) -> None:
    """A NodeUnreachableError when SSH reached no shell on the head (nothing ran there)."""
    from rlinfra.ops.nodes import unreachable
    from rlinfra.runners import ssh

    reason = ssh.connect_failure(result.returncode, result.stderr)
    if reason is not None:
        raise unreachable(cluster, head, reason)


def no_such_job(cluster: str, job_id: str) -> UsageError:
    return UsageError(
        f"cluster {cluster!r} has no job {job_id!r}", f"List its jobs: rlinfra status {cluster}"
    )


def job_status(cluster: str, job_id: str) -> str:
    """PENDING, RUNNING, SUCCEEDED, FAILED or STOPPED (from Ray's state API)."""
    for job in list_jobs(cluster):
        if job["submission_id"] == job_id:
            return str(job["status"])
    raise no_such_job(cluster, job_id)


def job_logs(cluster: str, job_id: str) -> str:
    """The job's log so far; UsageError when the cluster's Ray has no job ``job_id``."""
    try:
        return _ray_job(cluster, "logs", job_id, timeout=300)
    except NodeUnreachableError:
        raise
    except OperationError:
        # Ray answers an id it does not know with an HTTP error: its job list tells that case
        # from a job whose log could not be read.
        if all(job["submission_id"] != job_id for job in list_jobs(cluster)):
            raise no_such_job(cluster, job_id) from None
        raise


def list_jobs(cluster: str) -> list[dict[str, Any]]:
    """Every job of the cluster, from Ray's state API: id, status, entrypoint, times."""
    from rlinfra.runners import ssh

    folder, record, head = _ready(cluster)
    command = shlex.join(
        ["ray", "list", "jobs", "--address", _dashboard(record), "--format", "json", "--detail"]
    )
    result = ssh.run(folder, head, command, capture=True, timeout=120)
    _require_connected(cluster, head, result)
    if result.returncode != 0:
        raise OperationError(f"could not list the jobs of {cluster!r}: {result.stderr.strip()}")
    text = result.stdout
    items = json.loads(text[text.index("[") :]) if "[" in text else []
    return [
        {
            "submission_id": item.get("submission_id"),
            "status": item.get("status"),
            "entrypoint": item.get("entrypoint"),
            "start_time": item.get("start_time"),
            "end_time": item.get("end_time"),
        }
        for item in items
        if item.get("submission_id")
    ]


def follow(
    cluster: str,
    job_id: str,
    poll_s: float = 2.0,
    timeout_s: float | None = None,
    on_log: Callable[[str], None] | None = None,
    to_stderr: bool = False,
) -> str:
    """Print the job's log as it grows until it ends; returns its final state. ``on_log`` is
    given the whole log each time it grew. ``to_stderr``: the log goes to standard error (the
    caller prints JSON on standard output)."""
    console = ui.err if to_stderr else ui.out
    shown = 0
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        state = job_status(cluster, job_id)
        text = job_logs(cluster, job_id)
        if len(text) > shown:
            console.print(text[shown:], end="", markup=False, highlight=False)
            shown = len(text)
            if on_log is not None:
                on_log(text)
        if state in TERMINAL:
            return state
        if deadline is not None and time.monotonic() > deadline:
            raise OperationError(f"job {job_id} still {state} after {timeout_s:.0f} s")
        time.sleep(poll_s)


def submit_unless_running(the_plan: Plan, secrets: dict[str, str]) -> str | None:
    """Submit the plan's workload, unless a job of this cluster is still pending or running."""
    spec = job_spec(the_plan)
    for job in list_jobs(the_plan.cluster):
        if job["status"] not in TERMINAL and str(job["submission_id"]).startswith(
            spec.submission_prefix
        ):
            ui.info(f"job {job['submission_id']} is still {job['status']}: not submitting another")
            return str(job["submission_id"])
    submitted = submit(the_plan.cluster, spec, secrets)
    ui.info(f"submitted job {submitted.submission_id}")
    ui.info(f"follow it: rlinfra logs {the_plan.cluster} --follow")
    return submitted.submission_id
