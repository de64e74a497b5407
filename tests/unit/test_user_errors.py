"""What a new user sees when something is wrong: one line that says what and what to do, and the
documented exit code (1: an operation failed; 2: bad usage or input, nothing was changed).

Each test runs the real command. Where it needs a cluster, the record is written by the driver's
own functions; the head node is either a real address nothing listens on (a dead node, a Ray
nobody runs) or, where a node has to answer, the stand-ins of ``helpers.head``: an ``ssh`` that
runs the node's commands on this machine (the node's ``ray`` is the real Ray CLI) and Ray's
dashboard as far as those commands ask it. Terraform runs for real, against the provider mirror.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from helpers import head as stand_in
from helpers.cli import CliResult, Rlinfra, cli_env, files_under
from helpers.emulators import free_port
from helpers.paths import PROFILES
from helpers.terraform import MIRROR, needs_terraform
from rlinfra.deploy import deployment_dir, ensure_ssh_key, write_record
from rlinfra.ops.endpoints import stop_tunnels
from rlinfra.record import Host, Record, Stage
from rlinfra.runners import ssh

Cli = Callable[..., CliResult]

SERVICES = [{"name": "model", "engine": "vllm", "port": 9090}]


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def write_cluster(
    home: Path,
    private_ips: tuple[str, ...] = ("127.0.0.1",),
    ssh_port: int = 22,
    dashboard_port: int = 8265,
    jobs: tuple[str, ...] = (),
) -> Path:
    """A ready cluster "c1" as `up` records it: its nodes, Ray's port, a service, a key."""
    folder = deployment_dir("c1", home)
    hosts = [
        Host(f"c1-{rank}", rank, "127.0.0.1", ip, "eth0", "root", ssh_port=ssh_port)
        for rank, ip in enumerate(private_ips)
    ]
    write_record(
        folder,
        Record(
            cluster="c1",
            cloud="local",
            profile="local",
            stage=Stage.READY,
            hosts=hosts,
            ray={"dashboard_port": dashboard_port},
            services=SERVICES,
            jobs=[{"submission_id": job, "workload": "verl_ppo"} for job in jobs],
        ),
    )
    ensure_ssh_key(folder)
    return folder


@pytest.fixture
def head_ssh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-in ``ssh`` first on PATH: the folder it logs its calls in."""
    folder = stand_in.stand_in_ssh(tmp_path / "stand-in-bin")
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return folder


# ---- 1. logs of a job the cluster does not have ------------------------------------------------


def test_logs_of_a_job_the_cluster_lacks_names_it_and_how_to_list_jobs(
    cli: Cli, home: Path, head_ssh: Path
) -> None:
    """Stand-ins: the head's SSH and Ray's dashboard (which has no job 'nosuch')."""
    with stand_in.ray_dashboard(["127.0.0.1"], {"c1-verl-1": "step:1 - loss\n"}) as port:
        write_cluster(home, dashboard_port=port, jobs=("c1-verl-1",))
        result = cli("logs", "c1", "--job", "nosuch")
    assert result.code == 2, (result.code, result.err)
    assert error_lines(result.err) == [
        "Error: cluster 'c1' has no job 'nosuch'. List its jobs: rlinfra status c1"
    ]
    assert result.out == ""


# ---- 2. status of a cluster whose Ray cannot be reached ---------------------------------------


def test_status_says_ray_on_the_head_cannot_be_reached_without_rays_advice(
    cli: Cli, home: Path, head_ssh: Path
) -> None:
    """Stand-in: the head's SSH; Ray's dashboard port is one nothing listens on."""
    closed = free_port()
    write_cluster(home, dashboard_port=closed)
    result = cli("status", "c1")
    assert result.code == 0, result.err
    ray_lines = [line for line in result.out.splitlines() if line.startswith("  ray:")]
    assert ray_lines == [
        f"  ray: cannot be reached on the head node c1-0 (`ray list nodes` failed against its "
        f"dashboard on port {closed}). `rlinfra up -c c1` checks every node and starts Ray "
        "again where it stopped; `rlinfra check c1` then runs the all-reduce"
    ]
    assert "pip install" not in result.out + result.err
    state = json.loads(cli("status", "c1", "--json").out)
    assert state["ray"]["reachable"] is False and state["stage"] == "ready"


# ---- 3. a node missing from Ray; an endpoint nothing listens on -------------------------------


def test_a_ready_cluster_missing_a_node_in_ray_is_degraded_and_says_how_to_heal(
    cli: Cli, home: Path, head_ssh: Path
) -> None:
    """Stand-ins: the head's SSH and Ray's dashboard, which lists the head alone."""
    with stand_in.ray_dashboard(["10.9.0.10"]) as port:
        write_cluster(home, private_ips=("10.9.0.10", "10.9.0.11"), dashboard_port=port)
        result = cli("status", "c1")
        state = json.loads(cli("status", "c1", "--json").out)
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0] == "cluster c1 (local, profile local): degraded"
    assert [line for line in lines if line.startswith("  ray:")] == [
        "  ray: 1 node(s) alive; missing: c1-1. `rlinfra up -c c1` replaces a node that is gone "
        "and starts Ray again where it stopped"
    ]
    assert state["stage"] == "degraded"
    assert state["ray"]["missing_nodes"] == ["c1-1"]


@pytest.fixture
def cluster_with_tunnels(home: Path) -> Iterator[Path]:
    folder = write_cluster(home)
    yield folder
    stop_tunnels(folder)


def test_an_endpoint_nothing_listens_on_prints_the_url_then_exits_1(
    cli: Cli, cluster_with_tunnels: Path, head_ssh: Path
) -> None:
    """Stand-in: the head's SSH (the port check runs on this machine, as the head)."""
    closed = free_port()
    result = cli("status", "c1", "--endpoint", str(closed))
    assert result.code == 1, (result.code, result.out, result.err)
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+\n", result.out), result.out
    assert error_lines(result.err) == [
        f"Error: nothing listens on port {closed} on the head node c1-0. c1 serves model (vllm) "
        "on port 9090, Ray's dashboard on port 8265"
    ]
    # The check ran on the head, over SSH: not from this machine.
    assert any(
        call[-1].endswith(f"python3 - {closed} 127.0.0.1'") for call in stand_in.calls(head_ssh)
    ), stand_in.calls(head_ssh)
    state = json.loads(cli("status", "c1", "--endpoint", str(closed), "--json").out)
    assert state["listening"] is False and state["url"].startswith("http://127.0.0.1:")


