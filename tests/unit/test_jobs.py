"""The job path's pure parts: the bundle sent to the head, the node-side runner, the stand-ins."""

from __future__ import annotations

import datetime as dt
import io
import json
import sys
import tarfile
import time
from pathlib import Path

import pytest

from rlinfra.clouds.planning import make_plan
from rlinfra.errors import UsageError
from rlinfra.jobspec import job_spec
from rlinfra.ops.jobs import bundle, submission_id
from rlinfra.profile import load_profile
from rlinfra_node import job_runner

CANARY = "canary-secret-3b9d1f0e"


def local_spec():  # type: ignore[no-untyped-def]
    profile, source = load_profile("local")
    return job_spec(make_plan(profile, source))


def test_local_profile_runs_verl_in_cpu_mode_with_rlinfra_owned_overrides() -> None:
    spec = local_spec()
    assert spec.entrypoint[:3] == ("python3", "-m", "rlinfra_node.verl_cpu.main_ppo")
    assert "trainer.default_local_dir=/checkpoints" in spec.entrypoint
    assert "trainer.resume_mode=auto" in spec.entrypoint
    assert "trainer.nnodes=2" in spec.entrypoint
    assert [s.name for s in spec.data_steps] == ["dataprep", "make-model"]
    assert [s.name for s in spec.after_steps] == ["merge", "serve"]


def test_bundle_carries_spec_package_and_private_secrets(tmp_path: Path) -> None:
    package = tmp_path / "rlinfra_node"
    (package / "samples").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "samples" / "rows.jsonl").write_text("{}\n")
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "x.pyc").write_bytes(b"\0")
    data = bundle(local_spec(), {"WANDB_API_KEY": CANARY}, package)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        spec_text = tar.extractfile("spec.json").read().decode()  # type: ignore[union-attr]
        secrets_text = tar.extractfile("secrets.env").read().decode()  # type: ignore[union-attr]
    assert set(members) == {
        "spec.json",
        "secrets.env",
        "work/rlinfra_node/__init__.py",
        "work/rlinfra_node/samples/rows.jsonl",
    }
    assert members["secrets.env"].mode == 0o600
    assert secrets_text == f"WANDB_API_KEY={CANARY}\n"
    assert CANARY not in spec_text
    assert json.loads(spec_text)["entrypoint"][2] == "rlinfra_node.verl_cpu.main_ppo"


