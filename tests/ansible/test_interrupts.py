"""A controller that is killed or interrupted ends what it started.

`run_playbook` starts ansible-playbook through ansible-runner; these run a real playbook on this
machine (connection local) whose task sleeps, then kill or interrupt the controller process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

DRIVER = Path(__file__).resolve().parents[2] / "driver"


def _ansible_dir(tmp_path: Path, marker: str) -> Path:
    folder = tmp_path / "ansible"
    (folder / "playbooks").mkdir(parents=True)
    (folder / "roles").mkdir()
    (folder / "ansible.cfg").write_text("[defaults]\ngathering = explicit\n")
    (folder / "inventory.yml").write_text(
        "all:\n  hosts:\n    here:\n      ansible_connection: local\n"
        f"      ansible_python_interpreter: {sys.executable}\n"
    )
    (folder / "vars.yml").write_text("{}\n")
    (folder / "playbooks" / "sleep.yml").write_text(
        textwrap.dedent(
            f"""\
            - name: Sleep
              hosts: all
              tasks:
                - name: Sleep a long time
                  ansible.builtin.command: sleep {marker}
                  changed_when: false
            """
        )
    )
    return folder


def _processes(needle: str) -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args", "ww"], capture_output=True, text=True).stdout
    return [
        line.strip() for line in out.splitlines()[1:] if needle in line and "ps -eo" not in line
    ]


def _start_controller(folder: Path) -> subprocess.Popen[str]:
    code = (
        "from pathlib import Path\n"
        "from rlinfra.runners.ansible import run_playbook\n"
        f"run_playbook(Path({str(folder)!r}), 'sleep.yml', 'sleep')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(DRIVER), "RLINFRA_QUIET": "1"}
    return subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait_for(predicate: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT], ids=["killed", "interrupted"])
def test_the_playbook_and_its_task_end_with_the_controller(
    tmp_path: Path, how: signal.Signals
) -> None:
    marker = f"{300 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**6}"
    folder = _ansible_dir(tmp_path, marker)
    controller = _start_controller(folder)
    try:
        assert _wait_for(lambda: _processes(f"sleep {marker}"), 60), (
            "the task never started: " + (controller.stdout.read() if controller.poll() else "")  # type: ignore[union-attr]
        )
        playbook = _processes(str(folder / "playbooks" / "sleep.yml"))
        assert any("ansible-playbook" in line for line in playbook), playbook
        os.kill(controller.pid, how)
        controller.wait(timeout=60)
        # Both the playbook and the command its task ran are gone, well before the sleep ends.
        assert _wait_for(
            lambda: (
                not _processes(f"sleep {marker}")
                and not _processes(str(folder / "playbooks" / "sleep.yml"))
            ),
            30,
        ), _processes(f"sleep {marker}") + _processes(str(folder / "playbooks"))
    finally:
        if controller.poll() is None:
            controller.kill()
        for line in _processes(f"sleep {marker}") + _processes(str(folder / "playbooks")):
            os.kill(int(line.split()[0]), signal.SIGKILL)


def test_tether_refuses_to_start_without_a_program() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rlinfra.runners.tether", "TERM"],
        env={**os.environ, "PYTHONPATH": str(DRIVER)},
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "usage:" in out.stderr
