"""Ansible playbooks through ansible-runner, with per-host progress and a one-line failure."""

from __future__ import annotations

import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlinfra import ui
from rlinfra.errors import OperationError

# How long an interrupted playbook has to end its tasks before its process group is killed.
CANCEL_GRACE_S = 15.0


@dataclass
class PlaybookResult:
    status: str
    rc: int
    changed: dict[str, int] = field(default_factory=dict)
    ok: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    artifact_dir: str = ""
    # Wall-clock seconds of each role, from its first task's start to its last task's end on
    # any host (hosts run a role's tasks side by side).
    role_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def total_changed(self) -> int:
        return sum(self.changed.values())


def _widen(spans: dict[str, list[float]], role: str, start: Any, end: Any) -> None:
    """Stretch ``role``'s span to cover one task result's ISO ``start``..``end``."""
    from datetime import datetime

    try:
        first = datetime.fromisoformat(str(start)).timestamp()
        last = datetime.fromisoformat(str(end)).timestamp()
    except ValueError:
        return
    span = spans.setdefault(role, [first, last])
    span[0], span[1] = min(span[0], first), max(span[1], last)


# What ansible-playbook sees of this process's environment. ansible-runner starts it with a copy
# of the whole environment and writes that copy into the run's artifacts (``command``), so every
# other variable goes in blank: a key exported here for Terraform (AWS_SECRET_ACCESS_KEY), for a
# job (--secret WANDB_API_KEY) or for the hosts (ssh.buckets) never reaches Ansible or its files.
# The roles read nothing from the controller's environment.
PASSED_ENV = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "PWD",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TERM",
        "TMPDIR",
        "SSH_AUTH_SOCK",
        "PYTHONPATH",
        "VIRTUAL_ENV",
        "LD_LIBRARY_PATH",
        # TLS trust and Kerberos tickets (GSSAPI SSH to on-prem hosts): paths, not secrets.
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "KRB5CCNAME",
        "KRB5_CONFIG",
    }
)
PASSED_PREFIXES = ("ANSIBLE_", "LC_", "XDG_")


def blanked_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """An empty value for each variable of ``environ`` that Ansible is not given."""
    return {
        name: ""
        for name in environ
        if name not in PASSED_ENV and not name.startswith(PASSED_PREFIXES)
    }


def run_playbook(
    ansible_dir: Path,
    playbook: str,
    title: str,
    limit: str | None = None,
    extravars: dict[str, Any] | None = None,
    raise_on_failure: bool = True,
) -> PlaybookResult:
    """Run ``ansible_dir/playbooks/<playbook>`` against ``ansible_dir/inventory.yml``."""
    import ansible_runner

    failures: list[str] = []
    spans: dict[str, list[float]] = {}
    inventory = ansible_dir / "inventory.yml"
    vars_file = ansible_dir / "vars.yml"
    private = ansible_dir / ".runner"
    private.mkdir(parents=True, exist_ok=True)
    bin_dir = str(Path(sys.executable).parent)
    envvars = {
        **blanked_environment(os.environ),
        "ANSIBLE_CONFIG": str(ansible_dir / "ansible.cfg"),
        "ANSIBLE_ROLES_PATH": str(ansible_dir / "roles"),
        "ANSIBLE_LOCAL_TEMP": str(private / "tmp"),
        "ANSIBLE_NOCOLOR": "1",
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
    }
    # ansible-playbook ends with this process, even when it is killed (see tether.py).
    tethered = private / "ansible-playbook"
    pidfile = private / "ansible-playbook.pid"
    pidfile.unlink(missing_ok=True)
    playbook_bin = Path(sys.executable).with_name("ansible-playbook")
    wrapper = (
        "#!/bin/sh\n"
        f"echo $$ > {shlex.quote(str(pidfile))}\n"
        f"exec {shlex.quote(sys.executable)} -m rlinfra.runners.tether TERM "
        f'{shlex.quote(str(playbook_bin) if playbook_bin.exists() else "ansible-playbook")} "$@"\n'
    )
    if not tethered.is_file() or tethered.read_text() != wrapper:
        tethered.write_text(wrapper)
        tethered.chmod(0o755)
    cmdline = f"{shlex.quote(str(ansible_dir / 'playbooks' / playbook))} -e @{vars_file}"
    if extravars:
        import json

        cmdline += f" -e '{json.dumps(extravars)}'"

    with ui.step(title) as progress:

        def on_event(event: dict[str, Any]) -> bool:
            data = event.get("event_data") or {}
            kind = event.get("event", "")
            host = data.get("host") or data.get("remote_addr") or ""
            if kind == "playbook_on_task_start":
                progress.update(f"{data.get('task', '')}")
            elif kind.startswith("runner_on_") and data.get("role"):
                _widen(spans, str(data["role"]), data.get("start"), data.get("end"))
            elif kind in {
                "runner_on_failed",
                "runner_on_unreachable",
                "runner_item_on_failed",
            } and not data.get("ignore_errors"):
                result = data.get("res") or {}
                if result.get("results") and kind == "runner_on_failed":
                    return True  # the loop's items were reported one by one
                message = result.get("msg") or result.get("stderr") or result.get("reason") or ""
                message = " ".join(str(message).split())[:300]
                failures.append(f"{host}: task '{data.get('task', '?')}': {message}")
            return True

        interrupted = threading.Event()
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

        def on_signal(number: int, frame: object) -> None:
            interrupted.set()

        # On an interrupt ansible-runner kills the playbook's process group, which is not where
        # Ansible's workers and their tasks run (each in a session of its own). SIGTERM first lets
        # ansible-playbook end them; the group is killed only if it has not ended in time.
        asked: list[float] = []

        def cancel() -> bool:
            if not interrupted.is_set():
                return False
            if not asked:
                asked.append(time.monotonic())
                try:
                    os.kill(int(pidfile.read_text().strip()), signal.SIGTERM)
                except (OSError, ValueError):
                    return True
                return False
            return time.monotonic() - asked[0] > CANCEL_GRACE_S

        for sig in previous:
            signal.signal(sig, on_signal)
        try:
            runner = ansible_runner.run(
                private_data_dir=str(private),
                project_dir=str(ansible_dir),
                binary=str(tethered),
                inventory=str(inventory),
                cmdline=cmdline,
                envvars=envvars,
                limit=limit,
                quiet=True,
                event_handler=on_event,
                cancel_callback=cancel,
                rotate_artifacts=5,
            )
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if interrupted.is_set() or runner.status == "canceled":
            raise KeyboardInterrupt
    stats = runner.stats or {}
    result = PlaybookResult(
        status=runner.status,
        rc=runner.rc,
        changed=dict(stats.get("changed") or {}),
        ok=dict(stats.get("ok") or {}),
        failures=failures,
        artifact_dir=str(runner.config.artifact_dir),
        role_seconds={role: round(end - start, 3) for role, (start, end) in spans.items()},
    )
    if raise_on_failure and (runner.rc != 0 or runner.status != "successful"):
        summary = failures[0] if failures else f"ansible-playbook exited with {runner.rc}"
        more = f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""
        raise OperationError(
            f"{playbook} failed: {summary}{more}",
            f"Full output: {Path(result.artifact_dir) / 'stdout'}",
        )
    return result
