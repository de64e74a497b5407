"""Real Verl on CPU: a venv installed from the cpu-sandbox lock, and a Ray node started as rlinfra
starts its nodes (GPU slots and a ``cpu`` resource), that the runs join.

The venv is built once per machine and lock into ``${RLINFRA_TEST_CACHE:-/var/tmp/rlinfra-test-
cache}`` (uv, with the wheel folders pip knows: the CPU torch), under a file lock, so two test
processes build it once. The Ray node lives in a temporary
folder of its own; its processes are found by that folder and stopped by pid at the end.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.emulators import free_port
from helpers.locks import fill_once
from helpers.paths import cache_root
from helpers.verl import RayNode, node_env, stop_ray_node
from rlinfra.controller import uv_binary
from rlinfra.deploy import ensure_ray_token
from rlinfra.lock import current_lock, discovered_find_links
from rlinfra.pins import pin_sets
from rlinfra_node.verl_cpu import ray_start_args


@pytest.fixture(scope="session")
def verl_python() -> Path:
    """The Python of a venv installed exactly from the cpu-sandbox lock (built once)."""
    pins = pin_sets()["cpu-sandbox"]
    lock = current_lock(pins)
    assert lock is not None, "the cpu-sandbox lock is stale: run `rlinfra lock cpu-sandbox`"
    digest = hashlib.sha256(lock.read_bytes()).hexdigest()[:12]
    venv = cache_root() / f"verl-cpu-venv-{digest}"
    python = venv / "bin" / "python"

    def install(folder: Path) -> None:
        uv = uv_binary()
        # uv's cache lives in the test cache too, which .ci/run removes at the end.
        env = {**os.environ, "UV_NO_CONFIG": "1", "UV_PYTHON_DOWNLOADS": "never"}
        env["UV_CACHE_DIR"] = str(cache_root() / "uv-verl")
        shutil.rmtree(folder)  # what a fill cut short left
        argv = [uv, "venv", "-q", "--python", sys.executable, str(folder)]
        subprocess.run(argv, env=env, check=True)
        argv = [uv, "pip", "install", "-q", "--python", str(folder / "bin" / "python")]
        argv += ["--require-hashes", "--no-deps", "-r", str(lock)]
        for links in discovered_find_links(os.environ):
            argv += ["--find-links", links]
        subprocess.run(argv, env=env, check=True)

    fill_once(venv, install)
    return python


@pytest.fixture(scope="session")
def ray_node(verl_python: Path) -> Iterator[RayNode]:
    """A one-node Ray cluster started like an rlinfra CPU node for one Verl worker."""
    # Short: Ray's unix socket paths live under it.
    folder = Path(tempfile.mkdtemp(prefix="rv", dir="/tmp"))
    # Token auth as rlinfra runs it, with a token of this node's own (not ~/.ray's, shared).
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(ensure_ray_token(folder))}
    port = free_port()
    ray = verl_python.parent / "ray"
    argv = [str(ray), "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port)]
    argv += ["--num-cpus", "2"]
    argv += [*ray_start_args(1), "--include-dashboard=false", "--temp-dir", str(folder)]
    try:
        subprocess.run(argv, env=node_env(**auth), check=True, capture_output=True, timeout=300)
        yield RayNode(folder=folder, env={"RAY_ADDRESS": f"127.0.0.1:{port}", **auth})
    finally:
        stop_ray_node(folder, port)
        shutil.rmtree(folder, ignore_errors=True)
