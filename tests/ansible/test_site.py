"""The real site.yml (and check.yml) against two real hosts (network namespaces with sshd).

Proves: every role succeeds; the node contract on each node; a two-node Ray cluster with the
dashboard bound to 127.0.0.1 only; the all-reduce acceptance result; a second run changes
nothing; a worker whose Ray died is healed by a re-run without touching the head; preflight stops
a bad inventory before anything changes.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers.ansible import (
    PACKAGES,
    PYCACHE,
    UV_CACHE,
    VENV_BIN,
    PlaybookRun,
    build_wheelhouse,
    run_playbook,
    system_python,
)
from helpers.netbed import NODE_IFACE, Testbed

pytestmark = pytest.mark.slow

ROLES = ["preflight", "base", "python_env", "network", "node_env", "ray_cluster", "acceptance"]
RAY = "/opt/rlinfra/venv/bin/ray"
NODE_ENV = "/opt/rlinfra/node.env"
TOKEN_PATH = "/opt/rlinfra/ray/auth_token"
# A canary: the cluster's Ray token must reach the nodes' token file and nowhere else.
RAY_TOKEN = "rlt-ray-token-canary-5f0c9d2e7a41b3c8"
TIMINGS: dict[str, float] = {}


def _explain(run: PlaybookRun) -> str:
    return "\n".join(run.failures()) + "\n--- last output ---\n" + run.stdout[-6000:]


def _alive_ips(bed: Testbed) -> list[str]:
    out = bed.ssh(
        bed.nodes[0],
        f". {NODE_ENV} && {RAY} list nodes --address http://127.0.0.1:8265 --format json "
        "--filter state=ALIVE",
    )
    assert out.returncode == 0, out.stderr
    return sorted(n["node_ip"] for n in json.loads(out.stdout))


def _pids(bed: Testbed, node_index: int, name: str) -> list[int]:
    out = bed.ssh(
        bed.nodes[node_index],
        "/opt/rlinfra/venv/bin/python /opt/rlinfra/bin/rlinfra-ray-node status",
    )
    assert out.returncode == 0, out.stderr
    status = json.loads(out.stdout)
    if name == "raylet":
        return [r["pid"] for r in status["raylets"]]
    return status["gcs_servers"]


@pytest.fixture(scope="session")
def wheelhouse() -> Path:
    return build_wheelhouse()


@pytest.fixture(scope="session")
def ray_token_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("secrets") / "ray_auth_token"
    path.write_text(RAY_TOKEN)
    path.chmod(0o600)
    return path


@pytest.fixture(scope="session")
def base_extravars(wheelhouse: Path, ray_token_file: Path) -> dict[str, Any]:
    UV_CACHE.mkdir(parents=True, exist_ok=True)
    return {
        "ray_cluster_auth_token_src": str(ray_token_file),
        "preflight_expected_num_nodes": 2,
        # The hosts share the machine's /etc and have no network: only packages already there.
        "base_manage_limits": False,
        "base_packages": ["ca-certificates", "iproute2", "procps"],
        "python_env_python": system_python(),
        "python_env_uv_binary_src": str(VENV_BIN / "uv"),
        "python_env_packages": PACKAGES,
        "python_env_find_links": [str(wheelhouse)],
        "python_env_no_index": True,
        "python_env_cache_dir": str(UV_CACHE),
        # Both hosts see that one folder: the first to install fills it, then the other links
        # (symlinks: the cache is on another mount than the hosts' /opt), and both keep their
        # bytecode in one folder, as on the local cloud.
        "python_env_cache_shared": True,
        "python_env_link_mode": "symlink",
        "python_env_pycache_prefix": str(PYCACHE),
        "python_env_check_imports": {"ray": "2.60.0", "torch": "2.13.0"},
        "node_env_cluster_name": "rlt",
        "node_env_cloud": "local",
        "node_env_task_id": "rlt-test-task",
        "node_env_gpus_per_node": 0,
        "node_env_extra": {"RLT_GREETING": 'it\'s "quoted" $HOME'},
        "ray_cluster_num_gpus": 0,
        # Several Rays share this machine's memory and /dev/shm.
        "ray_cluster_object_store_memory": 200_000_000,
        "ray_cluster_join_timeout_s": 120,
        "acceptance_min_busbw_gbps": 0.0,
        "acceptance_expected_gpus_per_node": 0,
        "acceptance_iters": 3,
    }


@pytest.fixture(scope="module")
def extravars(
    base_extravars: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    out = dict(base_extravars)
    out["acceptance_result_dest"] = str(tmp_path_factory.mktemp("results") / "acceptance.json")
    return out


@pytest.fixture(scope="module")
def first_run(
    testbed: Testbed, extravars: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> PlaybookRun:
    # The shared cache keeps its wheels between sessions, but not its fill markers: this run
    # must take the path of a cache that was never filled with these requirements.
    for marker in UV_CACHE.glob("rlinfra-filled-*"):
        marker.unlink()
    run = run_playbook(
        tmp_path_factory.mktemp("site-1"), "site.yml", testbed.inventory(), extravars
    )
    TIMINGS["first run"] = run.seconds
    return run


def test_first_run_succeeds_with_every_role(first_run: PlaybookRun) -> None:
    assert first_run.rc == 0, _explain(first_run)
    assert first_run.status == "successful"
    ran = {
        e["event_data"].get("role") for e in first_run.events if e.get("event") == "runner_on_ok"
    }
    assert set(ROLES) <= ran
    assert not first_run.stats.get("failures") and not first_run.stats.get("dark")


def _hosts_that_ran(run: PlaybookRun, task: str) -> list[str]:
    return sorted(
        e["event_data"]["host"]
        for e in run.events
        if e.get("event") in ("runner_on_ok", "runner_on_failed")
        and e["event_data"].get("task") == task
    )


def _roles_that_ran(run: PlaybookRun) -> set[str]:
    return {
        e["event_data"].get("role")
        for e in run.events
        if e.get("event", "").startswith("runner_on_")
    }


def _refused_in_preflight(tmp: Path, testbed: Testbed, extravars: dict[str, Any]) -> str:
    """Run site.yml, which must stop in preflight with no other role run; its failure text."""
    run = run_playbook(tmp, "site.yml", testbed.inventory(), extravars)
    assert run.rc != 0
    assert _roles_that_ran(run) == {"preflight"}
    return "\n".join(run.failures())


FILL_TASK = "Install the requirements with uv on the node that fills the shared cache"


def test_first_install_fills_the_shared_uv_cache_alone(
    testbed: Testbed, first_run: PlaybookRun
) -> None:
    """With one uv cache for both hosts, rank 0 installs first and alone, then the other; the
    filling install leaves the marker named by the requirement file's digest."""
    assert first_run.rc == 0, _explain(first_run)
    names = [n.name for n in testbed.nodes]
    assert _hosts_that_ran(first_run, FILL_TASK) == names[:1]
    assert _hosts_that_ran(first_run, "Install the requirements with uv") == names[1:]
    lines = testbed.ssh(testbed.nodes[0], "cat /opt/rlinfra/requirements.txt").stdout
    kept = [x.strip() for x in lines.splitlines() if x.strip() and not x.startswith("#")]
    digest = hashlib.sha256("\n".join(kept).encode()).hexdigest()
    assert [m.name for m in UV_CACHE.glob("rlinfra-filled-*")] == [f"rlinfra-filled-{digest}"]


