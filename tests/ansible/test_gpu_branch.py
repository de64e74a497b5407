"""The GPU branch of the node roles: the driver and CUDA check (python_env), the node-local
acceptance check (NCCL, one process per GPU, GPU health), and the CPU path that must skip it.

What runs where:
  * here (no GPU): the scripts' pure functions (nvidia-smi parsing, the count-mismatch message,
    nccl-tests' bus bandwidth formula); check_cuda.py as a process against a stand-in nvidia-smi
    (a shell script printing a real query's CSV, since this machine has no NVIDIA driver); the
    python_env CUDA tasks through Ansible on localhost (skipped on a CPU node, failing with the
    node's name on a GPU profile); the local launcher of allreduce.py with gloo on CPU, which
    stands in for NCCL (same rendezvous, sums, timings and busbw arithmetic).
  * only on a machine with an NVIDIA GPU (skipped here, run by bench/gpu/run_device.sh on the
    GPU machine): check_cuda.py against the real driver and torch, and the NCCL all-reduce with
    the bf16 matmul and copy measures.
  * nowhere yet: NCCL across two or more GPUs (busbw with n > 1 on NVLink), which needs a
    machine with several GPUs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from helpers.ansible import ANSIBLE, UV_CACHE, VENV_BIN, build_wheelhouse, run_playbook
from helpers.locks import fill_once

CHECK_CUDA = ANSIBLE / "roles" / "python_env" / "files" / "check_cuda.py"
ALLREDUCE = ANSIBLE / "roles" / "acceptance" / "files" / "allreduce.py"
TORCH_VENV = Path("/var/tmp/rlinfra-test-gpu-branch-venv")
TORCH_PIN = "torch==2.13.0"

# `nvidia-smi --query-gpu=index,name,driver_version,memory.total,pci.bus_id
# --format=csv,noheader,nounits` as an 8-GPU H100 node prints it.
H100X8_CSV = "".join(
    f"{i}, NVIDIA H100 80GB HBM3, 550.90.07, 81559, 00000000:{0x18 + i:02X}:00.0\n"
    for i in range(8)
)
SMI_HEADER = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.90.07              Driver Version: 550.90.07      CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
"""


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


cuda = _load(CHECK_CUDA, "rlinfra_check_cuda")
allreduce = _load(ALLREDUCE, "rlinfra_allreduce")


def _has_gpu() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available() and torch.cuda.device_count() > 0)


needs_gpu = pytest.mark.skipif(
    not _has_gpu(), reason="needs an NVIDIA GPU and a CUDA torch (runs on the GPU machine)"
)


# ---- check_cuda.py: pure functions --------------------------------------------------------


def test_parse_gpu_csv_reads_every_gpu_of_a_node() -> None:
    gpus = cuda.parse_gpu_csv(H100X8_CSV)
    assert [g["index"] for g in gpus] == list(range(8))
    assert {g["name"] for g in gpus} == {"NVIDIA H100 80GB HBM3"}
    assert {g["driver_version"] for g in gpus} == {"550.90.07"}
    assert gpus[0]["memory_total_mib"] == 81559
    assert gpus[7]["pci_bus_id"] == "00000000:1F:00.0"


def test_parse_gpu_csv_keeps_unknown_memory_and_skips_blank_lines() -> None:
    gpus = cuda.parse_gpu_csv("\n0, NVIDIA H200, 580.159.04, [N/A], 00000000:00:07.0\n\n")
    assert len(gpus) == 1 and gpus[0]["memory_total_mib"] is None


def test_parse_gpu_csv_refuses_a_row_of_another_shape() -> None:
    with pytest.raises(ValueError, match="nvidia-smi row has 2 fields, expected 5"):
        cuda.parse_gpu_csv("0, NVIDIA H200\n")


@pytest.mark.parametrize(
    ("text", "version"),
    [
        (SMI_HEADER, "12.4"),
        ("    Driver Version                    : 580.159.04\n    CUDA Version  : 13.0\n", "13.0"),
        ("No devices were found\n", ""),
    ],
)
def test_parse_cuda_version_from_both_nvidia_smi_layouts(text: str, version: str) -> None:
    assert cuda.parse_cuda_version(text) == version