def test_an_endpoint_that_answers_on_the_head_is_printed_with_exit_0(
    cli: Cli, cluster_with_tunnels: Path, head_ssh: Path
) -> None:
    with socket.socket() as service:
        service.bind(("127.0.0.1", 0))
        service.listen()
        port = service.getsockname()[1]
        result = cli("status", "c1", "--endpoint", str(port))
    assert result.code == 0, result.err
    assert result.out == f"http://127.0.0.1:{port}\n"
    assert result.err == ""


# ---- 4. exec on a dead node ------------------------------------------------------------------


def test_exec_on_a_node_ssh_cannot_reach_is_one_line_and_exit_1(home: Path) -> None:
    """The real ssh, to a port of this machine that nothing listens on."""
    closed = free_port()
    write_cluster(home, ssh_port=closed)
    result = Rlinfra(cli_env(home)).run("exec", "c1", "--", "true", check=False)
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert error_lines(result.stderr) == [
        f"Error: SSH could not connect to node c1-0 (127.0.0.1 port {closed}): Connection "
        "refused. See the cluster with `rlinfra status c1`; `rlinfra up -c c1` replaces a node "
        "that is gone"
    ]
    assert result.stdout == ""


def test_exec_of_a_command_that_fails_keeps_its_exit_status(home: Path, tmp_path: Path) -> None:
    """Stand-in: the head's SSH; 255 from the command itself is the command's."""
    folder = stand_in.stand_in_ssh(tmp_path / "stand-in-bin")
    write_cluster(home)
    env = cli_env(home, PATH=f"{folder}{os.pathsep}{cli_env(home)['PATH']}")
    failed = Rlinfra(env).run("exec", "c1", "--", "exit 7", check=False)
    assert failed.returncode == 7 and failed.stderr == "", failed.stderr
    own = Rlinfra(env).run("exec", "c1", "--", "echo no such thing >&2; exit 255", check=False)
    assert own.returncode == 255
    assert own.stderr == "no such thing\n"