def test_hosts_install_at_once_from_a_filled_shared_cache(
    testbed: Testbed,
    first_run: PlaybookRun,
    extravars: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Once the marker is there, a new venv on every host installs on all of them at once."""
    assert first_run.rc == 0, _explain(first_run)
    tmp = tmp_path_factory.mktemp("python-env")
    playbook = tmp / "python_env.yml"
    playbook.write_text(
        yaml.safe_dump([{"hosts": "rlinfra_nodes", "gather_facts": False, "roles": ["python_env"]}])
    )
    # A venv and requirement file of their own: the cluster's stay as the first run left them.
    venv = "/opt/rlinfra/venv-from-filled-cache"
    requirements = "/opt/rlinfra/requirements-from-filled-cache.txt"
    own = {"python_env_venv": venv, "python_env_requirements_file": requirements}
    try:
        run = run_playbook(tmp / "run", str(playbook), testbed.inventory(), {**extravars, **own})
        assert run.rc == 0, _explain(run)
        assert _hosts_that_ran(run, FILL_TASK) == []
        names = [n.name for n in testbed.nodes]
        assert _hosts_that_ran(run, "Install the requirements with uv") == names
    finally:
        for node in testbed.nodes:
            testbed.ssh(node, f"rm -rf {venv} {requirements}")


def test_hosts_share_one_bytecode_folder(testbed: Testbed, first_run: PlaybookRun) -> None:
    """The venv's Python keeps bytecode under python_env_pycache_prefix, not in the venv: torch,
    imported by the install check on both hosts, is compiled there once for both."""
    assert first_run.rc == 0, _explain(first_run)
    probe = (
        "/opt/rlinfra/venv/bin/python -c 'import sys, importlib.util as u, torch; "
        "print(sys.pycache_prefix); print(u.cache_from_source(torch.__file__))'"
    )
    seen = []
    for node in testbed.nodes:
        out = testbed.ssh(node, probe)
        assert out.returncode == 0, out.stderr
        prefix, pyc = out.stdout.split()[-2:]
        assert prefix == str(PYCACHE)
        assert pyc.startswith(f"{PYCACHE}/opt/rlinfra/venv/")
        seen.append(pyc)
        venv_pycs = testbed.ssh(
            node, "ls /opt/rlinfra/venv/lib/python3*/site-packages/torch/__pycache__ 2>/dev/null"
        )
        assert venv_pycs.stdout.strip() == "", "bytecode was written into the venv"
    assert seen[0] == seen[1]
    assert Path(seen[0]).is_file(), "the shared folder lacks torch's bytecode"


def test_node_contract_on_each_node(testbed: Testbed, first_run: PlaybookRun) -> None:
    assert first_run.rc == 0
    ips = "\n".join(n.ip for n in testbed.nodes)
    for node in testbed.nodes:
        out = testbed.ssh(
            node,
            "stat -c %a /opt/rlinfra/node.env /opt/rlinfra/node.json && "
            ". /opt/rlinfra/node.env && python3 -c 'import json, os; print(json.dumps(dict(os.environ)))'",
        )
        assert out.returncode == 0, out.stderr
        modes, env_json = out.stdout.splitlines()[:2], out.stdout.splitlines()[2]
        assert modes == ["644", "644"]
        env = json.loads(env_json)
        for prefix in ("RLINFRA", "SKYPILOT"):
            assert env[f"{prefix}_NODE_IPS"] == ips
            assert env[f"{prefix}_NODE_RANK"] == str(node.index)
            assert env[f"{prefix}_NUM_NODES"] == "2"
            assert env[f"{prefix}_NUM_GPUS_PER_NODE"] == "0"
            assert env[f"{prefix}_TASK_ID"] == "rlt-test-task"
            assert json.loads(env[f"{prefix}_CLUSTER_INFO"]) == {
                "cluster": "rlt",
                "cloud": "local",
                "region": "",
                "zone": "",
            }
        assert env["NCCL_SOCKET_IFNAME"] == NODE_IFACE
        assert env["GLOO_SOCKET_IFNAME"] == NODE_IFACE
        assert env["RLT_GREETING"] == 'it\'s "quoted" $HOME'
        assert env["PATH"].split(":")[0] == "/opt/rlinfra/venv/bin"

        doc = json.loads(testbed.ssh(node, "cat /opt/rlinfra/node.json").stdout)
        assert doc["RLINFRA_NODE_RANK"] == str(node.index)
        assert doc["SKYPILOT_NODE_IPS"] == ips
        assert doc["GLOO_SOCKET_IFNAME"] == NODE_IFACE


def test_ray_cluster_has_both_nodes_and_a_local_dashboard(
    testbed: Testbed, first_run: PlaybookRun
) -> None:
    assert first_run.rc == 0
    assert _alive_ips(testbed) == sorted(n.ip for n in testbed.nodes)
    # The dashboard (and its job API) listens on 127.0.0.1 only.
    out = testbed.ssh(testbed.nodes[0], "ss -ltnH 'sport = :8265'")
    listeners = [line.split()[3] for line in out.stdout.splitlines() if line.strip()]
    assert listeners == ["127.0.0.1:8265"], out.stdout
    # Ray's processes carry the node contract (they were started with node.env sourced).
    for node in testbed.nodes:
        raylet = _pids(testbed, node.index, "raylet")[0]
        environ = testbed.ssh(node, f"tr '\\0' '\\n' < /proc/{raylet}/environ").stdout.splitlines()
        assert f"RLINFRA_NODE_RANK={node.index}" in environ
        assert f"GLOO_SOCKET_IFNAME={NODE_IFACE}" in environ


def test_ray_requires_the_cluster_token(testbed: Testbed, first_run: PlaybookRun) -> None:
    assert first_run.rc == 0
    for node in testbed.nodes:
        mode = testbed.ssh(node, f"stat -c '%a %U' {TOKEN_PATH}").stdout.split()
        assert mode == ["600", "root"], mode
        assert testbed.ssh(node, f"cat {TOKEN_PATH}").stdout.strip() == RAY_TOKEN
        env = testbed.ssh(node, f". {NODE_ENV} && env").stdout.splitlines()
        assert "RAY_AUTH_MODE=token" in env and f"RAY_AUTH_TOKEN_PATH={TOKEN_PATH}" in env
    head = testbed.nodes[0]
    address = f"{head.ip}:6379"
    # With the cluster's token the GCS answers; with another token, or none, it refuses, so a
    # stray ~/.ray/auth_token or a client outside the cluster cannot reach it.
    ok = testbed.ssh(head, f". {NODE_ENV} && timeout 30 {RAY} health-check --address {address}")
    assert ok.returncode == 0, ok.stderr
    wrong = testbed.ssh(
        head,
        f"RAY_AUTH_MODE=token RAY_AUTH_TOKEN=not-the-token timeout 30 {RAY} health-check "
        f"--address {address}",
    )
    assert wrong.returncode != 0
    assert "auth" in (wrong.stdout + wrong.stderr).lower()
    # The dashboard's HTTP API asks for the token as well.
    api = "http://127.0.0.1:8265/api/version"
    code = "curl -s -o /dev/null -w '%{http_code}' "
    assert testbed.ssh(head, code + api).stdout.strip() == "401"
    authorized = testbed.ssh(
        head, code + f'-H "Authorization: Bearer $(cat {TOKEN_PATH})" ' + api
    ).stdout.strip()
    assert authorized == "200"
    # The token never shows in Ansible's output or its event data.
    assert RAY_TOKEN not in first_run.stdout
    assert RAY_TOKEN not in json.dumps(first_run.events)


def test_acceptance_result(
    testbed: Testbed, first_run: PlaybookRun, extravars: dict[str, Any]
) -> None:
    assert first_run.rc == 0
    result = json.loads(Path(extravars["acceptance_result_dest"]).read_text())
    assert result["ok"] is True
    assert result["world_size"] == 2
    assert result["backend"] == "gloo"
    assert [r["size_bytes"] for r in result["results"]] == [1 << 20, 4 << 20, 16 << 20]
    for r in result["results"]:
        assert r["busbw_gbps"] > 0
        assert r["busbw_gbps"] == pytest.approx(
            r["algbw_gbps"] * 2 * (2 - 1) / 2, rel=1e-3, abs=1e-4
        )
    assert sorted(n["ip"] for n in result["nodes"]) == sorted(n.ip for n in testbed.nodes)
    assert {n["interface"] for n in result["nodes"]} == {NODE_IFACE}
    assert {n["gpus"] for n in result["nodes"]} == {0}


def test_second_run_changes_nothing(
    testbed: Testbed,
    first_run: PlaybookRun,
    extravars: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    assert first_run.rc == 0
    run = run_playbook(
        tmp_path_factory.mktemp("site-2"), "site.yml", testbed.inventory(), extravars
    )
    TIMINGS["idempotent run"] = run.seconds
    assert run.rc == 0, _explain(run)
    assert set(run.stats["ok"]) == {n.name for n in testbed.nodes}
    assert all(v == 0 for v in run.changed().values()), run.changed_tasks()


def _stop_ray_and_rerun(
    testbed: Testbed,
    node_index: int,
    extravars: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
    label: str,
) -> PlaybookRun:
    """Stop Ray on one node only, then run site.yml again (without the acceptance check).

    (`ray stop --force` would stop every Ray on this machine: the hosts share one PID
    namespace.)"""
    out = testbed.ssh(
        testbed.nodes[node_index],
        "/opt/rlinfra/venv/bin/python /opt/rlinfra/bin/rlinfra-ray-node stop --grace-s 3",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert _pids(testbed, node_index, "raylet") == []
    run = run_playbook(
        tmp_path_factory.mktemp("site-rerun"),
        "site.yml",
        testbed.inventory(),
        {**extravars, "acceptance_enabled": False},
    )
    TIMINGS[label] = run.seconds
    assert run.rc == 0, _explain(run)
    assert _alive_ips(testbed) == sorted(n.ip for n in testbed.nodes)
    return run


def test_worker_whose_ray_died_is_healed(
    testbed: Testbed,
    first_run: PlaybookRun,
    extravars: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    assert first_run.rc == 0
    head_gcs = _pids(testbed, 0, "gcs")
    # (The all-reduce over the healed cluster is the next tests' check.yml run.)
    run = _stop_ray_and_rerun(testbed, 1, extravars, tmp_path_factory, "heal run (no acceptance)")
    assert run.changed().get(testbed.nodes[0].name, 0) == 0, run.changed_tasks()
    assert run.changed().get(testbed.nodes[1].name, 0) >= 1
    assert any("Start the Ray worker" in t for t in run.changed_tasks())
    assert _pids(testbed, 0, "gcs") == head_gcs


def test_a_new_member_alone_keeps_the_heads_ray_and_a_new_setting_restarts_it(
    testbed: Testbed,
    first_run: PlaybookRun,
    extravars: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A replaced node at a new address changes every node's RLINFRA_NODE_IPS. The head's
    contract is rewritten, but its Ray (and so every job and the whole cluster) stays: Ray keeps
    its members itself. Here the head's contract is made to hold other members, as before a
    replacement; then a real setting of the contract (node_env_extra) does restart the head."""
    assert first_run.rc == 0
    head = testbed.nodes[0]
    head_gcs = _pids(testbed, 0, "gcs")
    assert head_gcs
    stale = testbed.ssh(
        head,
        "sed -i 's/^export RLINFRA_NODE_IPS=.*/export RLINFRA_NODE_IPS=stale/' /opt/rlinfra/node.env"
        ' && sed -i \'s/"RLINFRA_NODE_IPS": "[^"]*"/"RLINFRA_NODE_IPS": "10.9.9.9"/\''
        " /opt/rlinfra/node.json && grep -c 10.9.9.9 /opt/rlinfra/node.json",
    )
    assert stale.returncode == 0 and stale.stdout.strip() == "1", stale.stdout + stale.stderr
    rerun = {**extravars, "acceptance_enabled": False}
    run = run_playbook(
        tmp_path_factory.mktemp("site-members"), "site.yml", testbed.inventory(), rerun
    )
    TIMINGS["new member run (no acceptance)"] = run.seconds
    assert run.rc == 0, _explain(run)
    changed = run.changed_tasks()
    assert f"{head.name}: Write /opt/rlinfra/node.json" in changed, changed
    assert not any("Start the Ray head" in t or "Stop what is left" in t for t in changed), changed
    assert _pids(testbed, 0, "gcs") == head_gcs
    contract = testbed.ssh(head, "cat /opt/rlinfra/node.json")
    ips = json.loads(contract.stdout)["RLINFRA_NODE_IPS"].split("\n")
    assert ips == [n.ip for n in testbed.nodes]
    # A setting of the node itself: Ray restarts so that its processes see it.
    extra = {**extravars["node_env_extra"], "RLT_SETTING": "new"}
    run = run_playbook(
        tmp_path_factory.mktemp("site-setting"),
        "site.yml",
        testbed.inventory(),
        {**rerun, "node_env_extra": extra},
    )
    TIMINGS["new setting run (no acceptance)"] = run.seconds
    assert run.rc == 0, _explain(run)
    assert any("Start the Ray head" in t for t in run.changed_tasks()), run.changed_tasks()
    assert _pids(testbed, 0, "gcs") not in ([], head_gcs)
    # (The next test's run goes back to the first run's settings.)


def test_head_whose_ray_died_restarts_with_every_worker(
    testbed: Testbed,
    first_run: PlaybookRun,
    extravars: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    assert first_run.rc == 0
    worker_raylet = _pids(testbed, 1, "raylet")
    assert worker_raylet
    # A new head is a new cluster: the worker, whose raylet served the old one, starts again
    # with it, in the same task.
    run = _stop_ray_and_rerun(
        testbed, 0, extravars, tmp_path_factory, "head restart run (no acceptance)"
    )
    assert any("Start the Ray head, and the workers with it" in t for t in run.changed_tasks())
    assert run.changed().get(testbed.nodes[1].name, 0) >= 2  # stopped, then started
    assert _pids(testbed, 0, "gcs") != []
    assert _pids(testbed, 1, "raylet") not in ([], worker_raylet)


def test_check_playbook_passes_on_the_healed_cluster(
    testbed: Testbed,
    first_run: PlaybookRun,
    extravars: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    assert first_run.rc == 0
    tmp = tmp_path_factory.mktemp("check")
    run = run_playbook(
        tmp,
        "check.yml",
        testbed.inventory(),
        {**extravars, "acceptance_result_dest": str(tmp / "r.json")},
    )
    TIMINGS["check.yml"] = run.seconds
    assert run.rc == 0, _explain(run)
    assert all(v == 0 for v in run.changed().values()), run.changed_tasks()
    assert json.loads((tmp / "r.json").read_text())["world_size"] == 2


def test_preflight_stops_a_duplicate_rank_before_any_change(
    testbed: Testbed,
    first_run: PlaybookRun,
    extravars: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    inventory = copy.deepcopy(testbed.inventory())
    workers = inventory["all"]["children"]["rlinfra_nodes"]["children"]["rlinfra_workers"]["hosts"]
    workers[testbed.nodes[1].name]["rlinfra_node_rank"] = 0
    before = testbed.ssh(testbed.nodes[1], "stat -c %Y /opt/rlinfra/node.env").stdout
    start = time.monotonic()
    run = run_playbook(tmp_path_factory.mktemp("bad"), "site.yml", inventory, extravars)
    assert run.rc != 0
    assert time.monotonic() - start < 60
    assert _roles_that_ran(run) == {"preflight"}
    assert all(v == 0 for v in run.changed().values())
    messages = "\n".join(run.failures())
    assert "rlinfra_node_rank 0 is used by rlt-n0, rlt-n1" in messages, messages
    assert testbed.ssh(testbed.nodes[1], "stat -c %Y /opt/rlinfra/node.env").stdout == before


def test_preflight_refuses_a_public_dashboard(
    testbed: Testbed, extravars: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    failures = _refused_in_preflight(
        tmp_path_factory.mktemp("public"),
        testbed,
        {**extravars, "ray_cluster_dashboard_host": "0.0.0.0"},
    )
    assert "ray_cluster_dashboard_host is '0.0.0.0'" in failures


@pytest.mark.parametrize("prefix", ["relative/pycache", "/var/tmp/it's", "/var/tmp/a b"])
def test_preflight_refuses_a_bytecode_folder_the_pth_line_cannot_hold(
    testbed: Testbed,
    extravars: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
    prefix: str,
) -> None:
    """The folder goes into a Python string in the venv's .pth file: preflight stops anything
    but an absolute path without spaces, quotes or backslashes, before any change."""
    failures = _refused_in_preflight(
        tmp_path_factory.mktemp("pycache"),
        testbed,
        {**extravars, "python_env_pycache_prefix": prefix},
    )
    assert "python_env_pycache_prefix empty or an absolute path" in failures


def test_preflight_refuses_a_relative_uv_on_the_host(
    testbed: Testbed, extravars: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The host-side copy of uv is a path on the node: a relative one stops the run in preflight."""
    failures = _refused_in_preflight(
        tmp_path_factory.mktemp("uv-host-src"),
        testbed,
        {**extravars, "python_env_uv_binary_host_src": "cache/bin/uv"},
    )
    assert "python_env_uv_binary_host_src empty or an absolute path on the node" in failures
    assert "'cache/bin/uv'" in failures


def test_network_refuses_an_interface_without_the_private_ip(
    testbed: Testbed, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The reference's failure mode: collectives on an interface that is not the cluster's."""
    tmp = tmp_path_factory.mktemp("wrong-iface")
    play = tmp / "network.yml"
    play.write_text("- hosts: rlinfra_nodes\n  gather_facts: false\n  roles: [network]\n")
    run = run_playbook(tmp, str(play), testbed.inventory(), {"network_interface": "lo"})
    assert run.rc != 0
    messages = "\n".join(run.failures())
    for node in testbed.nodes:
        assert f"Host '{node.name}': collective interface 'lo'" in messages, messages
        assert f"has addresses 127.0.0.1 but not rlinfra_private_ip {node.ip}" in messages, messages
        assert f"eth0={node.ip}" in messages, messages


def test_zz_report_timings() -> None:
    """Not a check: prints how long each playbook run took (see `pytest -rA` or -s)."""
    print("\n" + "\n".join(f"{name}: {seconds:.1f} s" for name, seconds in TIMINGS.items()))
