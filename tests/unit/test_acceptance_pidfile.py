"""The acceptance check's pidfile: a new check, or `--stop`, ends a check left running.

These run the role's real allreduce.py; the check being stopped is a stand-in process whose
command line names a script called allreduce.py (a real check needs a Ray cluster: the e2e
suite interrupts one there).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "ansible/roles/acceptance/files/allreduce.py"


def _stop(pidfile: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--stop", "--pidfile", str(pidfile)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _left_running(tmp_path: Path, ignores_term: bool = False) -> subprocess.Popen[bytes]:
    body = "import signal, time\n"
    if ignores_term:
        body += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    body += "print('ready', flush=True)\ntime.sleep(600)\n"
    fake = tmp_path / "old" / "allreduce.py"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text(body)
    proc = subprocess.Popen([sys.executable, str(fake)], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    return proc


def test_stop_ends_the_recorded_check(tmp_path: Path) -> None:
    old = _left_running(tmp_path)
    pidfile = tmp_path / "acceptance.pid"
    pidfile.write_text(f"{old.pid}\n")
    done = _stop(pidfile)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"stopped the check with pid {old.pid}"
    assert old.wait(timeout=5) != 0


def test_stop_kills_a_check_that_ignores_sigterm(tmp_path: Path) -> None:
    old = _left_running(tmp_path, ignores_term=True)
    pidfile = tmp_path / "acceptance.pid"
    pidfile.write_text(f"{old.pid}\n")
    start = time.monotonic()
    done = _stop(pidfile)
    assert done.stdout.strip() == f"stopped the check with pid {old.pid}"
    assert old.wait(timeout=5) == -9
    assert time.monotonic() - start >= 10  # the grace it gives before SIGKILL


def test_stop_leaves_a_reused_pid_alone(tmp_path: Path) -> None:
    other = subprocess.Popen(["sleep", "600"])
    try:
        pidfile = tmp_path / "acceptance.pid"
        pidfile.write_text(f"{other.pid}\n")
        done = _stop(pidfile)
        assert done.stdout.strip() == "no check was running"
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_stop_without_a_pidfile_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--stop"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "--stop needs --pidfile" in done.stderr
    assert _stop(tmp_path / "missing.pid").stdout.strip() == "no check was running"
