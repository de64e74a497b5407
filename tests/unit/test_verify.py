"""The fast path of an unchanged `up`: the inputs digest and the node check (run here for real,
against files, a mount table, Ray's node helper and an HTTP server shaped like Ray's dashboard)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlinfra.ops import verify
from rlinfra.record import Host
from rlinfra_node import verify_node

REPO = Path(__file__).resolve().parents[2]
RAY_HELPER = REPO / "ansible" / "roles" / "ray_cluster" / "files" / "ray_node.py"
PROBE = REPO / "driver" / "rlinfra_node" / "verify_node.py"
TOKEN = "tok-123"


def hosts(n: int = 2) -> list[Host]:
    return [
        Host(
            name=f"c-{r}",
            rank=r,
            ssh_host=f"10.0.0.{10 + r}",
            private_ip=f"10.0.0.{10 + r}",
            ssh_user="root",
            interface="eth0",
        )
        for r in range(n)
    ]


# ---------------------------------------------------------------- the inputs digest


@pytest.fixture
def ansible_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "ansible"
    (folder / "roles" / "base" / "tasks").mkdir(parents=True)
    (folder / "roles" / "base" / "tasks" / "main.yml").write_text("- debug: msg=hi\n")
    (folder / "inventory.yml").write_text("all: {}\n")
    lock = tmp_path / "requirements.lock.txt"
    lock.write_text("ray==2.60.0\n")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "ray-2.60.0-py3-none-any.whl").write_bytes(b"wheel")
    variables = {
        "python_env_lock_src": str(lock),
        "python_env_find_links": [str(wheels)],
        "storage_local_root": str(tmp_path / "buckets"),
    }
    (folder / "vars.yml").write_text(yaml.safe_dump(variables))
    return folder


def test_digest_is_stable_and_ignores_runner_artifacts(ansible_dir: Path) -> None:
    first = verify.inputs_digest(ansible_dir, {"acceptance_enabled": False})
    (ansible_dir / ".runner" / "artifacts").mkdir(parents=True)
    (ansible_dir / ".runner" / "artifacts" / "stdout").write_text("a run's output")
    assert verify.inputs_digest(ansible_dir, {"acceptance_enabled": False}) == first


@pytest.mark.parametrize(
    "change",
    ["role file", "inventory", "extra vars", "shipped file", "shipped folder", "new file"],
)
def test_digest_changes_with_every_input(ansible_dir: Path, change: str) -> None:
    extravars: dict[str, Any] = {"acceptance_enabled": False}
    before = verify.inputs_digest(ansible_dir, extravars)
    variables = yaml.safe_load((ansible_dir / "vars.yml").read_text())
    if change == "role file":
        (ansible_dir / "roles" / "base" / "tasks" / "main.yml").write_text("- debug: msg=ho\n")
    elif change == "inventory":
        (ansible_dir / "inventory.yml").write_text("all: {hosts: {a: {}}}\n")
    elif change == "extra vars":
        extravars = {"acceptance_enabled": True}
    elif change == "shipped file":
        Path(variables["python_env_lock_src"]).write_text("ray==2.61.0\n")
    elif change == "shipped folder":
        (Path(variables["python_env_find_links"][0]) / "torch.whl").write_bytes(b"more")
    else:
        (ansible_dir / "roles" / "base" / "tasks" / "extra.yml").write_text("[]\n")
    assert verify.inputs_digest(ansible_dir, extravars) != before


def test_digest_does_not_follow_bucket_contents(ansible_dir: Path) -> None:
    # The bucket root is a variable but not shipped: checkpoints landing in it change nothing.
    before = verify.inputs_digest(ansible_dir, {})
    root = Path(yaml.safe_load((ansible_dir / "vars.yml").read_text())["storage_local_root"])
    (root / "ckpt").mkdir(parents=True)
    (root / "ckpt" / "global_step_2").write_text("x")
    assert verify.inputs_digest(ansible_dir, {}) == before


def test_shipped_paths_are_src_keys_and_wheel_folders() -> None:
    variables = {
        "python_env_uv_binary_src": "/usr/bin/uv",
        "ray_cluster_auth_token_src": "/home/u/.rlinfra/t",
        "node_package_src": "",
        "python_env_find_links": ["/w1", "/w2"],
        "acceptance_result_dest": "/x/check.json",
        "storage_local_root": "/x/buckets",
    }
    assert verify.shipped_paths(variables) == [
        "/w1",
        "/w2",
        "/usr/bin/uv",
        "/home/u/.rlinfra/t",
    ]


# ---------------------------------------------------------------- the node spec


def test_node_spec_for_head_and_worker() -> None:
    variables = {
        "python_env_venv": "/opt/rlinfra/venv",
        "ray_cluster_head_port": 6380,
        "ray_cluster_dashboard_port": 8266,
        "ray_cluster_dashboard_host": "0.0.0.0",
        "storage_mounts": [
            {"bucket": "a", "mount_path": "/checkpoints", "mode": "MOUNT"},
            {"bucket": "b", "mount_path": "/data", "mode": "COPY"},
        ],
        "retrieval_service_enabled": True,
        "retrieval_service_replicas": 3,
    }
    nodes = hosts(3)
    head = verify.node_spec(variables, nodes, nodes[0], "d1")
    worker = verify.node_spec(variables, nodes, nodes[2], "d1")
    assert head["mounts"] == ["/checkpoints"] == worker["mounts"]
    assert head["gcs_address"] == worker["gcs_address"] == "10.0.0.10:6380"
    assert worker["node_ip"] == "10.0.0.12" and "head" not in worker
    assert head["head"]["dashboard"] == "http://127.0.0.1:8266"
    assert head["head"]["node_ips"] == ["10.0.0.10", "10.0.0.11", "10.0.0.12"]
    assert head["head"]["serve"] == {"app": "retrieval", "replicas": 3, "front": "retrieval-front"}
    assert "/opt/rlinfra/venv/bin/python" in head["files"]
    variables["retrieval_service_router"] = "serve-proxy"
    proxied = verify.node_spec(variables, nodes, nodes[0], "d1")["head"]["serve"]
    assert proxied == {"app": "retrieval", "replicas": 3, "front": None}
    # The names are the ones the Serve config deploys.
    from rlinfra_node.retrieval import serve_app

    assert (verify.RETRIEVAL_APP, verify.RETRIEVAL_FRONT_APP) == (
        serve_app.APP_NAME,
        serve_app.FRONT_APP,
    )
    variables["retrieval_service_enabled"] = False
    assert verify.node_spec(variables, nodes, nodes[0], "d1")["head"]["serve"] is None


# ---------------------------------------------------------------- the node check


def test_marker_must_hold_the_digest(tmp_path: Path) -> None:
    marker = tmp_path / "converged"
    spec = {"marker": str(marker), "digest": "abc"}
    assert verify_node.check_marker(spec) == ["no record of a finished configuration run"]
    marker.write_text("old\n")
    assert verify_node.check_marker(spec) == ["its last configuration run applied other inputs"]
    marker.write_text("abc\n")
    assert verify_node.check_marker(spec) == []


def test_files_and_mounts_from_the_mount_table(tmp_path: Path) -> None:
    present = tmp_path / "node.env"
    present.write_text("X=1\n")
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "22 1 252:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
        "90 22 252:0 /var/tmp/b /checkpoints rw,relatime - ext4 /dev/vda rw\n"
        "91 22 252:0 /var/tmp/c /data\\040set rw,relatime - ext4 /dev/vda rw\n"
    )
    spec = {
        "files": [str(present), str(tmp_path / "venv" / "bin" / "python")],
        "mounts": ["/checkpoints", "/data set", "/models/"],
    }
    assert verify_node.check_paths(spec, str(mountinfo)) == [
        f"{tmp_path / 'venv' / 'bin' / 'python'} is missing",
        "/models/ is not mounted",
    ]


def test_mount_points_reads_this_process_mount_table() -> None:
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        count = len({line.split()[4] for line in handle})
    points = verify_node.mount_points()
    assert "/" in points and len(points) == count


def test_raylet_found_by_the_real_helper_or_named_missing(tmp_path: Path) -> None:
    spec = {"ray_helper": str(RAY_HELPER), "node_ip": "10.9.9.9", "gcs_address": "10.9.9.1:6379"}
    # This process's namespaces run no raylet of that address: the real helper finds none.
    assert verify_node.check_raylet(spec) == ["no Ray raylet of 10.9.9.9 joined to 10.9.9.1:6379"]
    stub = tmp_path / "helper.py"
    raylets = [
        {"pid": 1, "node_ip": "10.9.9.9", "gcs_address": "10.9.9.2:6379"},  # another head
        {"pid": 2, "node_ip": "10.9.9.9", "gcs_address": "10.9.9.1:6379"},
    ]
    stub.write_text(f"print({json.dumps(json.dumps({'raylets': raylets}))})\n")
    assert verify_node.check_raylet({**spec, "ray_helper": str(stub)}) == []
    stub.write_text("raise SystemExit(3)\n")
    problems = verify_node.check_raylet({**spec, "ray_helper": str(stub)})
    assert problems == ["could not read its Ray processes (CalledProcessError)"]


def test_ray_helper_knows_the_processes_ray_stop_knows() -> None:
    # The helper writes Ray's list out (importing Ray costs it most of a second per call): it
    # must stay the list of the pinned Ray, in the same order.
    constants = pytest.importorskip("ray.autoscaler._private.constants")
    namespace: dict[str, Any] = {"__name__": "ray_node"}
    exec(compile(RAY_HELPER.read_text(), str(RAY_HELPER), "exec"), namespace)
    assert namespace["RAY_PROCESSES"] == [
        (str(keyword), bool(by_name)) for keyword, by_name in constants.RAY_PROCESSES
    ]


class Dashboard:
    """Answers the two dashboard calls the check makes, only with the right token."""

    def __init__(self) -> None:
        self.alive = ["10.0.0.10", "10.0.0.11"]
        self.app: dict[str, Any] = {"status": "RUNNING", "replicas": 3}
        self.front: dict[str, Any] | None = {"status": "RUNNING", "replicas": 1}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    self.send_response(401)
                    self.end_headers()
                    return
                if self.path.startswith("/api/v0/nodes") and "filter_values=ALIVE" in self.path:
                    rows = [{"node_ip": ip, "state": "ALIVE"} for ip in outer.alive]
                    body: dict[str, Any] = {"data": {"result": {"result": rows}}}
                elif self.path == "/api/serve/applications/":
                    replicas = [{"state": "RUNNING"}] * outer.app["replicas"]
                    apps: dict[str, Any] = {
                        "retrieval": {
                            "status": outer.app["status"],
                            "deployments": {"Retriever": {"replicas": replicas}},
                        }
                    }
                    if outer.front is not None:
                        apps["retrieval-front"] = {
                            "status": outer.front["status"],
                            "deployments": {
                                "Front": {
                                    "replicas": [{"state": "RUNNING"}] * outer.front["replicas"]
                                }
                            },
                        }
                    body = {"applications": apps}
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def dashboard() -> Iterator[Dashboard]:
    board = Dashboard()
    try:
        yield board
    finally:
        board.server.shutdown()


def test_head_sees_exactly_the_inventory_and_the_serve_app(
    dashboard: Dashboard, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    head = {
        "dashboard": dashboard.url,
        "token_file": str(token),
        "node_ips": ["10.0.0.10", "10.0.0.11"],
        "serve": {"app": "retrieval", "replicas": 3, "front": "retrieval-front"},
    }
    assert verify_node.check_head(head, 5) == []
    dashboard.alive = ["10.0.0.10"]
    assert verify_node.check_head(head, 5) == [
        "the Ray cluster is not the inventory's nodes (not alive: 10.0.0.11)"
    ]
    dashboard.alive = ["10.0.0.10", "10.0.0.11", "10.0.0.99"]
    assert verify_node.check_head(head, 5) == [
        "the Ray cluster is not the inventory's nodes (unexpected: 10.0.0.99)"
    ]
    dashboard.alive = ["10.0.0.11", "10.0.0.10"]
    dashboard.app = {"status": "RUNNING", "replicas": 2}
    assert verify_node.check_head(head, 5) == [
        "the Serve application 'retrieval' runs 2 of 3 replicas"
    ]
    dashboard.app = {"status": "DEPLOYING", "replicas": 3}
    assert verify_node.check_head(head, 5) == ["the Serve application 'retrieval' is DEPLOYING"]
    # The endpoint is the front: replicas alone are not a working service.
    dashboard.app = {"status": "RUNNING", "replicas": 3}
    dashboard.front = None
    assert verify_node.check_head(head, 5) == [
        "the Serve application 'retrieval-front' is not deployed"
    ]
    dashboard.front = {"status": "RUNNING", "replicas": 0}
    assert verify_node.check_head(head, 5) == [
        "the Serve application 'retrieval-front' runs 0 of 1 replicas"
    ]
    assert verify_node.check_head({**head, "serve": {**head["serve"], "front": None}}, 5) == []
    dashboard.front = {"status": "RUNNING", "replicas": 1}
    token.write_text("wrong\n")
    assert verify_node.check_head(head, 5) == [
        "the Ray head's state API did not answer (HTTPError)"
    ]


def test_the_probe_runs_from_standard_input_as_the_driver_sends_it(tmp_path: Path) -> None:
    # How `up` runs it on a node: `python -I - SPEC`, the source on standard input.
    marker = tmp_path / "converged"
    marker.write_text("d1\n")
    spec = {
        "marker": str(marker),
        "digest": "d1",
        "files": [str(marker)],
        "mounts": [],
        "ray_helper": str(RAY_HELPER),
        "node_ip": "10.9.9.9",
        "gcs_address": "10.9.9.1:6379",
    }
    run = subprocess.run(
        [sys.executable, "-I", "-", json.dumps(spec)],
        input=PROBE.read_bytes(),
        capture_output=True,
        check=True,
    )
    assert json.loads(run.stdout) == {
        "ok": False,
        "problems": [{"kind": "ray", "text": "no Ray raylet of 10.9.9.9 joined to 10.9.9.1:6379"}],
    }
    bad = subprocess.run(
        [sys.executable, "-I", "-", json.dumps({"digest": "x"})],
        input=PROBE.read_text(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 1
    assert "the spec lacks marker, node_ip, gcs_address" in bad.stderr


def test_each_problem_has_a_kind_and_only_reach_and_ray_count_as_lost(tmp_path: Path) -> None:
    marker = tmp_path / "converged"
    marker.write_text("d1\n")
    token = "/opt/rlinfra/ray/auth_token-not-here"
    spec = {
        "marker": str(marker),
        "digest": "d1",
        "files": [token],
        "mounts": [str(tmp_path / "bucket")],
        "ray_helper": str(RAY_HELPER),
        "node_ip": "10.9.9.9",
        "gcs_address": "10.9.9.1:6379",
    }
    answer = verify_node.verify(spec)
    assert [(p["kind"], p["text"]) for p in answer["problems"]] == [
        ("config", f"{token} is missing"),
        ("mount", f"{tmp_path / 'bucket'} is not mounted"),
        ("ray", "no Ray raylet of 10.9.9.9 joined to 10.9.9.1:6379"),
    ]
    problems = [
        verify.Problem("n1", verify.ProblemKind(p["kind"]), p["text"]) for p in answer["problems"]
    ]
    # A missing file whose path names Ray is the node's configuration, not a lost node.
    assert [p.lost for p in problems] == [False, False, True]
    assert str(problems[2]) == "n1: no Ray raylet of 10.9.9.9 joined to 10.9.9.1:6379"
    unreachable = verify.Problem("n2", verify.ProblemKind.UNREACHABLE, "no answer within 20 s")
    assert unreachable.lost
