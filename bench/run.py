"""rlinfra benchmarks: render cost, CLI start-up, and `up`/re-run/`down` on the local cloud.

Writes bench/results/results.json and results.md. Every ratio is computed from figures measured
in this one run, since these machines are noisy. The local-cloud part needs root and is skipped
(and says so) without it.

    python bench/run.py [--quick] [--skip-cluster] [--sizes 1,2,3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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


def timed(fn: Any, repeat: int) -> dict[str, float]:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return {"median_s": statistics.median(samples), "min_s": min(samples), "runs": repeat}


def bench_render(repeat: int) -> dict[str, Any]:
    from rlinfra.clouds.planning import make_plan
    from rlinfra.context import Context, Controller
    from rlinfra.profile import Overrides, apply_overrides, load_profile
    from rlinfra.render import render

    ctx = Context(
        deployment_dir=Path("/srv/bench"),
        home=Path("/srv"),
        cache=Path("/srv/cache"),
        ssh_public_key="ssh-ed25519 AAAA bench",
        task_id="bench",
        controller=Controller("/usr/bin/uv", "/usr/bin/python3", None),
    )
    out: dict[str, Any] = {}
    # Per cloud: its built-in profile (h100x2 lists aws and gcp; aws is planned here).
    for cloud, name in (("local", "local"), ("aws", "h100x2"), ("gcp", "h100x8-gcp")):
        rows: dict[str, Any] = {}
        for nodes in (1, 8, 64):
            profile, source = load_profile(name)
            overrides = Overrides(num_nodes=nodes, cloud=cloud if cloud == "aws" else None)
            profile, _ = apply_overrides(profile, overrides, source)

            def once(profile: Any = profile, source: str = source) -> None:
                render(make_plan(profile, source), ctx)

            rows[str(nodes)] = timed(once, repeat)
        rows["ratio_64_vs_1"] = rows["64"]["median_s"] / rows["1"]["median_s"]
        out[cloud] = rows
    return out


def bench_help(repeat: int) -> dict[str, Any]:
    def once() -> None:
        subprocess.run([RLINFRA, "--help"], capture_output=True, check=True)

    return timed(once, repeat)


def run_cli(env: dict[str, str], *argv: str) -> float:
    start = time.perf_counter()
    result = subprocess.run([RLINFRA, *argv], env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise RuntimeError(f"rlinfra {' '.join(argv)} failed:\n{result.stderr[-2000:]}")
    return elapsed


def machine_cpu_s() -> float:
    """CPU seconds this machine has spent busy (every CPU, every process), from /proc/stat."""
    with open("/proc/stat", encoding="ascii") as handle:
        fields = [int(v) for v in handle.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal ...: all but idle and iowait.
    busy = sum(fields[:3]) + sum(fields[5:8])
    return busy / os.sysconf("SC_CLK_TCK")


def run_cli_cpu(env: dict[str, str], *argv: str) -> tuple[float, float]:
    """Wall time and the machine's busy CPU seconds meanwhile (local hosts run on this machine:
    their sshd sessions, Ansible modules and Ray processes are not children of this one)."""
    before = machine_cpu_s()
    elapsed = run_cli(env, *argv)
    return elapsed, machine_cpu_s() - before


def bench_cluster(sizes: list[int], warm_rounds: int) -> dict[str, Any]:
    """`up` (cold and warm uv cache), the idempotent re-run and `down`, per node count.

    The wheelhouse (downloads from the package index) is built once before timing, so "cold"
    means an empty uv cache: every wheel is unpacked and installed. The warm `up` runs
    `warm_rounds` times; each round takes every size in turn, so that a slow spell of this
    machine falls on all sizes alike, and the medians count.
    """
    # Not under /tmp: every local host has its own /tmp and could not see the wheelhouse there.
    work = Path(tempfile.mkdtemp(prefix="rlinfra-bench-", dir="/var/tmp"))
    shared_cache = Path(os.environ.get("RLINFRA_TEST_CACHE", "/var/tmp/rlinfra-test-cache"))
    env = dict(os.environ)
    env.update(
        RLINFRA_HOME=str(work / "home"),
        RLINFRA_QUIET="1",
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    env.pop("TF_CLI_CONFIG_FILE", None)
    rows: dict[int, dict[str, Any]] = {
        n: {"up_warm_runs_s": [], "up_warm_cpu_runs_s": []} for n in sizes
    }

    def up_argv(name: str, nodes: int) -> list[str]:
        # The infrastructure only: the profile's training job is not part of `up` here.
        return ["--cluster", name, "--num-nodes", str(nodes), "--yes", "--no-run"]

    try:
        for nodes in sizes:
            cache_dir = work / f"cache-{nodes}"
            cache_dir.mkdir(parents=True)
            wheelhouse = shared_cache / "wheelhouse"
            if wheelhouse.is_dir():
                (cache_dir / "wheelhouse").symlink_to(wheelhouse)
            env["RLINFRA_CACHE"] = str(cache_dir)
            name = f"bench-{uuid.uuid4().hex[:5]}"
            try:
                rows[nodes]["up_cold_s"], _ = run_cli_cpu(env, "up", *up_argv(name, nodes))
            finally:
                rows[nodes]["down_cold_s"] = run_cli(env, "down", name, "--yes", "--delete-buckets")
        for round_ in range(warm_rounds):
            last = round_ == warm_rounds - 1
            for nodes in sizes:
                row = rows[nodes]
                env["RLINFRA_CACHE"] = str(work / f"cache-{nodes}")
                name = f"bench-{uuid.uuid4().hex[:5]}"
                argv = up_argv(name, nodes)
                try:
                    wall, cpu = run_cli_cpu(env, "up", *argv)
                    row["up_warm_runs_s"].append(wall)
                    row["up_warm_cpu_runs_s"].append(cpu)
                    if last:
                        # Unchanged: the nodes are verified, Ansible is skipped (median of 3).
                        reruns = sorted(run_cli(env, "up", *argv) for _ in range(3))
                        row["rerun_s"] = reruns[1]
                        # Drifted: Ray stopped on the last node; `up` finds it and re-applies.
                        run_cli(
                            env,
                            "exec",
                            name,
                            "--node",
                            str(nodes - 1),
                            "--",
                            "/opt/rlinfra/bin/rlinfra-ray-node stop >/dev/null",
                        )
                        row["heal_s"] = run_cli(env, "up", *argv)
                finally:
                    down = run_cli(env, "down", name, "--yes", "--delete-buckets")
                    if last:
                        row["down_warm_s"] = down
        out: dict[str, Any] = {}
        for nodes, row in rows.items():
            row["up_warm_s"] = statistics.median(row["up_warm_runs_s"])
            row["up_warm_cpu_s"] = statistics.median(row["up_warm_cpu_runs_s"])
            row["rerun_vs_first_up"] = row["rerun_s"] / row["up_warm_s"]
            out[str(nodes)] = row
        big = max(sizes)
        if 1 in rows and big > 1:
            one, many = rows[1], rows[big]
            out[f"up_warm_ratio_{big}_vs_1"] = many["up_warm_s"] / one["up_warm_s"]
            out[f"up_cold_ratio_{big}_vs_1"] = many["up_cold_s"] / one["up_cold_s"]
            # Each round's own ratio: the spread the machine's noise gives a single pair.
            out[f"up_warm_ratio_{big}_vs_1_per_round"] = [
                b / a for a, b in zip(one["up_warm_runs_s"], many["up_warm_runs_s"], strict=True)
            ]
            # The least wall time the big cluster's CPU work allows on this machine, against
            # the 1-host `up`: at or above 1.5, no amount of parallelism meets the target here.
            cpus = os.cpu_count() or 1
            out[f"up_warm_cpu_floor_{big}_vs_1"] = many["up_warm_cpu_s"] / cpus / one["up_warm_s"]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "# rlinfra benchmark results",
        "",
        f"Measured {results['date']} on {results['machine']} ({results['cpus']} CPUs).",
        "All ratios come from this one run.",
        "",
        "## render (pure profile -> files)",
        "",
        "| cloud | 1 node ms | 8 nodes ms | 64 nodes ms | 64 / 1 |",
        "|---|---|---|---|---|",
    ]
    for cloud, render in results["render"].items():
        cells = " | ".join(f"{render[n]['median_s'] * 1e3:.1f}" for n in ("1", "8", "64"))
        lines.append(f"| {cloud} | {cells} | {render['ratio_64_vs_1']:.2f}x |")
    lines += [
        "",
        f"`rlinfra --help`: {results['help']['median_s'] * 1e3:.0f} ms (median)",
        "",
    ]
    cluster = results.get("cluster")
    if isinstance(cluster, dict):
        lines += [
            "## local cloud (seconds)",
            "",
            "| nodes | up (cold uv cache) | up (warm, median) | warm runs | CPU-s (warm up) "
            "| re-run | re-run / up | heal | down |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for key, row in cluster.items():
            if isinstance(row, dict):
                runs = ", ".join(f"{v:.1f}" for v in row["up_warm_runs_s"])
                lines.append(
                    f"| {key} | {row['up_cold_s']:.1f} | {row['up_warm_s']:.1f} | {runs} | "
                    f"{row['up_warm_cpu_s']:.1f} | "
                    f"{row['rerun_s']:.1f} | {row['rerun_vs_first_up']:.2f} | "
                    f"{row['heal_s']:.1f} | {row['down_warm_s']:.1f} |"
                )
        lines.append("")
        for key, value in cluster.items():
            if isinstance(value, list):
                lines.append(f"- {key}: {', '.join(f'{v:.2f}' for v in value)}")
            elif not isinstance(value, dict):
                lines.append(f"- {key}: {value:.2f}")
        lines += [
            "",
            "up (warm): the median of the rounds; each round brings up every size in turn.",
            "re-run: an unchanged `up` (median of 3): Terraform plans, one SSH check per node,",
            "Ansible skipped. heal: `up` after Ray was stopped on the last node (the check finds",
            "it, the playbook runs). CPU-s: busy CPU seconds of the whole machine during the",
            "warm `up` (controller, sshd sessions, Ansible modules and Ray on the hosts).",
            "up_warm_cpu_floor: that CPU work spread over every CPU here, against the 1-host `up`.",
            "",
            "Targets: re-run <= 0.15 x first up; 3 hosts <= 1.5 x 1 host.",
        ]
    else:
        lines += ["## local cloud", "", f"not measured: {cluster}"]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--skip-cluster", action="store_true", help="no local-cloud runs")
    parser.add_argument("--sizes", default="1,2,3", help="node counts for `up`")
    args = parser.parse_args()
    repeat = 3 if args.quick else 15
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": platform.platform(),
        "cpus": os.cpu_count(),
        "render": bench_render(repeat),
        "help": bench_help(max(3, repeat // 3)),
    }
    if args.skip_cluster:
        results["cluster"] = "skipped (--skip-cluster)"
    elif os.geteuid() != 0:
        results["cluster"] = "skipped (needs root)"
    else:
        results["cluster"] = bench_cluster(
            [int(n) for n in args.sizes.split(",")], warm_rounds=3 if args.quick else 5
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (RESULTS / "results.md").write_text(markdown(results))
    sys.stdout.write(markdown(results))


if __name__ == "__main__":
    main()