def test_bundle_without_secrets_has_no_secrets_file(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    with tarfile.open(fileobj=io.BytesIO(bundle(local_spec(), {}, tmp_path / "pkg"))) as tar:
        assert "secrets.env" not in tar.getnames()


def test_bundle_refuses_a_secret_spanning_lines(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--secret HF_TOKEN: the value spans lines"):
        bundle(local_spec(), {"HF_TOKEN": "a\nB=c"}, tmp_path)


def test_submission_id_names_cluster_workload_and_time() -> None:
    when = dt.datetime(2026, 12, 3, 9, 5, 7, tzinfo=dt.timezone.utc)
    assert submission_id(local_spec(), when) == "rlinfra-local-ppo-20261203-090507"


def test_runner_reads_and_deletes_secrets(tmp_path: Path) -> None:
    path = tmp_path / "secrets.env"
    path.write_text(f"WANDB_API_KEY={CANARY}\nHF_TOKEN=x=y\n")
    assert job_runner.read_secrets(path) == {"WANDB_API_KEY": CANARY, "HF_TOKEN": "x=y"}
    assert not path.exists()
    bad = tmp_path / "bad.env"
    bad.write_text("not a pair\n")
    with pytest.raises(SystemExit, match="not NAME=VALUE"):
        job_runner.read_secrets(bad)
    assert not bad.exists()


def _spec(tmp_path: Path) -> dict[str, object]:
    return {
        "files": [[str(tmp_path / "conf" / "tool.yaml"), "tools: []\n"]],
        "data_steps": [
            {"name": "dataprep", "argv": ["prep"], "done_marker": str(tmp_path / "_SUCCESS")}
        ],
        "probe_steps": [{"name": "probe", "argv": ["probe"]}],
        "entrypoint": ["train", "a=1"],
        "after_steps": [{"name": "merge", "argv": ["merge"]}],
    }


def test_runner_runs_steps_in_order_and_skips_done_data(tmp_path: Path) -> None:
    ran: list[list[str]] = []
    lines: list[str] = []
    spec = _spec(tmp_path)
    code = job_runner.run_job(spec, {"E": "1"}, lambda a, e: ran.append(a) or 0, lines.append)
    assert code == 0
    assert ran == [["prep"], ["probe"], ["train", "a=1"], ["merge"]]
    assert (tmp_path / "conf" / "tool.yaml").read_text() == "tools: []\n"
    (tmp_path / "_SUCCESS").write_text("")
    ran.clear()
    job_runner.run_job(spec, {}, lambda a, e: ran.append(a) or 0, lines.append)
    assert ran == [["probe"], ["train", "a=1"], ["merge"]]
    assert any("dataprep: already done" in line for line in lines)


def test_runner_stops_at_the_first_failing_step(tmp_path: Path) -> None:
    ran: list[list[str]] = []
    lines: list[str] = []

    def run(argv: list[str], env: object) -> int:
        ran.append(argv)
        return 3 if argv[0] == "train" else 0

    assert job_runner.run_job(_spec(tmp_path), {}, run, lines.append) == 3
    assert ran[-1] == ["train", "a=1"]
    assert "job_runner: train failed with exit code 3" in lines[-1]


def test_runner_runs_python_steps_with_its_own_interpreter() -> None:
    assert job_runner.resolve(["python3", "-m", "x"], "/venv/bin/python") == [
        "/venv/bin/python",
        "-m",
        "x",
    ]
    assert job_runner.resolve(["huggingface-cli", "download"], "/p") == [
        "huggingface-cli",
        "download",
    ]


def test_lost_nodes_are_named_by_rank() -> None:
    before = {"a": "10.0.0.10", "b": "10.0.0.11"}
    assert job_runner.lost_nodes(before, {"a": "10.0.0.10", "c": "10.0.0.12"}) == ["10.0.0.11"]
    assert job_runner.lost_nodes(before, before) == []
    ips = ["10.0.0.10", "10.0.0.11"]
    assert job_runner.node_label("10.0.0.11", ips) == "node 1 (10.0.0.11)"
    assert job_runner.node_label("10.9.9.9", ips) == "node 10.9.9.9"


def test_a_step_is_stopped_when_a_node_leaves(tmp_path: Path) -> None:
    """A real child process that would run for a minute is stopped within seconds."""
    import time

    views = iter([{"a": "10.0.0.10", "b": "10.0.0.11"}, {"a": "10.0.0.10", "b": "10.0.0.11"}])
    lines: list[str] = []
    watched = job_runner.Watched(
        lambda: next(views, {"a": "10.0.0.10"}), lines.append, ["10.0.0.10", "10.0.0.11"], 0.2
    )
    start = time.monotonic()
    code = watched([sys.executable, "-c", "import time; time.sleep(60)"], {})
    assert code == job_runner.NODE_LOST
    assert time.monotonic() - start < 20
    assert lines == ["job_runner: node 1 (10.0.0.11) left the Ray cluster; stopping the step"]
    ok = job_runner.Watched(lambda: {"a": "x"}, lines.append, [], 0.2, settle_s=0.5)
    assert ok([sys.executable, "-c", "raise SystemExit(3)"], {}) == 3


def test_a_step_that_failed_before_ray_saw_its_node_go_names_the_node() -> None:
    """gloo notices a lost peer before Ray marks the node dead: the failure still names it."""
    both = {"a": "10.0.0.10", "b": "10.0.0.11"}
    views = iter([both, both, both])
    lines: list[str] = []
    watched = job_runner.Watched(
        lambda: next(views, {"a": "10.0.0.10"}), lines.append, ["10.0.0.10", "10.0.0.11"], 0.1
    )
    code = watched([sys.executable, "-c", "raise SystemExit(1)"], {})
    assert code == job_runner.NODE_LOST
    assert lines == ["job_runner: node 1 (10.0.0.11) left the Ray cluster; the step failed (1)"]


def test_the_step_starts_before_the_first_look_at_the_nodes(tmp_path: Path) -> None:
    """Connecting to Ray takes seconds: the trainer must not wait for it. A first look that
    fails is retried, and the watch still catches a node that leaves afterwards."""
    started = tmp_path / "started"
    seen: list[bool] = []
    calls = iter(
        [RuntimeError("state API down"), {"a": "10.0.0.10", "b": "10.0.0.11"}],
    )

    def nodes() -> dict[str, str]:
        # Launched before this first look, the step shows up while it waits (a look taken
        # before the launch would wait in vain).
        deadline = time.monotonic() + 20
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        seen.append(started.exists())
        item = next(calls, {"a": "10.0.0.10"})
        if isinstance(item, Exception):
            raise item
        return item

    lines: list[str] = []
    watched = job_runner.Watched(nodes, lines.append, ["10.0.0.10", "10.0.0.11"], 0.1)
    step = f"import pathlib, time; pathlib.Path({str(started)!r}).touch(); time.sleep(60)"
    code = watched([sys.executable, "-c", step], {})
    assert code == job_runner.NODE_LOST
    assert seen[0] is True
    assert lines == [
        "job_runner: could not read the cluster's nodes: state API down",
        "job_runner: node 1 (10.0.0.11) left the Ray cluster; stopping the step",
    ]


def test_node_ips_come_from_the_contract_file_before_the_environment(tmp_path: Path) -> None:
    """A node replaced at a new address rewrites the contract's file; the environment Ray's jobs
    inherit is the one of Ray's start (the head's Ray is not restarted for a new member), so the
    job's steps get the members from the file."""
    contract = tmp_path / "node.json"
    env = {"RLINFRA_NODE_IPS": "10.0.0.10\n10.0.0.11", "RLINFRA_NUM_NODES": "2", "OTHER": "x"}
    assert job_runner.contract_node_ips(env, contract) == ["10.0.0.10", "10.0.0.11"]
    contract.write_text(
        json.dumps(
            {
                "RLINFRA_NODE_IPS": "10.0.0.10\n10.0.0.57\n10.0.0.58",
                "RLINFRA_NUM_NODES": "3",
                "SKYPILOT_NUM_NODES": "3",
                "RLINFRA_NODE_RANK": "0",
            }
        )
    )
    assert job_runner.contract_node_ips(env, contract) == ["10.0.0.10", "10.0.0.57", "10.0.0.58"]
    current = job_runner.with_current_members(env, contract)
    assert current["RLINFRA_NUM_NODES"] == "3" and current["SKYPILOT_NUM_NODES"] == "3"
    assert current["OTHER"] == "x" and "RLINFRA_NODE_RANK" not in current  # members only
    # A file without the members, or unreadable: the environment's.
    contract.write_text(json.dumps({"RLINFRA_NODE_RANK": "0"}))
    assert job_runner.contract_node_ips(env, contract) == ["10.0.0.10", "10.0.0.11"]
    contract.write_text("{broken")
    assert job_runner.with_current_members(env, contract) == env
    contract.write_text("[1, 2]")
    assert job_runner.with_current_members(env, contract) == env
