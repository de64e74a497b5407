#!/usr/bin/env python3
"""Check a GPU node after install: the driver (nvidia-smi) and CUDA through the venv's torch.

Usage: python check_cuda.py --expected-gpus N [--host NAME]
Output (stdout, one JSON document):

  {"host", "expected_gpus", "skipped",
   "driver": {"found", "gpus": [{"index", "name", "driver_version", "memory_total_mib",
              "pci_bus_id"}], "driver_version", "cuda_version", "error"},
   "torch": {"version", "cuda", "cudnn", "nccl", "available", "device_count",
             "devices": [{"index", "name", "capability", "memory_total_mib", "matmul_rel_err"}],
             "error"},
   "problems": ["<one line naming the host>", ...]}

Run it with the venv's interpreter. With --expected-gpus 0 (a CPU node) it checks nothing and
touches no GPU: "skipped" is true. Otherwise every GPU must be seen twice, by the driver and by
torch, in the number the profile asks for, and a small float32 matrix product must give the
right answer on each of them. Every problem is reported, not only the first. The exit status is
0 whenever the JSON was written; the caller decides on "problems". Only the standard library is
imported at the top: torch is imported inside torch_report().
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import socket
import subprocess
import sys
from typing import Any

NVIDIA_SMI_FIELDS = ("index", "name", "driver_version", "memory.total", "pci.bus_id")
_CUDA_VERSION = re.compile(r"CUDA Version\s*:?\s*([0-9]+(?:\.[0-9]+)*)")
# Relative error of a float32 product against a float64 one: float32 lands far below this, the
# TF32 matrix mode near 3e-4; a broken device or library lands far above it.
MATMUL_REL_TOL = 1e-2


def parse_gpu_csv(text: str) -> list[dict[str, Any]]:
    """Rows of `nvidia-smi --query-gpu=<NVIDIA_SMI_FIELDS> --format=csv,noheader,nounits`."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(NVIDIA_SMI_FIELDS):
            raise ValueError(
                f"nvidia-smi row has {len(cells)} fields, expected {len(NVIDIA_SMI_FIELDS)}: {line!r}"
            )
        index, name, driver, memory, bus = cells
        gpus.append(
            {
                "index": int(index),
                "name": name,
                "driver_version": driver,
                "memory_total_mib": int(float(memory))
                if memory.replace(".", "").isdigit()
                else None,
                "pci_bus_id": bus,
            }
        )
    return gpus


def parse_cuda_version(text: str) -> str:
    """The driver's CUDA version from `nvidia-smi` (header) or `nvidia-smi -q`; "" if absent."""
    match = _CUDA_VERSION.search(text)
    return match.group(1) if match else ""


def count_problem(host: str, expected: int, found: int, seen_by: str, names: list[str]) -> str:
    """The failure line for a GPU count that is not the profile's, or "" when it matches."""
    if found == expected:
        return ""
    models = f" ({', '.join(sorted(set(names)))})" if names else ""
    return (
        f"node {host}: the profile expects {expected} GPU(s) per node but {seen_by} sees "
        f"{found}{models}"
    )


def _run(argv: list[str], timeout_s: float = 60) -> tuple[int, str, str]:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return -1, "", repr(exc)
    return out.returncode, out.stdout, out.stderr


def driver_report() -> dict[str, Any]:
    """What nvidia-smi says about this node's GPUs and driver."""
    report: dict[str, Any] = {
        "found": False,
        "gpus": [],
        "driver_version": "",
        "cuda_version": "",
        "error": "",
    }
    exe = shutil.which("nvidia-smi")
    if exe is None:
        report["error"] = "nvidia-smi is not on PATH (no NVIDIA driver installed?)"
        return report
    report["found"] = True
    rc, out, err = _run(
        [exe, f"--query-gpu={','.join(NVIDIA_SMI_FIELDS)}", "--format=csv,noheader,nounits"]
    )
    if rc != 0:
        report["error"] = (
            f"nvidia-smi --query-gpu failed (exit {rc}): {(err or out).strip()[-500:]}"
        )
        return report
    try:
        report["gpus"] = parse_gpu_csv(out)
    except ValueError as exc:
        report["error"] = str(exc)
        return report
    drivers = sorted({g["driver_version"] for g in report["gpus"]})
    report["driver_version"] = ",".join(drivers)
    rc, out, _ = _run([exe])
    report["cuda_version"] = parse_cuda_version(out) if rc == 0 else ""
    return report


