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


def first_step_after_up(env: dict[str, str], name: str, nodes: int) -> dict[str, Any]:
    """`up` with its job; seconds until Verl's first step line, and the steps' own times."""
    start = time.monotonic()
    proc = subprocess.Popen(
        [RLINFRA, "up", "--cluster", name, "--num-nodes", str(nodes), "--yes", "--no-check"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    _, err = proc.communicate(timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"up failed:\n{err[-3000:]}")
    up_s = time.monotonic() - start
    first = None
    while first is None and time.monotonic() - start < 3600:
        log = subprocess.run(
            [RLINFRA, "logs", name], env=env, capture_output=True, text=True
        ).stdout
        if re.search(r"(?m)\bstep:1 - ", log):
            first = time.monotonic() - start
        else:
            time.sleep(1)
    log = cli(env, "logs", name, "--follow", timeout=3600)
    times = step_times(log)
    return {
        "up_s": round(up_s, 1),
        "up_to_first_step_s": round(first or float("nan"), 1),
        "step_s": times,
        "step_s_median": sorted(times)[len(times) // 2] if times else None,
    }


def overhead(env: dict[str, str], name: str) -> dict[str, Any]:
    """The same training from an empty checkpoint folder, as a job and by hand, on one host."""
    clear = "rm -rf /checkpoints/global_step_* /checkpoints/latest_checkpointed_iteration.txt"
    spec = json.loads((Path(env["RLINFRA_HOME"]) / "clusters" / name / "job.json").read_text())
    cli(env, "exec", name, "--", clear)
    start = time.monotonic()
    submitted = json.loads(cli(env, "run", name, "--json"))
    log = cli(env, "logs", name, "--job", submitted["submission_id"], "--follow", timeout=3600)
    job_wall = time.monotonic() - start
    after = sum(
        float(s) for s in re.findall(r"job_runner: (?:merge|serve|upload) done in ([0-9.]+) s", log)
    )
    train = float(re.search(r"job_runner: train done in ([0-9.]+) s", log).group(1))  # type: ignore[union-attr]
    work = shlex.quote(f"/opt/rlinfra/jobs/{submitted['submission_id']}/work")
    cli(env, "exec", name, "--", clear)
    argv = ["/opt/rlinfra/venv/bin/python", *spec["entrypoint"][1:]]
    start = time.monotonic()
    cli(env, "exec", name, "--", f"cd {work} && {shlex.join(argv)} >/dev/null 2>&1")
    direct = time.monotonic() - start
    job_training = job_wall - after
    return {
        "job_wall_s": round(job_wall, 1),
        "job_after_steps_s": round(after, 1),
        "job_train_step_s": round(train, 1),
        "job_without_after_steps_s": round(job_training, 1),
        "direct_s": round(direct, 1),
        "ratio_job_vs_direct": round(job_training / direct, 3),
        "ratio_train_step_vs_direct": round(train / direct, 3),
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