def test_count_problem_names_the_node_the_counts_and_the_model() -> None:
    assert cuda.count_problem("gpu-3", 8, 8, "nvidia-smi", ["NVIDIA H100"] * 8) == ""
    message = cuda.count_problem("gpu-3", 8, 7, "nvidia-smi", ["NVIDIA H100"] * 7)
    assert message == (
        "node gpu-3: the profile expects 8 GPU(s) per node but nvidia-smi sees 7 (NVIDIA H100)"
    )


def _driver(n: int) -> dict[str, Any]:
    return {
        "found": True,
        "gpus": cuda.parse_gpu_csv(H100X8_CSV)[:n],
        "driver_version": "550.90.07",
        "cuda_version": "12.4",
        "error": "",
    }


def _torch(n: int, rel_err: float = 1e-7, available: bool = True) -> dict[str, Any]:
    return {
        "version": "2.13.0+cu124",
        "cuda": "12.4",
        "cudnn": "90100",
        "nccl": "2.21.5",
        "available": available,
        "device_count": n if available else 0,
        "devices": [
            {"index": i, "name": "NVIDIA H100 80GB HBM3", "matmul_rel_err": rel_err, "error": ""}
            for i in range(n if available else 0)
        ],
        "error": "",
    }


def test_problems_of_a_healthy_node_is_empty() -> None:
    assert cuda.problems_of("n0", 8, _driver(8), _torch(8)) == []


def test_problems_of_a_node_missing_a_gpu_names_both_views() -> None:
    problems = cuda.problems_of("n1", 8, _driver(7), _torch(7))
    assert problems == [
        "node n1: the profile expects 8 GPU(s) per node but nvidia-smi sees 7 (NVIDIA H100 80GB HBM3)",
        "node n1: the profile expects 8 GPU(s) per node but torch.cuda.device_count() sees 7 "
        "(NVIDIA H100 80GB HBM3)",
    ]


def test_problems_of_a_cpu_only_torch_says_what_to_install() -> None:
    cpu_torch = {**_torch(0, available=False), "cuda": "", "version": "2.13.0+cpu"}
    (problem,) = cuda.problems_of("n2", 1, _driver(1), cpu_torch)
    assert problem.startswith("node n2: torch 2.13.0+cpu (a CPU-only build) reports")
    assert "install a CUDA build of torch" in problem


def test_problems_of_a_wrong_matmul_names_the_device() -> None:
    problems = cuda.problems_of("n3", 2, _driver(2), _torch(2, rel_err=0.5))
    assert problems == [
        f"node n3: matmul on cuda:{i} (NVIDIA H100 80GB HBM3) has relative error 0.5, above 0.01"
        for i in range(2)
    ]


def test_problems_of_nan_matmul_is_a_problem() -> None:
    problems = cuda.problems_of("n4", 1, _driver(1), _torch(1, rel_err=float("nan")))
    assert len(problems) == 1 and "relative error nan" in problems[0]


def test_nvidia_device_files_are_the_numbered_ones(tmp_path: Path) -> None:
    for name in ("nvidia1", "nvidia0", "nvidiactl", "nvidia-uvm", "nvidia-caps", "null"):
        (tmp_path / name).touch()
    assert allreduce._nvidia_device_files(str(tmp_path)) == ["nvidia0", "nvidia1"]
    assert allreduce._nvidia_device_files(str(tmp_path / "absent")) == []


def test_gpu_count_without_device_files_is_zero_without_torch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(allreduce, "_nvidia_device_files", lambda: [])
    monkeypatch.setattr(allreduce, "_node_ip", lambda: "10.0.0.7")
    # An import of torch would now fail, and the count would say so (gpus -1, an error).
    monkeypatch.setitem(sys.modules, "torch", None)
    assert allreduce._gpu_count() == {"ip": "10.0.0.7", "gpus": 0, "error": ""}


def test_gpu_count_with_device_files_asks_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allreduce, "_nvidia_device_files", lambda: ["nvidia0"])
    monkeypatch.setattr(allreduce, "_node_ip", lambda: "10.0.0.7")
    monkeypatch.setitem(sys.modules, "torch", None)
    out = allreduce._gpu_count()
    assert out["gpus"] == -1 and "torch" in out["error"]


