"""Verl's real trainer on the local cloud: time to the first step, seconds per step, and
rlinfra's overhead against the same Verl run started by hand.

    python bench/verl.py [--sizes 1,2]

For each size a fresh local cluster of the `local` profile is brought up with its job (PPO with
a critic, Verl 0.6.0 in CPU mode): the wall time from `rlinfra up` to Verl's first `step:1` line,
and Verl's own `timing_s/step` for the steps. On the 1-host cluster the same training is then run
twice more from an empty checkpoint folder: as an rlinfra job (`rlinfra run`, its `train` step),
and directly on the head over SSH (`python -m rlinfra_node.verl_cpu.main_ppo` with the job's
overrides, the same Ray), so the ratio of the two comes from one run. Figures go to
bench/results/verl.json and verl.md. Needs root (local hosts).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import statistics
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
STEP = re.compile(r"(?m)\bstep:(\d+) - .*?timing_s/step:([0-9.]+)")


def cli(env: dict[str, str], *argv: str, timeout: float = 1800) -> str:
    result = subprocess.run(
        [RLINFRA, *argv], env=env, capture_output=True, text=True, timeout=timeout
    )
    if result.returncode != 0:
        raise RuntimeError(f"rlinfra {' '.join(argv)} failed:\n{result.stderr[-3000:]}")
    return result.stdout


def step_times(log: str) -> list[float]:
    return [float(t) for _, t in STEP.findall(log)]


# Waiting is done on the head by one shell over one SSH connection (a grep of the job's driver
# log, a pgrep of its runner), not by polling `rlinfra logs`: each of those starts a controller
# process, an SSH session and `ray job logs` on the head, CPU that a 2-core machine takes from
# the training it times.
DRIVER_LOG = "/tmp/ray/session_latest/logs/job-driver-{job}.log"


def wait_on_head(env: dict[str, str], name: str, script: str) -> None:
    cli(env, "exec", name, "--", script, timeout=3600)


def wait_first_step(env: dict[str, str], name: str, job: str) -> None:
    log = shlex.quote(DRIVER_LOG.format(job=job))
    wait_on_head(env, name, f"until grep -qs 'step:1 - ' {log}; do sleep 0.5; done")


def wait_job_end(env: dict[str, str], name: str, job: str) -> None:
    # "job_runne[r]": the pattern does not match this shell's own command line.
    runner = shlex.quote(f"job_runne[r] --spec /opt/rlinfra/jobs/{job}/")
    wait_on_head(
        env,
        name,
        f"until pgrep -f {runner} >/dev/null; do sleep 0.2; done; "
        f"while pgrep -f {runner} >/dev/null; do sleep 0.5; done",
    )


def job_log(env: dict[str, str], name: str, job: str) -> str:
    return cli(env, "logs", name, "--job", job)


def first_step_after_up(env: dict[str, str], name: str, nodes: int) -> dict[str, Any]:
    """`up` with its job; seconds until Verl's first step line, and the steps' own times."""
    start = time.monotonic()
    summary = json.loads(
        cli(
            env, "up", "--cluster", name, "--num-nodes", str(nodes), "--yes", "--no-check", "--json"
        )
    )
    up_s = time.monotonic() - start
    job = str(summary["job"])
    wait_first_step(env, name, job)
    first = time.monotonic() - start
    wait_job_end(env, name, job)
    times = step_times(job_log(env, name, job))
    return {
        "up_s": round(up_s, 1),
        "up_to_first_step_s": round(first, 1),
        "step_s": [round(t, 2) for t in times],
        "step_s_median": round(statistics.median(times), 2) if times else None,
    }


def overhead(env: dict[str, str], name: str) -> dict[str, Any]:
    """The same training from an empty checkpoint folder, as a job and by hand, on one host."""
    clear = "rm -rf /checkpoints/global_step_* /checkpoints/latest_checkpointed_iteration.txt"
    spec = json.loads((Path(env["RLINFRA_HOME"]) / "clusters" / name / "job.json").read_text())
    cli(env, "exec", name, "--", clear)
    start = time.monotonic()
    job = str(json.loads(cli(env, "run", name, "--json"))["submission_id"])
    wait_job_end(env, name, job)
    job_wall = time.monotonic() - start
    log = job_log(env, name, job)
    after = sum(
        float(s) for s in re.findall(r"job_runner: (?:merge|serve|upload) done in ([0-9.]+) s", log)
    )
    train = float(re.search(r"job_runner: train done in ([0-9.]+) s", log).group(1))  # type: ignore[union-attr]
    job_steps = step_times(log)
    work = f"/opt/rlinfra/jobs/{job}/work"
    cli(env, "exec", name, "--", clear)
    # By hand as one would on the head: the same launcher and overrides, from the job's folder,
    # which Ray ships to the workers as the job's working dir (rlinfra_node is in it).
    argv = [
        "/opt/rlinfra/venv/bin/python",
        *spec["entrypoint"][1:],
        f"++ray_kwargs.ray_init.runtime_env.working_dir={work}",
    ]
    start = time.monotonic()
    done = subprocess.run(
        [
            RLINFRA,
            "exec",
            name,
            "--",
            f"cd {shlex.quote(work)} && {shlex.join(argv)} >/tmp/direct.log 2>&1",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    direct = time.monotonic() - start
    direct_log = cli(env, "exec", name, "--", "cat /tmp/direct.log")
    if done.returncode != 0:
        raise RuntimeError(f"the direct run failed:\n{direct_log[-4000:]}")
    direct_steps = step_times(direct_log)
    job_training = job_wall - after
    return {
        "job_wall_s": round(job_wall, 1),
        "job_after_steps_s": round(after, 1),
        "job_train_step_s": round(train, 1),
        "job_without_after_steps_s": round(job_training, 1),
        "direct_s": round(direct, 1),
        "ratio_job_vs_direct": round(job_training / direct, 3),
        "ratio_train_step_vs_direct": round(train / direct, 3),
        "job_step_s": [round(t, 2) for t in job_steps],
        "direct_step_s": [round(t, 2) for t in direct_steps],
    }


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "# Verl on the local cloud (CPU mode)",
        "",
        f"Measured {results['date']} ({results['cpus']} CPUs), one run; package caches: "
        f"{results['caches']}.",
        "",
        "| hosts | up (s) | up -> first step (s) | s/step (median) | steps |",
        "|---|---|---|---|---|",
    ]
    for size, row in results["sizes"].items():
        lines.append(
            f"| {size} | {row['up_s']} | {row['up_to_first_step_s']} | {row['step_s_median']} | "
            f"{len(row['step_s'])} |"
        )
    over = results.get("overhead")
    if over:
        lines += [
            "",
            "rlinfra's overhead on 1 host (same Verl config, empty checkpoint folder):",
            f"- job (submit to end, less merge/serve): {over['job_without_after_steps_s']} s; "
            f"direct on the head: {over['direct_s']} s; ratio {over['ratio_job_vs_direct']} "
            "(target <= 1.10)",
            f"- the job's train step alone: {over['job_train_step_s']} s; ratio "
            f"{over['ratio_train_step_vs_direct']}",
            f"- Verl's own seconds per step: job {over['job_step_s']}, direct "
            f"{over['direct_step_s']}",
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,2")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/verl.py: needs root (local hosts)")
    work = Path(tempfile.mkdtemp(prefix="rlinfra-bench-verl-", dir="/var/tmp"))
    env = dict(os.environ)
    env.update(
        RLINFRA_HOME=str(work / "home"),
        RLINFRA_CACHE=os.environ.get("RLINFRA_TEST_CACHE", "/var/tmp/rlinfra-test-cache"),
        RLINFRA_QUIET="1",
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "cpus": os.cpu_count(),
        "sizes": {},
    }

    def save() -> None:
        # After each stage, so a later failure keeps what was measured.
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "verl.json").write_text(json.dumps(results, indent=2) + "\n")
        (RESULTS / "verl.md").write_text(markdown(results))

    try:
        cache = Path(env["RLINFRA_CACHE"])
        results["caches"] = "warm"
        if not any(cache.glob("wheelhouse/*/.complete")):
            # The first `up` on a machine downloads the wheelhouse and fills uv's cache; that is
            # not Verl's start-up, so a cluster without its job fills them before any timing.
            results["caches"] = "filled by an untimed up (--no-run) before the first size"
            name = f"bv-{uuid.uuid4().hex[:5]}"
            try:
                cli(env, "up", "--cluster", name, "--num-nodes", "1", "--yes", "--no-run")
            finally:
                subprocess.run(
                    [RLINFRA, "down", name, "--yes", "--delete-buckets"],
                    env=env,
                    capture_output=True,
                )
        for size in [int(n) for n in args.sizes.split(",")]:
            name = f"bv-{uuid.uuid4().hex[:5]}"
            try:
                results["sizes"][str(size)] = first_step_after_up(env, name, size)
                save()
                if size == 1:
                    results["overhead"] = overhead(env, name)
                    save()
            finally:
                subprocess.run(
                    [RLINFRA, "down", name, "--yes", "--delete-buckets"],
                    env=env,
                    capture_output=True,
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    save()
    sys.stdout.write(markdown(results))


if __name__ == "__main__":
    main()
