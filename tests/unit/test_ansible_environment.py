"""What Ansible sees of the controller's environment: ansible-runner copies all of it into the
playbook's process and into the run's artifacts, so rlinfra blanks all but what Ansible needs.

A real playbook runs here (connection local) with a canary key in the environment, as a user
who exported keys for Terraform, a job or ssh.buckets would have it.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from rlinfra.runners.ansible import blanked_environment, run_playbook

ROOT = Path(__file__).resolve().parents[2]
CANARY = "canary-controller-key-9f2c61"

PLAYBOOK = """\
- name: Say what reaches Ansible
  hosts: all
  gather_facts: false
  tasks:
    - name: Write the environment's values that Ansible was given
      ansible.builtin.copy:
        content: "{{ {'canary': lookup('env', 'RLINFRA_TEST_SECRET'),
                      'home': lookup('env', 'HOME'),
                      'path': lookup('env', 'PATH')} | to_json }}"
        dest: "{{ out }}"
        mode: "0600"
"""


def test_only_what_ansible_needs_passes() -> None:
    blank = blanked_environment(
        {
            "PATH": "/bin",
            "HOME": "/root",
            "LC_ALL": "C",
            "ANSIBLE_FORKS": "4",
            "SSH_AUTH_SOCK": "/tmp/agent",
            "AWS_SECRET_ACCESS_KEY": "x",
            "WANDB_API_KEY": "y",
            "BUCKET_AWS_ACCESS_KEY_ID": "z",
        }
    )
    assert blank == {
        "AWS_SECRET_ACCESS_KEY": "",
        "WANDB_API_KEY": "",
        "BUCKET_AWS_ACCESS_KEY_ID": "",
    }


def test_a_key_in_the_controllers_environment_reaches_neither_ansible_nor_its_artifacts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "ansible"
    (folder / "playbooks").mkdir(parents=True)
    shutil.copy(ROOT / "ansible" / "ansible.cfg", folder / "ansible.cfg")
    (folder / "roles").mkdir()
    (folder / "playbooks" / "env.yml").write_text(PLAYBOOK)
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    (folder / "inventory.yml").write_text(json.dumps({"all": {"hosts": {"here": host}}}))
    out = tmp_path / "seen.json"
    (folder / "vars.yml").write_text(json.dumps({"out": str(out)}))
    monkeypatch.setenv("RLINFRA_TEST_SECRET", CANARY)
    result = run_playbook(folder, "env.yml", "environment")
    assert result.rc == 0
    seen = json.loads(out.read_text())
    assert seen["canary"] == "" and seen["home"] and seen["path"]
    written = [p for p in (folder / ".runner").rglob("*") if p.is_file()]
    assert any(p.name == "command" for p in written)  # the file that used to hold it
    for path in written:
        assert CANARY not in path.read_text(errors="replace"), path