def test_cpu_node_check_is_skipped_without_looking() -> None:
    assert cuda.check("cpu-0", 0) == {
        "host": "cpu-0",
        "expected_gpus": 0,
        "skipped": True,
        "driver": None,
        "torch": None,
        "problems": [],
    }


# ---- check_cuda.py as a process, with a stand-in nvidia-smi ------------------------------


def _fake_smi(folder: Path, csv: str, marker: Path) -> Path:
    """An `nvidia-smi` that prints `csv` for --query-gpu and the header otherwise, and leaves
    `marker` behind to show it was called (this machine has no NVIDIA driver)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "query.csv").write_text(csv)
    (folder / "header.txt").write_text(SMI_HEADER)
    exe = folder / "nvidia-smi"
    exe.write_text(
        "#!/bin/sh\n"
        f"touch '{marker}'\n"
        'case "$1" in --query-gpu=*) '
        f"cat '{folder}/query.csv';; *) cat '{folder}/header.txt';; esac\n"
    )
    exe.chmod(0o755)
    return folder


def _run_check_cuda(expected: int, path_prepend: Path) -> dict[str, Any]:
    env = {**os.environ, "PATH": f"{path_prepend}:{os.environ['PATH']}"}
    out = subprocess.run(
        [sys.executable, str(CHECK_CUDA), "--expected-gpus", str(expected), "--host", "gpu-7"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout)


def test_check_cuda_on_a_cpu_node_never_calls_nvidia_smi(tmp_path: Path) -> None:
    marker = tmp_path / "called"
    doc = _run_check_cuda(0, _fake_smi(tmp_path / "bin", H100X8_CSV, marker))
    assert doc["skipped"] is True and doc["problems"] == []
    assert not marker.exists()


@pytest.mark.skipif(_has_gpu(), reason="on a GPU machine torch sees the real GPUs")
def test_check_cuda_reads_the_driver_and_reports_the_mismatch(tmp_path: Path) -> None:
    marker = tmp_path / "called"
    doc = _run_check_cuda(2, _fake_smi(tmp_path / "bin", H100X8_CSV, marker))
    assert marker.exists()
    assert doc["driver"]["driver_version"] == "550.90.07"
    assert doc["driver"]["cuda_version"] == "12.4"
    assert len(doc["driver"]["gpus"]) == 8
    assert doc["problems"][0] == (
        "node gpu-7: the profile expects 2 GPU(s) per node but nvidia-smi sees 8 "
        "(NVIDIA H100 80GB HBM3)"
    )
    # This interpreter has no CUDA torch: that is reported too, with the node's name.
    assert len(doc["problems"]) == 2 and doc["problems"][1].startswith("node gpu-7: ")


# ---- the python_env CUDA tasks through Ansible (localhost, local connection) --------------

CUDA_TASKS_PLAY = """\
- name: Check the driver and CUDA
  hosts: rlinfra_nodes
  gather_facts: false
  tasks:
    - name: Run python_env's checks
      ansible.builtin.include_role:
        name: python_env
        tasks_from: verify
