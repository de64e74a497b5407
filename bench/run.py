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
    from rlinfra.context import Context, Controller
    from rlinfra.plan import make_plan
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
    for nodes in (1, 8, 64):
        profile, source = load_profile("local")
        profile, _ = apply_overrides(profile, Overrides(num_nodes=nodes), source)

        def once(profile: Any = profile, source: str = source) -> None:
            render(make_plan(profile, source), ctx)

        out[str(nodes)] = timed(once, repeat)
    out["ratio_64_vs_1"] = out["64"]["median_s"] / out["1"]["median_s"]
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


def bench_cluster(sizes: list[int]) -> dict[str, Any]:
    """`up` (cold and warm uv cache), the idempotent re-run and `down`, per node count.

    The wheelhouse (downloads from the package index) is built once before timing, so "cold"
    means an empty uv cache: every wheel is unpacked and installed on every node.
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
    out: dict[str, Any] = {}
    try:
        for nodes in sizes:
            row: dict[str, float] = {}
            for cache in ("cold", "warm"):
                name = f"bench-{uuid.uuid4().hex[:5]}"
                cache_dir = work / f"cache-{nodes}"
                if cache == "cold":
                    shutil.rmtree(cache_dir, ignore_errors=True)
                    cache_dir.mkdir(parents=True)
                    wheelhouse = shared_cache / "wheelhouse"
                    if wheelhouse.is_dir():
                        (cache_dir / "wheelhouse").symlink_to(wheelhouse)
                env["RLINFRA_CACHE"] = str(cache_dir)
                # The infrastructure only: the profile's training job is not part of `up` here.
                argv = ["--cluster", name, "--num-nodes", str(nodes), "--yes", "--no-run"]
                try:
                    row[f"up_{cache}_s"], row[f"up_{cache}_cpu_s"] = run_cli_cpu(env, "up", *argv)
                    if cache == "warm":
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
                    row[f"down_{cache}_s"] = run_cli(env, "down", name, "--yes", "--delete-buckets")
            row["rerun_vs_first_up"] = row["rerun_s"] / row["up_warm_s"]
            out[str(nodes)] = row
        if "1" in out and str(max(sizes)) in out and max(sizes) > 1:
            big = str(max(sizes))
            out[f"up_warm_ratio_{big}_vs_1"] = out[big]["up_warm_s"] / out["1"]["up_warm_s"]
            out[f"up_cold_ratio_{big}_vs_1"] = out[big]["up_cold_s"] / out["1"]["up_cold_s"]
            # The least wall time the big cluster's CPU work allows on this machine, against
            # the 1-host `up`: at or above 1.5, no amount of parallelism meets the target here.
            cpus = os.cpu_count() or 1
            out[f"up_warm_cpu_floor_{big}_vs_1"] = (
                out[big]["up_warm_cpu_s"] / cpus / out["1"]["up_warm_s"]
            )
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
        "| nodes | median ms |",
        "|---|---|",
    ]
    render = results["render"]
    for nodes in ("1", "8", "64"):
        lines.append(f"| {nodes} | {render[nodes]['median_s'] * 1e3:.1f} |")
    lines += [
        "",
        f"64 nodes / 1 node: {render['ratio_64_vs_1']:.2f}x",
        "",
        f"`rlinfra --help`: {results['help']['median_s'] * 1e3:.0f} ms (median)",
        "",
    ]
    cluster = results.get("cluster")
    if isinstance(cluster, dict):
        lines += [
            "## local cloud (seconds)",
            "",
            "| nodes | up (cold uv cache) | up (warm) | CPU-s (warm up) | re-run | re-run / up "
            "| heal | down |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for key, row in cluster.items():
            if isinstance(row, dict):
                lines.append(
                    f"| {key} | {row['up_cold_s']:.1f} | {row['up_warm_s']:.1f} | "
                    f"{row['up_warm_cpu_s']:.1f} | "
                    f"{row['rerun_s']:.1f} | {row['rerun_vs_first_up']:.2f} | "
                    f"{row['heal_s']:.1f} | {row['down_warm_s']:.1f} |"
                )
        lines.append("")
        for key, value in cluster.items():
            if not isinstance(value, dict):
                lines.append(f"- {key}: {value:.2f}")
        lines += [
            "",
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
        results["cluster"] = bench_cluster([int(n) for n in args.sizes.split(",")])
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (RESULTS / "results.md").write_text(markdown(results))
    sys.stdout.write(markdown(results))


if __name__ == "__main__":
    main()
