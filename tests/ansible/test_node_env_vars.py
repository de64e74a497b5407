"""The node contract's variables as node_env computes them, evaluated by Ansible itself (local
connection, nothing written outside the test's folder): EFA settings only where EFA is on."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers.ansible import ANSIBLE, run_playbook

PLAYBOOK = """
- name: Evaluate node_env's variables
  hosts: rlinfra_nodes
  connection: local
  gather_facts: false
  tasks:
    - name: Load the role's defaults and vars, after the node contract's it depends on
      ansible.builtin.include_vars:
        file: "{{ item }}"
      loop:
        - ROLES/node_contract/defaults/main.yml
        - ROLES/node_env/defaults/main.yml
        - ROLES/node_env/vars/main.yml
    - name: Write them
      ansible.builtin.copy:
        content: >-
          {{ {'variables': node_env_variables, 'reserved': node_env_reserved,
              'ray_settings': node_env_ray_settings} | to_json }}
        dest: "OUT/{{ inventory_hostname }}.json"
        mode: "0644"
"""


def evaluate(tmp: Path, efa: bool) -> dict[str, Any]:
    playbook = tmp / "eval.yml"
    playbook.write_text(PLAYBOOK.replace("ROLES", str(ANSIBLE / "roles")).replace("OUT", str(tmp)))
    hosts = {
        "n0": {"rlinfra_node_rank": 0, "rlinfra_private_ip": "10.0.0.10"},
        "n1": {"rlinfra_node_rank": 1, "rlinfra_private_ip": "10.0.0.11"},
    }
    inventory = {
        "all": {
            "vars": {"ansible_python_interpreter": sys.executable},
            "children": {"rlinfra_nodes": {"hosts": hosts}},
        }
    }
    run = run_playbook(
        tmp / "run",
        str(playbook),
        inventory,
        {"node_env_efa": efa, "network_collective_interface": "ens5", "node_env_gpus_per_node": 8},
    )
    assert run.rc == 0, run.stdout[-3000:]
    data: dict[str, Any] = json.loads((tmp / "n1.json").read_text())
    return data


@pytest.mark.parametrize("efa", [True, False])
def test_efa_settings_only_where_efa_is_on(tmp_path: Path, efa: bool) -> None:
    data = evaluate(tmp_path, efa)
    variables = data["variables"]
    assert variables["NCCL_SOCKET_IFNAME"] == "ens5"
    assert variables["RLINFRA_NODE_RANK"] == "1"
    assert variables["RLINFRA_NODE_IPS"] == "10.0.0.10\n10.0.0.11"
    # What decides a restart of Ray: the node's settings, not the cluster's members.
    settings = data["ray_settings"]
    members = {f"{p}_{n}" for p in ("RLINFRA", "SKYPILOT") for n in ("NODE_IPS", "NUM_NODES")}
    assert set(settings["variables"]) == set(variables) - members
    assert settings["variables"]["RLINFRA_NODE_RANK"] == "1"
    assert settings["path"][0].endswith("/venv/bin")
    efa_vars = {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "FI_EFA_FORK_SAFE": "1"}
    if efa:
        assert efa_vars.items() <= variables.items()
        assert set(efa_vars) <= set(data["reserved"])
    else:
        assert not set(efa_vars) & set(variables)


SHM_PLAYBOOK = """
- name: Check the shared memory of this machine
  hosts: rlinfra_nodes
  connection: local
  gather_facts: false
  tasks:
    - name: Run base's host settings
      ansible.builtin.include_role:
        name: base
        tasks_from: host.yml
"""


@pytest.mark.parametrize("gib", [0, 1, 1_000_000])
def test_shm_check_fails_with_the_fix_when_too_small(tmp_path: Path, gib: int) -> None:
    """Read-only on this machine: /dev/shm is measured, never remounted; ptrace is left alone."""
    playbook = tmp_path / "shm.yml"
    playbook.write_text(SHM_PLAYBOOK)
    inventory = {
        "all": {
            "vars": {"ansible_python_interpreter": sys.executable},
            "children": {"rlinfra_nodes": {"hosts": {"n0": {}}}},
        }
    }
    env_roles = {"base_min_shm_gib": gib, "base_ptrace_scope": ""}
    run = run_playbook(tmp_path / "run", str(playbook), inventory, env_roles)
    if gib == 1_000_000:
        assert run.rc != 0
        failures = "\n".join(run.failures())
        assert "n0: /dev/shm has" in failures and "mount -o remount,size=1000000G" in failures
    else:
        assert run.rc == 0, run.stdout[-2000:]
