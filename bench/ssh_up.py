"""`up` on the ssh cloud: 1 host against 3 existing hosts, warm package caches.

    python bench/ssh_up.py [--rounds 3]

The hosts exist before the timing: three local hosts (namespaced, each with its own sshd, /opt
and /tmp) made with `rlinfra up --infra-only` of the `local` profile, which installs nothing on
them. An `ssh` profile (the `local` profile's software, no workload, a local bucket, the hosts
sharing this machine's files) then lists their addresses and key. Each round brings up the first
host alone, then all three, and after each `up` runs `down --purge`, so every `up` starts from
hosts without rlinfra's files, as on machines a team hands over; the package caches on this
machine stay warm (an untimed round fills them first). Figures go to bench/results/ssh_up.json
and ssh_up.md. Needs root (local hosts).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
BIN = Path(sys.executable).parent
RLINFRA = str(BIN / "rlinfra")
SIZES = (1, 3)


def cli(env: dict[str, str], *argv: str, timeout: float = 1800) -> str:
    done = subprocess.run(
        [RLINFRA, *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        raise RuntimeError(f"rlinfra {' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def ssh_profile(home: Path, machines: str, work: Path) -> dict[str, Any]:
    """An ssh profile for the hosts of the local cluster ``machines``."""
    record = json.loads((home / "clusters" / machines / "record.json").read_text())
    base = yaml.safe_load((REPO / "profiles" / "local.yaml").read_text())
    keep = ("software", "network", "env")
    return {
        **{key: value for key, value in base.items() if key in keep},
        "description": "bench: existing hosts over SSH",
        "cloud": "ssh",
        "storage": [{"bucket": "bench-ssh", "mount_path": str(work / "ckpt"), "mode": "MOUNT"}],
        "ssh": {
            "identity_file": str(home / "clusters" / machines / "ssh" / "id_ed25519"),
            "shared_filesystem": True,
            "min_free_gb": 1,
            "hosts": [
                {"name": f"h{host['rank']}", "address": host["private_ip"]}
                for host in sorted(record["hosts"], key=lambda h: h["rank"])
            ],
        },
    }


def timed_up(env: dict[str, str], profile: Path, cluster: str, nodes: int) -> float:
    start = time.monotonic()
    cli(env, "up", "-p", str(profile), "-c", cluster, "-n", str(nodes), "--yes")
    took = time.monotonic() - start
    cli(env, "down", cluster, "--purge", "--yes")
    return took


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "# `up` on the ssh cloud: 1 and 3 existing hosts",
        "",
        f"Measured {results['date']} ({results['cpus']} CPUs), one run; warm package caches; "
        "each `up` on hosts without rlinfra's files (`down --purge` after each).",
        "",
        "| hosts | up (s), median | rounds |",
        "|---|---|---|",
    ]
    for size, row in results["sizes"].items():
        rounds = ", ".join(f"{s:.1f}" for s in row["rounds_s"])
        lines.append(f"| {size} | {row['median_s']:.1f} | {rounds} |")
    lines += [
        "",
        f"- 3 hosts / 1 host (medians): {results['ratio_3_vs_1']:.2f} (target <= 1.5)",
        "- per round: " + ", ".join(f"{r:.2f}" for r in results["ratio_per_round"]),
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/ssh_up.py: needs root (local hosts)")
    work = Path(tempfile.mkdtemp(prefix="rlinfra-bench-ssh-", dir="/var/tmp"))
    home = work / "home"
    env = dict(os.environ)
    env.update(
        RLINFRA_HOME=str(home),
        RLINFRA_CACHE=os.environ.get("RLINFRA_TEST_CACHE", "/var/tmp/rlinfra-test-cache"),
        RLINFRA_QUIET="1",
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    ident = uuid.uuid4().hex[:5]
    machines, cluster = f"bsm-{ident}", f"bss-{ident}"
    profile = work / "ssh.yaml"
    timings: dict[int, list[float]] = {size: [] for size in SIZES}
    try:
        cli(env, "up", "-c", machines, "-n", str(max(SIZES)), "--infra-only", "--yes")
        profile.write_text(yaml.safe_dump(ssh_profile(home, machines, work), sort_keys=False))
        timed_up(env, profile, cluster, max(SIZES))  # fills the caches; not counted
        for _ in range(args.rounds):
            for size in SIZES:
                timings[size].append(timed_up(env, profile, cluster, size))
    finally:
        subprocess.run(
            [RLINFRA, "down", cluster, "--purge", "--yes", "--delete-buckets"],
            env=env,
            capture_output=True,
            stdin=subprocess.DEVNULL,
        )
        subprocess.run(
            [RLINFRA, "down", machines, "--yes", "--delete-buckets"],
            env=env,
            capture_output=True,
            stdin=subprocess.DEVNULL,
        )
        shutil.rmtree(work, ignore_errors=True)
    one, three = timings[1], timings[3]
    results = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "cpus": os.cpu_count(),
        "sizes": {
            str(size): {"rounds_s": rounds, "median_s": statistics.median(rounds)}
            for size, rounds in timings.items()
        },
        "ratio_3_vs_1": statistics.median(three) / statistics.median(one),
        "ratio_per_round": [b / a for a, b in zip(one, three, strict=True)],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "ssh_up.json").write_text(json.dumps(results, indent=2) + "\n")
    (RESULTS / "ssh_up.md").write_text(markdown(results))
    sys.stdout.write(markdown(results))


if __name__ == "__main__":
    main()
