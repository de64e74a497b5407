"""Fixtures for the Ansible tests: two real hosts (network namespaces with sshd, see
ansible_testbed.py), an offline wheelhouse, and the variables every playbook run gets."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible_harness import PACKAGES, UV_CACHE, VENV_BIN, build_wheelhouse, system_python
from ansible_testbed import Testbed, missing_requirements, setup, teardown


@pytest.fixture(scope="session")
def wheelhouse() -> Path:
    return build_wheelhouse()


@pytest.fixture(scope="session")
def testbed() -> Iterator[Testbed]:
    problems = missing_requirements()
    if problems:
        pytest.skip(
            "the Ansible host tests need a machine that can make network namespaces: "
            + ", ".join(problems)
        )
    bed = setup(2)
    try:
        yield bed
    finally:
        teardown(bed.root)


@pytest.fixture(scope="session")
def base_extravars(wheelhouse: Path) -> dict[str, Any]:
    UV_CACHE.mkdir(parents=True, exist_ok=True)
    return {
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