"""


def _localhost(interpreter: str) -> dict[str, Any]:
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": interpreter,
        "rlinfra_node_rank": 0,
        "rlinfra_private_ip": "127.0.0.1",
    }
    return {
        "all": {
            "children": {
                "rlinfra_nodes": {"children": {"rlinfra_head": {"hosts": {"gpu-local": host}}}}
            }
        }
    }


def _cuda_play(tmp: Path, gpus: int) -> Any:
    pytest.importorskip("ansible_runner")
    play = tmp / "cuda.yml"
    tmp.mkdir(parents=True, exist_ok=True)
    play.write_text(CUDA_TASKS_PLAY)
    prefix = Path(sys.executable).parent.parent
    return run_playbook(
        tmp,
        str(play),
        _localhost(sys.executable),
        {
            "python_env_venv": str(prefix),
            "python_env_check_imports": {"json": ""},
            "node_env_gpus_per_node": gpus,
        },
    )


def _task_events(run: Any, task: str) -> list[str]:
    return [e["event"] for e in run.events if e.get("event_data", {}).get("task") == task]


def test_cpu_node_skips_the_cuda_tasks(tmp_path: Path) -> None:
    run = _cuda_play(tmp_path, 0)
    assert run.rc == 0, run.stdout[-4000:]
    assert "runner_on_skipped" in _task_events(run, "Check the driver and CUDA on GPU nodes")
    assert "runner_on_skipped" in _task_events(run, "Check the GPU count, the driver and CUDA")
    assert all(v == 0 for v in run.changed().values())


@pytest.mark.skipif(_has_gpu(), reason="on a GPU machine the count would match")
def test_gpu_profile_on_a_node_without_a_driver_fails_naming_it(tmp_path: Path) -> None:
    run = _cuda_play(tmp_path, 1)
    assert run.rc != 0
    failures = "\n".join(run.failures())
    assert "Check the GPU count, the driver and CUDA" in failures
    if shutil.which("nvidia-smi") is None:
        assert "node gpu-local: nvidia-smi is not on PATH" in failures, failures


# ---- allreduce.py: pure functions ---------------------------------------------------------


def test_bus_factor_is_nccl_tests_all_reduce_factor() -> None:
    assert allreduce.bus_factor(1) is None
    assert allreduce.bus_factor(2) == 1.0
    assert allreduce.bus_factor(8) == 1.75
    with pytest.raises(ValueError):
        allreduce.bus_factor(0)


def test_bandwidth_row_one_rank_has_no_busbw() -> None:
    row = allreduce.bandwidth_row(1 << 30, 0.002, 1)
    assert row["algbw_gbps"] == pytest.approx((1 << 30) / 0.002 / 1e9, rel=1e-4)
    assert row["busbw_gbps"] is None


def test_bandwidth_row_eight_ranks() -> None:
    row = allreduce.bandwidth_row(256 << 20, 0.001, 8)
    assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * 2 * 7 / 8, rel=1e-4)
    with pytest.raises(ValueError):
        allreduce.bandwidth_row(1, 0.0, 2)


def test_parse_sizes_defaults_and_refusals() -> None:
    mib = allreduce.MIB
    assert allreduce.parse_sizes("", "nccl") == [64 * mib, 256 * mib, 1024 * mib]
    assert allreduce.parse_sizes(None, "gloo") == [mib, 4 * mib, 16 * mib]
    assert allreduce.parse_sizes("0.5, 2", "gloo") == [mib // 2, 2 * mib]
    with pytest.raises(SystemExit):
        allreduce.parse_sizes("4,-1", "gloo")


def test_health_problems_name_the_rank_and_the_gpu() -> None:
    good = {
        "rank": 0,
        "ip": "10.0.0.1",
        "device": 0,
        "matmul_rel_err": 3e-3,
        "copy_ok": True,
        "error": "",
    }
    assert allreduce.health_problems([good]) == []
    bad = {**good, "rank": 3, "device": 3, "matmul_rel_err": 0.9, "copy_ok": False}
    assert allreduce.health_problems([good, bad]) == [
        "rank 3 (10.0.0.1, cuda:3): bf16 matmul relative error 0.9 above 0.02",
        "rank 3 (10.0.0.1, cuda:3): device-to-device copy gave different bytes",
    ]
    broken = {**good, "error": "RuntimeError('CUDA error')", "matmul_rel_err": float("nan")}
    assert allreduce.health_problems([broken]) == [
        "rank 0 (10.0.0.1, cuda:0): GPU health measure failed: RuntimeError('CUDA error')"
    ]


def test_notes_say_why_busbw_is_missing() -> None:
    assert any("busbw is undefined" in n for n in allreduce.notes_for(1, "nccl", True))
    # The one-rank note names the backend that ran.
    (one_rank, _) = allreduce.notes_for(1, "gloo", True)
    assert "(gloo returns at once, in place)" in one_rank and "NCCL" not in one_rank
    assert allreduce.notes_for(4, "nccl", True) == []
    assert allreduce.notes_for(2, "gloo", True) == [
        "no GPU health measure: it runs on nccl (GPU) ranks only"
    ]


# ---- allreduce.py's local launcher, on CPU (gloo stands in for NCCL) ---------------------


@pytest.fixture(scope="session")
def torch_python() -> str:
    """An interpreter with torch: this one if it has it, else a venv made from the tests'
    offline wheelhouse (CPU torch)."""
    if importlib.util.find_spec("torch") is not None:
        return sys.executable
    python = TORCH_VENV / "bin" / "python"
    uv = VENV_BIN / "uv"
    if not uv.exists():
        pytest.skip("no uv in the dev venv to make a torch venv")
    try:
        wheelhouse = build_wheelhouse()
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot build the offline wheelhouse: {exc}")

    def install(folder: Path) -> None:
        env = {**os.environ, "UV_CACHE_DIR": str(UV_CACHE), "UV_PYTHON_DOWNLOADS": "never"}
        shutil.rmtree(folder)  # what a fill cut short left
        subprocess.run(
            [str(uv), "venv", "-q", "--python", sys.executable, str(folder)], env=env, check=True
        )
        subprocess.run(
            [str(uv), "pip", "install", "-q", "--python", str(python), "--no-index",
             f"--find-links={wheelhouse}", TORCH_PIN],
            env=env,
            check=True,
            timeout=900,
        )  # fmt: skip

    fill_once(TORCH_VENV, install, marker=f".{TORCH_PIN}")
    return str(python)


def _allreduce(python: str, *args: str, timeout: float = 300) -> tuple[int, dict[str, Any], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLINFRA_", "SKYPILOT_"))}
    out = subprocess.run(
        [python, str(ALLREDUCE), "--launcher", "local", "--timeout-s", "120", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    assert lines, out.stdout + out.stderr
    return out.returncode, json.loads(lines[-1]), out.stderr


@pytest.mark.slow
def test_local_launcher_two_gloo_ranks_sum_and_busbw(torch_python: str) -> None:
    rc, doc, err = _allreduce(
        torch_python,
        "--backend",
        "gloo",
        "--local-ranks",
        "2",
        "--sizes-mib",
        "1,4",
        "--iters",
        "3",
    )
    assert rc == 0, (doc, err)
    assert doc["ok"] is True and doc["launcher"] == "local"
    assert doc["world_size"] == 2 and doc["backend"] == "gloo"
    assert [r["size_bytes"] for r in doc["results"]] == [1 << 20, 4 << 20]
    for r in doc["results"]:
        assert r["time_s"] > 0
        assert r["algbw_gbps"] == pytest.approx(r["size_bytes"] / r["time_s"] / 1e9, rel=1e-2)
        # n = 2: the bus factor 2 (n - 1) / n is 1.
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"], rel=1e-3, abs=1e-4)
    assert doc["nodes"][0]["ranks"] == [0, 1]
    assert doc["gpus"] == [] and "no GPU health measure" in " ".join(doc["notes"])
    assert doc["versions"]["torch"].startswith("2.")


@pytest.mark.slow
def test_local_launcher_one_rank_reports_algbw_and_no_busbw(torch_python: str) -> None:
    rc, doc, err = _allreduce(torch_python, "--backend", "gloo", "--sizes-mib", "1", "--iters", "2")
    assert rc == 0, (doc, err)
    assert doc["world_size"] == 1
    (row,) = doc["results"]
    assert row["busbw_gbps"] is None and row["algbw_gbps"] > 0
    assert any("busbw is undefined" in n for n in doc["notes"])


@pytest.mark.slow
@pytest.mark.skipif(_has_gpu(), reason="this machine has a GPU")
def test_local_launcher_refuses_nccl_without_a_gpu(torch_python: str) -> None:
    rc, doc, _ = _allreduce(torch_python, "--backend", "nccl", "--sizes-mib", "1")
    assert rc == 2 and doc["ok"] is False
    assert "needs a GPU, and torch sees none on this node" in doc["problems"][0]


ACCEPTANCE_PLAY = """\
- name: Node-local acceptance check
  hosts: rlinfra_nodes
  gather_facts: false
  tasks:
    - name: Run the acceptance role with the local launcher
      ansible.builtin.include_role:
        name: acceptance
      vars:
        acceptance_launcher: local
