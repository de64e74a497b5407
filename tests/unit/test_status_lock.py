"""`status` tells a command that is working on the cluster from one that was killed midway (its
lock's text stays, naming a process that is gone), so a stage such as "infrastructure" is read
right: still moving, or stopped until the next `up`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from helpers.cli import CliResult
from rlinfra.deploy import cluster_lock, deployment_dir, lock_holder, write_record
from rlinfra.record import Record, Stage

Cli = Callable[..., CliResult]

# Holds the cluster's lock the way `rlinfra up` does, until it is killed.
HOLDER = """
import sys, time
from pathlib import Path
from rlinfra.deploy import cluster_lock
with cluster_lock(Path(sys.argv[1]), "up"):
    print("held", flush=True)
    time.sleep(600)
"""


@pytest.fixture
def folder(home: Path) -> Path:
    path = deployment_dir("c1", home)
    write_record(
        path, Record(cluster="c1", cloud="local", profile="local", stage=Stage.INFRASTRUCTURE)
    )
    return path


@pytest.fixture
def holder(folder: Path) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(folder)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "held"
    yield proc
    proc.kill()
    proc.wait()


def test_status_names_the_command_at_work(
    cli: Cli, folder: Path, holder: subprocess.Popen[str]
) -> None:
    assert lock_holder(folder) == {"command": "up", "pid": holder.pid, "running": True}
    result = cli("status", "c1")
    assert result.code == 0, result.err
    assert f"  `rlinfra up` (pid {holder.pid}) is running" in result.out.splitlines()
    listing = cli("status")
    assert "(up running)" in listing.out
    state = json.loads(cli("status", "c1", "--json").out)
    assert state["lock"] == {"command": "up", "pid": holder.pid, "running": True}


def test_status_says_a_killed_command_stopped_where_its_stage_is(
    cli: Cli, folder: Path, holder: subprocess.Popen[str]
) -> None:
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    # The kernel dropped the lock with the process; its text stays.
    with cluster_lock(folder, "check"):
        pass
    (folder / ".lock").write_text(f"`rlinfra up` (pid {holder.pid})")
    assert lock_holder(folder) == {"command": "up", "pid": holder.pid, "running": False}
    result = cli("status", "c1")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0] == "cluster c1 (local, profile local): infrastructure"
    assert lines[1] == (
        f"  `rlinfra up` (pid {holder.pid}) was killed before it finished; the stage is where it "
        "stopped. Running `rlinfra up` again converges."
    )
    assert "(up killed)" in cli("status").out


def test_a_command_that_exits_leaves_no_holder(cli: Cli, folder: Path) -> None:
    with cluster_lock(folder, "up"):
        assert lock_holder(folder) == {"command": "up", "pid": os.getpid(), "running": True}
    assert lock_holder(folder) is None
    result = cli("status", "c1")
    assert "rlinfra up" not in result.out
    assert json.loads(cli("status", "c1", "--json").out)["lock"] is None


def test_a_live_pid_without_the_lock_is_not_the_holder(folder: Path) -> None:
    # The killed command's pid may since belong to another program: the kernel's lock table
    # decides.
    other = subprocess.Popen(["sleep", "30"])
    try:
        time.sleep(0.05)
        (folder / ".lock").write_text(f"`rlinfra up` (pid {other.pid})")
        assert lock_holder(folder) == {"command": "up", "pid": other.pid, "running": False}
    finally:
        other.kill()
        other.wait()