def torch_report(expected: int) -> dict[str, Any]:
    """torch's view of CUDA, with a small checked matrix product on every visible device."""
    report: dict[str, Any] = {
        "version": "",
        "cuda": "",
        "cudnn": "",
        "nccl": "",
        "available": False,
        "device_count": 0,
        "devices": [],
        "error": "",
    }
    try:
        import torch
    except Exception as exc:  # reported: the node's venv is broken
        report["error"] = f"import torch failed: {exc!r}"
        return report
    report["version"] = str(torch.__version__)
    report["cuda"] = str(torch.version.cuda or "")
    try:
        report["available"] = bool(torch.cuda.is_available())
        report["device_count"] = int(torch.cuda.device_count()) if report["available"] else 0
        if report["available"]:
            cudnn = torch.backends.cudnn.version()
            report["cudnn"] = str(cudnn) if cudnn else ""
            nccl = torch.cuda.nccl.version()
            report["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    except Exception as exc:  # a driver/runtime mismatch shows up here
        report["error"] = f"CUDA initialisation failed: {exc!r}"
        return report
    generator = torch.Generator().manual_seed(0)
    for index in range(report["device_count"]):
        props = torch.cuda.get_device_properties(index)
        device: dict[str, Any] = {
            "index": index,
            "name": props.name,
            "capability": f"{props.major}.{props.minor}",
            "memory_total_mib": props.total_memory // (1 << 20),
            "matmul_rel_err": None,
            "error": "",
        }
        try:
            a = torch.randn(256, 256, generator=generator, dtype=torch.float64)
            b = torch.randn(256, 256, generator=generator, dtype=torch.float64)
            ref = a @ b
            got = (a.float().to(f"cuda:{index}") @ b.float().to(f"cuda:{index}")).cpu().double()
            torch.cuda.synchronize(index)
            device["matmul_rel_err"] = float((got - ref).norm() / ref.norm())
        except Exception as exc:  # reported per device
            device["error"] = repr(exc)
        report["devices"].append(device)
    return report


def problems_of(
    host: str, expected: int, driver: dict[str, Any], cuda: dict[str, Any]
) -> list[str]:
    """Every reason this node does not match a profile of `expected` GPUs per node."""
    problems = []
    if driver["error"]:
        problems.append(f"node {host}: {driver['error']}")
    elif driver["found"]:
        names = [g["name"] for g in driver["gpus"]]
        problem = count_problem(host, expected, len(driver["gpus"]), "nvidia-smi", names)
        if problem:
            problems.append(problem)
    if cuda["error"]:
        problems.append(f"node {host}: {cuda['error']}")
        return problems
    if not cuda["available"]:
        build = f"CUDA {cuda['cuda']}" if cuda["cuda"] else "a CPU-only build"
        problems.append(
            f"node {host}: torch {cuda['version']} ({build}) reports torch.cuda.is_available() "
            "False; install a CUDA build of torch that this driver supports"
        )
        return problems
    names = [d["name"] for d in cuda["devices"]]
    problem = count_problem(
        host, expected, cuda["device_count"], "torch.cuda.device_count()", names
    )
    if problem:
        problems.append(problem)
    for device in cuda["devices"]:
        if device["error"]:
            problems.append(
                f"node {host}: matmul on cuda:{device['index']} failed: {device['error']}"
            )
        elif not (
            device["matmul_rel_err"] is not None and device["matmul_rel_err"] < MATMUL_REL_TOL
        ):
            problems.append(
                f"node {host}: matmul on cuda:{device['index']} ({device['name']}) has relative "
                f"error {device['matmul_rel_err']}, above {MATMUL_REL_TOL}"
            )
    return problems


def check(host: str, expected: int) -> dict[str, Any]:
    doc: dict[str, Any] = {"host": host, "expected_gpus": expected, "skipped": expected == 0}
    if expected == 0:
        doc.update(driver=None, torch=None, problems=[])
        return doc
    driver = driver_report()
    cuda = torch_report(expected)
    doc.update(driver=driver, torch=cuda, problems=problems_of(host, expected, driver, cuda))
    return doc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check the driver and CUDA on a GPU node.")
    parser.add_argument("--expected-gpus", type=int, required=True)
    parser.add_argument("--host", default=socket.gethostname())
    args = parser.parse_args(argv)
    if args.expected_gpus < 0:
        parser.error("--expected-gpus must be >= 0")
    print(json.dumps(check(args.host, args.expected_gpus)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
