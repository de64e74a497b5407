"""Recovery time on the local cloud: a worker host lost mid-training, `run --recover` heals.

    python bench/recovery.py [--rounds 1]

A 2-host cluster of the `local` profile is brought up and its job (Verl 0.6.0 PPO with a critic,
CPU mode) trained to its first checkpoints. Each round then starts `rlinfra run --recover` for a
few more epochs, waits for the resumed job's first new step, and kills the worker host (its sshd
is its PID 1: every process of the host goes, as with a preempted machine). Measured, per round:
from the kill to the first training step of the resubmitted job (the recovery as a user sees it),
and rlinfra's own split of it (rlinfra.ops.recovery: Terraform, Ansible, of which the Ray join, and
Verl's restart), plus the steps lost. Figures go to bench/results/recovery.json and recovery.md.
Needs root (local hosts).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
BIN = Path(sys.executable).parent
RLINFRA = str(BIN / "rlinfra")
STEPS_PER_EPOCH = 4  # the local profile's data: 36 rows in batches of 8


def cli(env: dict[str, str], *argv: str, timeout: float = 1800) -> str:
    result = subprocess.run(
        [RLINFRA, *argv], env=env, capture_output=True, text=True, timeout=timeout
    )
    if result.returncode != 0:
        raise RuntimeError(f"rlinfra {' '.join(argv)} failed:\n{result.stderr[-3000:]}")
    return result.stdout


def one_round(env: dict[str, str], name: str, home: Path) -> dict[str, Any]:
    folder = home / "clusters" / name
    bucket = home / "buckets" / "rlinfra-local-checkpoints"
    saved = int((bucket / "latest_checkpointed_iteration.txt").read_text())
    epochs = saved // STEPS_PER_EPOCH + 3
    sshd = int((folder / "nodes" / f"{name}-1" / "sshd.pid").read_text())
    argv = [RLINFRA, "run", name, "--recover", "--json", "--env", f"TOTAL_EPOCHS={epochs}"]
    err = home / f"recover-{saved}.err"
    with err.open("w") as stderr:
        run = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True)
        deadline = time.monotonic() + 900
        while not re.search(rf"step:{saved + 1} - ", cli(env, "logs", name)):
            if run.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the job did not train:\n{err.read_text()[-3000:]}")
            time.sleep(1)
        os.kill(sshd, signal.SIGKILL)
        killed = time.monotonic()
        # The resubmitted job's first step: polled until it shows.
        first_new_step = None
        while run.poll() is None and first_new_step is None:
            record = json.loads((folder / "record.json").read_text())
            recoveries = record.get("recoveries") or []
            job = recoveries[-1].get("resubmitted") if recoveries else None
            if job and re.search(r"step:\d+ - ", cli(env, "logs", name, "--job", job)):
                first_new_step = time.monotonic() - killed
            time.sleep(1)
        out, _ = run.communicate(timeout=1800)
    if run.returncode != 0:
        raise RuntimeError(f"run --recover failed:\n{err.read_text()[-3000:]}")
    result = json.loads(out)
    (recovery,) = result["recoveries"]
    return {
        "kill_to_resumed_step_s": first_new_step,
        "rlinfra": recovery["seconds"],
        "last_step": recovery["last_step"],
        "resumed_from_step": recovery["resumed_from_step"],
        "steps_lost": recovery["steps_lost"],
        "replaced": recovery["replaced"],
    }


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "# Recovery from a lost worker host (local cloud, 2 hosts, Verl PPO on CPU)",
        "",
        f"Machine: {results['machine']}. One `run --recover` per round; the worker host is "
        "killed at the resumed job's first new step.",
        "",
        "| round | kill -> resumed step (s) | heal (s) | terraform | ansible | ray join | "
        "verl restart | steps lost |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for index, row in enumerate(results["rounds"], 1):
        s = row["rlinfra"]
        lines.append(
            f"| {index} | {row['kill_to_resumed_step_s']:.0f} | {s.get('heal', 0):.0f} | "
            f"{s.get('terraform', 0):.0f} | {s.get('ansible', 0):.0f} | "
            f"{s.get('ray_join', 0):.0f} | {s.get('verl_restart', 0):.0f} | {row['steps_lost']} |"
        )
    lines += [
        "",
        "The time from the kill to the job's failure (the job runner's lost-node check and Ray's "
        "own health checks) is the rest of the first column: it minus the heal and Verl's restart.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench/recovery.py: needs root (local hosts); skipped", file=sys.stderr)
        return
    home = Path(tempfile.mkdtemp(prefix="rlinfra-bench-recovery-", dir="/var/tmp"))
    env = dict(os.environ)
    env.update(
        RLINFRA_HOME=str(home),
        RLINFRA_CACHE=os.environ.get("RLINFRA_TEST_CACHE", "/var/tmp/rlinfra-test-cache"),
        RLINFRA_QUIET="1",
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    env.pop("TF_CLI_CONFIG_FILE", None)
    name = f"brec-{uuid.uuid4().hex[:5]}"
    rounds: list[dict[str, Any]] = []
    try:
        cli(env, "up", "--cluster", name, "--yes", "--no-check")
        cli(env, "logs", name, "--follow", timeout=3600)  # the first job, to its checkpoints
        for _ in range(args.rounds):
            rounds.append(one_round(env, name, home))
    finally:
        subprocess.run([RLINFRA, "down", name, "--yes", "--delete-buckets"], env=env)
        shutil.rmtree(home, ignore_errors=True)
    results = {
        "machine": f"{os.cpu_count()} CPUs, {os.uname().sysname} {os.uname().release}",
        "rounds": rounds,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "recovery.json").write_text(json.dumps(results, indent=1) + "\n")
    (RESULTS / "recovery.md").write_text(markdown(results))
    print(markdown(results))


if __name__ == "__main__":
    main()