"""


@pytest.mark.slow
def test_acceptance_role_local_launcher_on_a_cpu_node(torch_python: str, tmp_path: Path) -> None:
    """The role's local path end to end on this machine: copy, run, save, every floor checked."""
    pytest.importorskip("ansible_runner")
    play = tmp_path / "acceptance.yml"
    play.write_text(ACCEPTANCE_PLAY)
    venv = Path(torch_python).parent.parent
    run = run_playbook(
        tmp_path,
        str(play),
        _localhost(sys.executable),
        {
            "acceptance_venv": str(venv),
            # Not /opt/rlinfra on this machine: the test leaves nothing outside tmp_path.
            "acceptance_script": str(tmp_path / "allreduce.py"),
            "acceptance_node_env": str(tmp_path / "absent-node.env"),
            "acceptance_result_dest": str(tmp_path / "check.json"),
            "acceptance_sizes_mib": [1],
            "acceptance_iters": 2,
            "acceptance_local_ranks": 2,
            "acceptance_expected_gpus_per_node": 0,
            "acceptance_min_busbw_gbps": 0.0,
        },
    )
    assert run.rc == 0, run.stdout[-4000:]
    doc = json.loads((tmp_path / "check-gpu-local.json").read_text())
    assert doc["ok"] is True and doc["world_size"] == 2 and doc["launcher"] == "local"
    assert "runner_on_skipped" in _task_events(run, "Check that every node took part")
    # An impossible bus bandwidth floor fails the same run, with the measured figures.
    run = run_playbook(
        tmp_path / "floor",
        str(play),
        _localhost(sys.executable),
        {
            "acceptance_venv": str(venv),
            "acceptance_script": str(tmp_path / "allreduce.py"),
            "acceptance_node_env": str(tmp_path / "absent-node.env"),
            "acceptance_sizes_mib": [1],
            "acceptance_iters": 2,
            "acceptance_local_ranks": 2,
            "acceptance_min_busbw_gbps": 1e9,
        },
    )
    assert run.rc != 0
    assert "is below acceptance_min_busbw_gbps" in "\n".join(run.failures())