def test_only_sshs_own_connection_failure_counts_as_one() -> None:
    closed = free_port()
    done = subprocess.run(
        [
            "ssh",
            "-o",
            "BatchMode=yes",
            "-o",
            "LogLevel=ERROR",
            "-p",
            str(closed),
            "127.0.0.1",
            "true",
        ],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert done.returncode == 255, done.stderr
    assert ssh.connect_failure(done.returncode, done.stderr) == "Connection refused"
    assert ssh.connect_failure(255, "a remote command's own error\n") is None
    assert ssh.connect_failure(1, done.stderr) is None


# ---- 5. plan --terraform without a provider or credentials ------------------------------------


@pytest.fixture
def no_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No AWS credentials anywhere: no variables, no ~/.aws."""
    for name in list(os.environ):
        if name.startswith(("AWS_", "TF_")) and name != "AWS_EC2_METADATA_DISABLED":
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))


@needs_terraform
def test_plan_without_the_provider_in_the_mirror_names_it_and_leaves_no_folder(
    cli: Cli, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_aws: None
) -> None:
    empty = tmp_path / "empty-mirror"
    empty.mkdir()
    monkeypatch.setenv("RLINFRA_TF_PLUGIN_MIRROR", str(empty))
    profile = str(PROFILES / "h100x2.yaml")
    result = cli("plan", "-p", profile, "-c", "t5", "--terraform")
    assert result.code == 2, (result.code, result.err)
    assert error_lines(result.err) == [
        "Error: Terraform could not install the provider hashicorp/aws: the mirror "
        f"RLINFRA_TF_PLUGIN_MIRROR={empty} does not hold it. Fill it with `terraform providers "
        f"mirror {empty}` where registry.terraform.io is reachable, or unset "
        "RLINFRA_TF_PLUGIN_MIRROR to use the registry"
    ]
    assert files_under(home) == []
    # A cluster folder that was there before stays.
    kept = deployment_dir("t5", home)
    kept.mkdir(parents=True)
    (kept / "notes.txt").write_text("mine\n")
    again = cli("plan", "-p", profile, "-c", "t5", "--terraform")
    assert again.code == 2, again.err
    assert (kept / "notes.txt").read_text() == "mine\n"


@needs_terraform
def test_plan_without_credentials_names_them_and_leaves_no_folder(
    cli: Cli, home: Path, monkeypatch: pytest.MonkeyPatch, no_aws: None
) -> None:
    if MIRROR is not None:
        monkeypatch.setenv("RLINFRA_TF_PLUGIN_MIRROR", str(MIRROR))
    result = cli("plan", "-p", str(PROFILES / "h100x2.yaml"), "-c", "t5", "--terraform")
    assert result.code == 2, (result.code, result.err)
    assert error_lines(result.err) == [
        "Error: Terraform found no AWS credentials. Export AWS_PROFILE, or AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY (plus AWS_SESSION_TOKEN for temporary keys), then retry; `aws sts "
        "get-caller-identity` shows what AWS sees."
    ]
    assert files_under(home) == []


# ---- 6. profiles lists what validate refuses as invalid ---------------------------------------


def test_profiles_marks_what_validate_refuses_with_validates_reason(
    cli: Cli, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "badpins.yaml").write_text("software:\n  pin_set: nosuch\n")
    (folder / "mixed.yaml").write_text("cloud: aws\nresources:\n  accelerators: [H100:8, A100:4]\n")
    monkeypatch.setenv("RLINFRA_PROFILE_PATH", str(folder))
    for name in ("badpins", "mixed"):
        refused = cli("validate", "-p", name)
        assert refused.code == 2, refused.err
        (line,) = error_lines(refused.err)
        listed = [row for row in cli("profiles").out.splitlines() if row.startswith(name)]
        assert listed == [f"{name:<16} invalid: {line.removeprefix('Error: ')}"]
    rows = {row["name"]: row for row in json.loads(cli("profiles", "--json").out)}
    assert rows["badpins"]["error"] == (
        f"{folder / 'badpins.yaml'}: software.pin_set: unknown pin set 'nosuch'. Known pin sets: "
        "cpu-sandbox, verl-cu126, verl-sglang-cu126, cpu-retrieval"
    )
    # Every built-in profile validates, and is listed as valid.
    assert all("error" not in row for name, row in rows.items() if name not in ("badpins", "mixed"))


# ---- 7. a cluster busy with another command ---------------------------------------------------

HOLDER = """
import sys, time
from pathlib import Path
from rlinfra.deploy import cluster_lock
with cluster_lock(Path(sys.argv[1]), "up"):
    print("held", flush=True)
    time.sleep(600)
"""


def test_a_cluster_busy_with_another_command_is_refused_with_exit_2(cli: Cli, home: Path) -> None:
    folder = write_cluster(home)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(folder)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        result = cli("check", "c1")
    finally:
        holder.kill()
        holder.wait(timeout=10)
    assert result.code == 2, (result.code, result.err)
    assert error_lines(result.err) == [
        f"Error: cluster 'c1' is busy: `rlinfra up` (pid {holder.pid}) holds its lock. Wait "
        "for it to finish; the lock is released when that command exits."
    ]
