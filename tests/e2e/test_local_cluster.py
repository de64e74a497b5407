"""End to end on the local cloud: the real CLI, real Terraform, Ansible over SSH, Ray, gloo.

One cluster of 2 hosts is brought up for the module (its first `up` is interrupted with Ctrl-C
midway and re-run, which must converge), then each test drives the CLI against it, in order.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from helpers.cluster import Cluster, cli_env, leftovers, missing_requirements, netns_id
from helpers.paths import RLINFRA

pytestmark = pytest.mark.e2e

if missing_requirements():
    pytest.skip(missing_requirements() or "", allow_module_level=True)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    # Local hosts replace /tmp with their own: rlinfra's home, whose buckets they mount, lives
    # under /var/tmp.
    home = Path(tempfile.mkdtemp(prefix=f"rlinfra-{name}-", dir="/var/tmp"))
    handle = Cluster(name, home, cli_env(home))
    try:
        yield handle
    finally:
        if (handle.folder / "record.json").is_file():
            handle.run("down", name, "--yes", "--delete-buckets", check=False)
        root = handle.folder / "terraform" / "cluster"
        if root.is_dir() and leftovers(name):
            subprocess.run(
                ["terraform", "destroy", "-auto-approve", "-input=false"],
                cwd=root,
                env=handle.env,
                capture_output=True,
            )
        if not leftovers(name):
            shutil.rmtree(home, ignore_errors=True)


def test_up_interrupted_then_converges(cluster: Cluster) -> None:
    """Ctrl-C while Ansible runs leaves a consistent record; the same command then converges."""
    proc = subprocess.Popen(
        [RLINFRA, "up", "--profile", "local", "--cluster", cluster.name, "--yes"],
        env=cluster.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        record = cluster.folder / "record.json"
        if record.is_file() and json.loads(record.read_text()).get("stage") == "infrastructure":
            break
        time.sleep(0.2)
    time.sleep(3)
    assert proc.poll() is None, proc.communicate()[0]
    os.killpg(proc.pid, signal.SIGINT)
    output, _ = proc.communicate(timeout=180)
    assert proc.returncode != 0, output
    assert cluster.record()["stage"] == "interrupted", output
    assert "re-run the same command" in output
    # The interrupted playbook and its tasks ended with the command (ansible-playbook's workers
    # run in sessions of their own, out of the terminal's reach).
    assert _wait(lambda: not _playbooks(cluster), 30), _playbooks(cluster)

    result = cluster.json("up", "--profile", "local", "--cluster", cluster.name, "--yes")
    assert len(result["nodes"]) == 2  # type: ignore[arg-type]
    check = result["check"]
    assert isinstance(check, dict)
    assert check["world_size"] == 2
    assert cluster.record()["stage"] == "ready"


def test_status_shows_both_nodes_in_ray(cluster: Cluster) -> None:
    state = cluster.json("status", cluster.name)
    assert state["stage"] == "ready"
    nodes = state["nodes"]
    assert isinstance(nodes, list) and [n["role"] for n in nodes] == ["head", "worker"]
    ray = state["ray"]
    assert isinstance(ray, dict)
    assert ray["reachable"] is True, ray
    assert ray["alive_nodes"] == 2
    assert ray["missing_nodes"] == []


def _wait(predicate: Callable[[], object], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def _processes() -> list[tuple[int, str]]:
    out = subprocess.run(["ps", "-eo", "pid,args", "ww"], capture_output=True, text=True).stdout
    rows = [line.strip().split(None, 1) for line in out.splitlines()[1:]]
    return [(int(row[0]), row[1]) for row in rows if len(row) == 2]


def _playbooks(cluster: Cluster) -> list[str]:
    return [a for _, a in _processes() if "ansible-playbook" in a and str(cluster.folder) in a]


def _all_reduce_on(cluster: Cluster) -> list[int]:
    """Pids of the acceptance check running inside the cluster's hosts' namespaces."""
    found = []
    for pid, args in _processes():
        if "/opt/rlinfra/bin/allreduce.py" not in args or "--pidfile" not in args:
            continue
        netns = subprocess.run(
            ["ip", "netns", "identify", str(pid)], capture_output=True, text=True
        ).stdout
        if f"rl-{netns_id(cluster.name)}-" in netns:
            found.append(pid)
    return found


def test_check_interrupted_ends_the_all_reduce_on_the_nodes(cluster: Cluster) -> None:
    """Ctrl-C on `check` ends the all-reduce it started on the head, not only the local command."""
    proc = subprocess.Popen(
        [RLINFRA, "check", cluster.name],
        env=cluster.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert _wait(lambda: _all_reduce_on(cluster), 120), proc.communicate(timeout=60)[0]
        (pid,) = _all_reduce_on(cluster)
        # Once it has recorded itself (in the head's own /opt), hold the check where it is, so
        # that the interrupt finds it running however fast it is.
        # Hosts have their own pid namespace: the file holds the pid as the head sees it.
        status = Path(f"/proc/{pid}/status").read_text()
        inner = next(line.split()[-1] for line in status.splitlines() if line.startswith("NSpid:"))
        pidfile = Path(f"/proc/{pid}/root/opt/rlinfra/run/acceptance.pid")
        assert _wait(lambda: pidfile.is_file() and pidfile.read_text().strip() == inner, 60)
        os.kill(pid, signal.SIGSTOP)
        os.killpg(proc.pid, signal.SIGINT)
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode != 0, output
    assert "ending the all-reduce on the nodes" in output, output
    assert "stopped the all-reduce on " + cluster.name + "-0" in output, output
    assert _wait(lambda: not _all_reduce_on(cluster), 30), _processes()
    assert not _playbooks(cluster)


def test_check_all_reduce_across_hosts(cluster: Cluster) -> None:
    result = cluster.json("check", cluster.name)
    assert result["backend"] == "gloo"
    assert result["world_size"] == 2
    rows = result["results"]
    assert isinstance(rows, list) and len(rows) == 3
    assert all(row["busbw_gbps"] > 0 for row in rows)
    nodes = result["nodes"]
    assert isinstance(nodes, list)
    ips = {n["ip"] for n in nodes}
    assert len(ips) == 2
    assert {n["interface"] for n in nodes} == {"eth0"}


def test_exec_node_env_on_each_node(cluster: Cluster) -> None:
    state = cluster.json("status", cluster.name)
    ips = [n["private_ip"] for n in state["nodes"]]  # type: ignore[union-attr, index]
    for rank in (0, 1):
        out = cluster.run(
            "exec",
            cluster.name,
            "--node",
            str(rank),
            "--",
            "env | grep -E '^(RLINFRA|SKYPILOT|NCCL|GLOO)_' | sort",
        ).stdout
        env = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        assert env["RLINFRA_NODE_RANK"] == str(rank)
        assert env["SKYPILOT_NODE_RANK"] == str(rank)
        assert env["RLINFRA_NUM_NODES"] == "2"
        assert env["RLINFRA_NUM_GPUS_PER_NODE"] == "0"
        assert env["GLOO_SOCKET_IFNAME"] == "eth0"
        assert env["NCCL_SOCKET_IFNAME"] == "eth0"
        assert env["RLINFRA_TASK_ID"] == cluster.record()["task_id"]
        node_ips = cluster.run(
            "exec", cluster.name, "--node", str(rank), "--", 'printf "%s" "$RLINFRA_NODE_IPS"'
        ).stdout
        assert node_ips.splitlines() == ips
        info = json.loads(
            cluster.run(
                "exec",
                cluster.name,
                "--node",
                str(rank),
                "--",
                'printf "%s" "$SKYPILOT_CLUSTER_INFO"',
            ).stdout
        )
        assert info["cluster"] == cluster.name and info["cloud"] == "local"
    failing = cluster.run("exec", cluster.name, "--", "exit 7", check=False)
    assert failing.returncode == 7


BUCKET = "rlinfra-local-checkpoints"
# The local profile's data: 36 training rows in batches of 8 (Verl drops the last, short one).
STEPS_PER_EPOCH = 4
CANARY = "wandb-canary-7d41c9e2b8f05a63"


def test_training_job_writes_checkpoints_to_the_bucket(cluster: Cluster) -> None:
    """`up` submitted the profile's job: Verl's own trainer (PPO with a critic) in rlinfra's CPU
    mode, one worker on each host; its log, state, checkpoints and merged model are real."""
    follow = cluster.run("logs", cluster.name, "--follow", timeout=1200)
    log = follow.stdout
    assert "job_runner: make-model done" in log or "make-model: already done" in log, log
    assert "job_runner: dataprep done" in log or "dataprep: already done" in log, log
    assert "verl_cpu:" in log, log  # the CPU mode announced itself
    for step in (1, 2, 3, 4):
        assert re.search(rf"step:{step} - ", log), (step, log[-4000:])
    assert not re.search(r"step:5 - ", log)
    assert "job_runner: merge done" in log, log
    # Verl's workers ran on both hosts, one rank on each (CPU mode names the node of each rank).
    ips = [node["private_ip"] for node in cluster.json("status", cluster.name)["nodes"]]  # type: ignore[index]
    placed = set(re.findall(r"verl_cpu: rank \d of 2 joined over gloo on node (\S+)", log))
    assert placed >= set(ips), (placed, ips)
    jobs = cluster.json("status", cluster.name)["jobs"]
    assert isinstance(jobs, list) and jobs[-1]["status"] == "SUCCEEDED", jobs
    bucket = cluster.home / "buckets" / BUCKET
    assert (bucket / "latest_checkpointed_iteration.txt").read_text().strip() == "4"
    for step in (2, 4):
        for role in ("actor", "critic"):
            shards = sorted(p.name for p in (bucket / f"global_step_{step}" / role).glob("*.pt"))
            # FSDP2 over 2 ranks: each rank wrote its own shard from its own host.
            assert any("world_size_2_rank_0" in n for n in shards), shards
            assert any("world_size_2_rank_1" in n for n in shards), shards
    assert (bucket / "data" / "gsm8k" / "_SUCCESS").is_file()
    assert (bucket / "models" / "tiny-qwen2" / "_SUCCESS").is_file()
    merged = json.loads((bucket / "hf_model" / ".rlinfra-merge.json").read_text())
    assert merged["step"] == 4
    # Each node sees the bucket itself at /checkpoints (a mount, not a copy).
    for rank in (0, 1):
        seen = cluster.run(
            "exec",
            cluster.name,
            "--node",
            str(rank),
            "--",
            "cat /checkpoints/latest_checkpointed_iteration.txt",
        )
        assert seen.stdout.strip() == "4"


def test_merged_model_is_trained(cluster: Cluster) -> None:
    """The merged model loads with transformers, and training changed its weights."""
    import torch
    from transformers import AutoModelForCausalLM

    bucket = cluster.home / "buckets" / BUCKET
    initial = AutoModelForCausalLM.from_pretrained(bucket / "models" / "tiny-qwen2")
    merged = AutoModelForCausalLM.from_pretrained(bucket / "hf_model")
    before = dict(initial.named_parameters())
    changed = [
        name
        for name, value in merged.named_parameters()
        if not torch.equal(value.detach(), before[name].detach())
    ]
    assert changed, "the merged model's weights equal the initial random ones"


def test_rerun_with_new_env_resumes_and_keeps_the_secret_private(cluster: Cluster) -> None:
    """`run --env TOTAL_EPOCHS=2` on the live cluster resumes from step 4; a secret given with
    --secret reaches the job's environment and nothing else."""
    env = dict(cluster.env, WANDB_API_KEY=CANARY)
    submitted = subprocess.run(
        [
            RLINFRA,
            "run",
            cluster.name,
            "--env",
            "TOTAL_EPOCHS=2",
            "--secret",
            "WANDB_API_KEY",
            "--json",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert submitted.returncode == 0, submitted.stderr
    assert "override env.TOTAL_EPOCHS: 1 -> 2" in submitted.stderr
    job_id = json.loads(submitted.stdout)["submission_id"]
    seen_ps = []
    for _ in range(5):
        ps = cluster.run("exec", cluster.name, "--all", "--", "ps -eo args")
        seen_ps.append(ps.stdout + ps.stderr)
        time.sleep(1)
    follow = cluster.run("logs", cluster.name, "--job", job_id, "--follow", timeout=1200)
    log = follow.stdout
    # Verl resumed from the bucket's latest checkpoint and went on to step 8.
    assert "global_step_4" in log and re.search(r"[Rr]esum", log), log[-4000:]
    assert re.search(r"step:8 - ", log) and not re.search(r"step:[1-4] - ", log), log[-4000:]
    # The job received the value itself (its fingerprint), not only the name.
    fingerprint = "sha256:" + hashlib.sha256(CANARY.encode()).hexdigest()[:12]
    assert f"job_runner: secret WANDB_API_KEY: {fingerprint}" in log, log
    assert "dataprep: already done" in log and "make-model: already done" in log, log
    bucket = cluster.home / "buckets" / BUCKET
    assert (bucket / "latest_checkpointed_iteration.txt").read_text().strip() == "8"
    assert json.loads((bucket / "hf_model" / ".rlinfra-merge.json").read_text())["step"] == 8
    # The canary is nowhere: not in rlinfra's output, the job's log, its metadata or runtime
    # env, `ps` on the nodes, the deployment folder (Terraform state, Ansible artifacts), the
    # job's folder on the head.
    details = cluster.run(
        "exec",
        cluster.name,
        "--",
        "ray list jobs --address http://127.0.0.1:8265 --detail --format json",
    ).stdout
    assert job_id in details
    left_on_head = cluster.run(
        "exec",
        cluster.name,
        "--",
        f"ls /opt/rlinfra/jobs/{job_id}; "
        f"grep -rl {CANARY} /opt/rlinfra /tmp/ray/session_latest/logs || true",
    ).stdout
    assert "secrets.env" not in left_on_head and "spec.json" in left_on_head
    # Nor on any node: their files, Ray's logs and the bucket.
    on_nodes = cluster.run(
        "exec",
        cluster.name,
        "--all",
        "--",
        f"grep -rl {CANARY} /opt/rlinfra /tmp/ray /checkpoints 2>/dev/null || true",
    )
    assert CANARY not in on_nodes.stdout and "/" not in on_nodes.stdout.strip(), on_nodes.stdout
    texts = [submitted.stdout, submitted.stderr, log, details, left_on_head, *seen_ps]
    assert len(seen_ps) == 5
    assert all(CANARY not in text for text in texts)
    found = subprocess.run(
        ["grep", "-rl", CANARY, str(cluster.home)], capture_output=True, text=True
    )
    assert found.stdout == "", found.stdout


def _get(url: str, data: bytes | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
        return getattr(exc, "code", 0) or 0, str(exc)


def _server_pid(cluster: Cluster) -> str:
    out = cluster.run(
        "exec",
        cluster.name,
        "--",
        "pgrep -f 'rlinfra_node.model_server [s]erve-transformers' || true",
    )
    return out.stdout.strip()


def test_model_server_is_served_supervised_and_restarted(cluster: Cluster) -> None:
    """The job's last step serves the merged model; a killed server comes back by itself."""
    state = cluster.run("status", cluster.name).stdout
    assert "service model (transformers) on port 9090" in state, state
    info = cluster.json("status", cluster.name, "--endpoint", "9090")
    url = str(info["url"])
    assert _get(f"{url}/health")[0] == 200
    code, body = _get(f"{url}/v1/models")
    assert code == 200 and json.loads(body)["data"][0]["rlinfra_step"] == 8, body
    prompt = "Natalia sold clips to 48 of her friends"
    request = {"prompt": prompt, "max_tokens": 8, "temperature": 0}
    code, body = _get(f"{url}/v1/completions", json.dumps(request).encode())
    assert code == 200, body
    served = json.loads(body)["choices"][0]["text"]
    # The same text as transformers' greedy decode of the merged (resumed, step 8) model.
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = cluster.home / "buckets" / BUCKET / "hf_model"
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    ids = tokenizer(prompt, return_tensors="pt")
    out = model.generate(**ids, do_sample=False, max_new_tokens=8)
    expected = tokenizer.decode(out[0][ids["input_ids"].shape[1] :], skip_special_tokens=True)
    assert served == expected, (served, expected)
    # status tells how far training got: the job's last step, the bucket's last checkpoint, and
    # the step of the model being served.
    progress = cluster.json("status", cluster.name)["progress"]
    assert progress["job_step"] == 8, progress
    assert progress["checkpoint_step"] == 8 and progress["served_step"] == 8, progress
    text = cluster.run("status", cluster.name).stdout
    assert (
        "training: latest job at step 8; last checkpoint step 8; served model from step 8" in text
    )
    first = _server_pid(cluster)
    assert first.isdigit(), first
    cluster.run("exec", cluster.name, "--", f"kill -9 {first}")
    started = time.monotonic()
    down_for = None
    while time.monotonic() - started < 90:
        pid = _server_pid(cluster)
        if pid.isdigit() and pid != first and _get(f"{url}/health")[0] == 200:
            down_for = time.monotonic() - started
            break
        time.sleep(1)
    assert down_for is not None, "the model server was not restarted within 90 s"
    print(f"model server back {down_for:.1f} s after it was killed")


def test_second_up_changes_nothing_and_lock_refuses_a_concurrent_up(cluster: Cluster) -> None:
    # --full runs every role although nothing changed: the roles themselves are idempotent.
    argv = [
        RLINFRA,
        "up",
        "--cluster",
        cluster.name,
        "--yes",
        "--no-check",
        "--no-run",
        "--full",
        "--json",
    ]
    proc = subprocess.Popen(
        argv, env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    lock = cluster.folder / ".lock"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not lock.read_text().strip():
        time.sleep(0.05)
    second = cluster.run("up", "--cluster", cluster.name, "--yes", check=False)
    busy = json.loads(cluster.run("status", cluster.name, "--json").stdout)
    out, err = proc.communicate(timeout=600)
    assert busy["lock"] == {"command": "up", "pid": proc.pid, "running": True}
    assert proc.returncode == 0, err
    assert second.returncode == 2, second.stderr
    assert f"cluster '{cluster.name}' is busy" in second.stderr
    result = json.loads(out)
    assert result["terraform_changed"] is False
    assert result["configured"] == "applied"
    assert result["ansible_changed"] == 0, err


def test_unchanged_up_verifies_the_nodes_instead_of_running_ansible(cluster: Cluster) -> None:
    started = time.monotonic()
    result = cluster.json("up", "--cluster", cluster.name, "--yes", "--no-run")
    took = time.monotonic() - started
    assert result["terraform_changed"] is False
    assert result["configured"] == "verified", result["verify_problems"]
    assert result["ansible_changed"] == 0 and result["verify_problems"] == []
    print(f"unchanged up, nodes verified: {took:.1f} s")
    # A node whose marker says another configuration was applied is not trusted.
    cluster.run("exec", cluster.name, "--node", "1", "--", "echo stale > /opt/rlinfra/converged")
    again = cluster.json("up", "--cluster", cluster.name, "--yes", "--no-run", "--no-check")
    assert again["configured"] == "applied"
    assert again["verify_problems"] == [
        f"{cluster.name}-1: its last configuration run applied other inputs"
    ]
    assert again["ansible_changed"] == 1  # the marker, written again
    assert cluster.json("up", "--cluster", cluster.name, "--yes", "--no-run")["configured"] == (
        "verified"
    )


def test_dashboard_endpoint_through_ssh_tunnel(cluster: Cluster) -> None:
    info = cluster.json("status", cluster.name, "--endpoint", "8265")
    assert info["via"] == "ssh-tunnel"  # the dashboard listens on the head's loopback only
    url = str(info["url"])
    # Ray's token authentication is on: without the cluster's token the job API refuses.
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{url}/api/version", timeout=20)
    assert refused.value.code == 401
    token_file = Path(str(info["ray_token_file"]))
    assert token_file.parent.parent == cluster.home / "clusters" / cluster.name
    assert token_file.stat().st_mode & 0o777 == 0o600
    request = urllib.request.Request(
        f"{url}/api/version",
        headers={"Authorization": f"Bearer {token_file.read_text().strip()}"},
    )
    with urllib.request.urlopen(request, timeout=20) as response:
        assert response.status == 200
    again = cluster.json("status", cluster.name, "--endpoint", "8265")
    assert again["url"] == url


def test_ray_stopped_on_a_worker_is_named_by_check_and_healed_by_up(cluster: Cluster) -> None:
    cluster.run(
        "exec",
        cluster.name,
        "--node",
        "1",
        "--",
        "/opt/rlinfra/venv/bin/ray stop --force >/dev/null 2>&1",
    )
    deadline = time.monotonic() + 90
    ray: dict[str, object] = {}
    while time.monotonic() < deadline:
        ray = cluster.json("status", cluster.name)["ray"]  # type: ignore[assignment]
        if ray.get("alive_nodes") == 1:
            break
        time.sleep(3)
    assert ray.get("missing_nodes") == [f"{cluster.name}-1"], ray
    # `check` names the node at once instead of waiting in an all-reduce for it.
    started = time.monotonic()
    refused = cluster.run("check", cluster.name, check=False)
    assert refused.returncode == 1, refused.stderr
    assert f"acceptance check not run: {cluster.name}-1: no Ray raylet" in refused.stderr
    assert time.monotonic() - started < 60
    result = cluster.json("up", "--cluster", cluster.name, "--yes", "--no-check", "--no-run")
    assert result["terraform_changed"] is False
    assert result["configured"] == "applied"
    worker_ip = cluster.record()["hosts"][1]["private_ip"]  # type: ignore[index]
    assert f"{cluster.name}-1: no Ray raylet of {worker_ip} joined to" in " ".join(
        result["verify_problems"]  # type: ignore[arg-type]
    ), result["verify_problems"]
    assert isinstance(result["ansible_changed"], int) and result["ansible_changed"] > 0
    ray = cluster.json("status", cluster.name)["ray"]  # type: ignore[assignment]
    assert ray["alive_nodes"] == 2 and ray["missing_nodes"] == []


def _head_ray_pids(cluster: Cluster) -> str:
    """The head's GCS server and raylet pids (its Ray session)."""
    # By process name: a pattern on command lines would also match this command's own shell.
    found = cluster.run(
        "exec", cluster.name, "--node", "0", "--", "(pgrep -x gcs_server; pgrep -x raylet) | sort"
    )
    return found.stdout.strip()


def test_run_recover_replaces_a_killed_worker_host_and_resumes(cluster: Cluster) -> None:
    """The worker host dies mid-training (its sshd is its PID 1: every process of the host goes
    with it, as with a preempted machine). `run --recover` sees the job fail naming the node,
    lets `up` replace that host only (the head stays), resubmits, and the job
    resumes from the last checkpoint and finishes; `status` lists the recovery."""
    bucket = cluster.home / "buckets" / BUCKET
    saved = int((bucket / "latest_checkpointed_iteration.txt").read_text())
    epochs = saved // STEPS_PER_EPOCH + 2  # 8 steps to go: time to kill a host mid-training
    head_ray = _head_ray_pids(cluster)
    hosts_before = cluster.record()["hosts"]
    node = f"{cluster.name}-1"
    worker_ip = cluster.record()["hosts"][1]["private_ip"]  # type: ignore[index]
    pid_file = cluster.folder / "nodes" / node / "sshd.pid"
    sshd = int(pid_file.read_text())
    err = cluster.home / "recover.err"
    with err.open("w") as stderr:
        run = subprocess.Popen(
            [
                RLINFRA,
                "run",
                cluster.name,
                "--recover",
                "--json",
                "--env",
                f"TOTAL_EPOCHS={epochs}",
            ],
            env=cluster.env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        try:
            deadline = time.monotonic() + 600
            while not re.search(rf"step:{saved + 1} - ", cluster.run("logs", cluster.name).stdout):
                assert run.poll() is None, err.read_text()
                assert time.monotonic() < deadline, "the job did not start training"
                time.sleep(2)
            os.kill(sshd, signal.SIGKILL)
            killed = time.monotonic()
            out, _ = run.communicate(timeout=1200)
        finally:
            if run.poll() is None:
                run.kill()
    took = time.monotonic() - killed
    assert run.returncode == 0, err.read_text()[-4000:]
    result = json.loads(out)
    assert result["status"] == "SUCCEEDED", result
    assert len(result["jobs"]) == 2 and len(result["recoveries"]) == 1, result
    recovery = result["recoveries"][0]
    assert recovery["nodes"] == [f"node 1 ({worker_ip})"], recovery
    assert recovery["reason"] == "left the Ray cluster (job runner)"
    assert recovery["replaced"] == [f"node {node}: its sshd (pid file {pid_file}) is not running"]
    assert recovery["resubmitted"] == result["jobs"][1]
    resumed = recovery["resumed_from_step"]
    assert resumed >= saved and recovery["last_step"] >= saved + 1, recovery
    assert recovery["steps_lost"] == recovery["last_step"] - resumed
    seconds = recovery["seconds"]
    for phase in ("terraform", "ansible", "ray_join", "verl_restart", "total"):
        assert seconds[phase] > 0, seconds
    print(f"recovery: {took:.0f} s from the kill to the end of the run; phases {seconds}")
    # Only the worker was replaced: the head kept its Ray session (the heal configures the
    # nodes as the last `up` did, without the run's --env, so the head's contract is unchanged),
    # the worker its rank.
    assert len(head_ray.split()) == 2
    assert _head_ray_pids(cluster) == head_ray
    assert cluster.record()["hosts"][0] == hosts_before[0]  # type: ignore[index]
    assert int(pid_file.read_text()) != sshd
    rank = cluster.run("exec", cluster.name, "--node", "1", "--", "echo $RLINFRA_NODE_RANK")
    assert rank.stdout.strip() == "1"
    log = cluster.run("logs", cluster.name, "--job", result["jobs"][1]).stdout
    assert f"global_step_{resumed}" in log and re.search(r"[Rr]esum", log), log[-3000:]
    assert re.search(rf"step:{epochs * STEPS_PER_EPOCH} - ", log), log[-3000:]
    failed = cluster.run("logs", cluster.name, "--job", result["jobs"][0]).stdout
    assert f"node 1 ({worker_ip}) left the Ray cluster" in failed
    state = cluster.json("status", cluster.name)
    assert state["recoveries"][-1]["job"] == result["jobs"][0]  # type: ignore[index]
    text = cluster.run("status", cluster.name).stdout
    assert f"node 1 ({worker_ip}) left the Ray cluster (job runner); resumed from step" in text
    again = cluster.json("up", "--cluster", cluster.name, "--yes", "--no-check", "--no-run")
    assert again["replaced"] == [] and again["terraform_changed"] is False


def test_down_leaves_nothing_but_the_bucket(cluster: Cluster) -> None:
    bucket = cluster.home / "buckets" / "rlinfra-local-checkpoints"
    assert bucket.is_dir()
    refused = cluster.run("down", cluster.name, check=False)
    assert refused.returncode == 2 and "not confirmed" in refused.stderr
    assert leftovers(cluster.name) != []
    cluster.run("down", cluster.name, "--yes")
    assert leftovers(cluster.name) == []
    assert bucket.is_dir(), "down must keep the bucket"
    assert not (cluster.folder / "nodes").exists() or not any((cluster.folder / "nodes").iterdir())
    assert cluster.json("status", cluster.name)["stage"] == "down"
    cluster.run("down", cluster.name, "--yes", "--delete-buckets")
    assert not bucket.exists()
    gone = cluster.run("status", cluster.name, check=False)
    assert gone.returncode == 2 and "unknown cluster" in gone.stderr