# ---- on a GPU machine only -----------------------------------------------------------------


@needs_gpu
def test_check_cuda_on_this_gpu_node() -> None:
    import torch

    count = torch.cuda.device_count()
    out = subprocess.run(
        [sys.executable, str(CHECK_CUDA), "--expected-gpus", str(count), "--host", "this-gpu"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    doc = json.loads(out.stdout)
    assert doc["problems"] == [], doc
    assert len(doc["driver"]["gpus"]) == count and doc["driver"]["cuda_version"]
    assert doc["torch"]["nccl"] and all(d["matmul_rel_err"] < 1e-2 for d in doc["torch"]["devices"])
    wrong = subprocess.run(
        [sys.executable, str(CHECK_CUDA), "--expected-gpus", str(count + 1), "--host", "this-gpu"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    problems = json.loads(wrong.stdout)["problems"]
    assert (
        f"node this-gpu: the profile expects {count + 1} GPU(s) per node but nvidia-smi sees {count}"
        in problems[0]
    )


@needs_gpu
def test_local_nccl_all_reduce_and_gpu_health_on_every_gpu() -> None:
    import torch

    count = torch.cuda.device_count()
    rc, doc, err = _allreduce(
        sys.executable, "--backend", "nccl", "--sizes-mib", "1,64", "--iters", "5",
        "--matmul-n", "4096", "--copy-mib", "512", "--health-iters", "5",
    )  # fmt: skip
    assert rc == 0, (doc, err)
    assert doc["backend"] == "nccl" and doc["world_size"] == count
    for r in doc["results"]:
        assert r["algbw_gbps"] > 0
        assert (r["busbw_gbps"] is None) == (count == 1)
    assert [g["device"] for g in doc["gpus"]] == list(range(count))
    for g in doc["gpus"]:
        assert g["matmul_bf16_tflops"] > 1 and g["copy_gbps"] > 10 and g["copy_ok"]
    assert doc["versions"]["nccl"]
