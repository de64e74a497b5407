"""The test suite's wall time: `make check` and `make test`, and the slowest tests.

    python bench/test_suite.py run [--label after]          # times `make check` and `make test`
    python bench/test_suite.py log LABEL FILE [--commit C]  # reads a finished run's output

`run` times both targets in this tree (the venvs already made, so setup is not counted) and reads
the lanes' report. `log` reads the output of an earlier `make test` or `.ci/run` (one pytest
process or two lanes), so a run made before this script existed (the one-process suite) is
recorded from its log: wall time, tests passed, and the slowest tests. Figures are merged into
bench/results/test_suite.json by label and written out as test_suite.md. Run them one after the
other on an idle machine: the two lanes share its 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
JSON = RESULTS / "test_suite.json"
MD = RESULTS / "test_suite.md"

# pytest's `--durations` lines and the lanes' slowest list.
PYTEST_SLOW = re.compile(r"^\s*(\d+\.\d+)s (call|setup|teardown)\s+(\S+)")
LANES_SLOW = re.compile(r"^\s*(\d+\.\d+)s\s{2}(\S+)$")
PYTEST_TOTAL = re.compile(r"(\d+) passed(?:, (\d+) skipped)?.* in (\d+\.\d+)s")
LANES_TOTAL = re.compile(r"^(\d+) passed, (\d+) failed, (\d+) skipped$")
LANES_WALL = re.compile(r"^\s+wall: (\d+\.\d+) min$")
LANE_LINE = re.compile(r"^\s+(\w+): exit (-?\d+), (\d+\.\d+) min, (.*)$")
CI_WALL = re.compile(r"^rc=(\d+) wall=(\d+)$")


def read_log(text: str) -> dict[str, Any]:
    """Wall time, counts and the slowest tests of one run's output."""
    figures: dict[str, Any] = {"slowest": []}
    lines = text.splitlines()
    for line in lines:
        if found := LANES_SLOW.match(line):
            figures["slowest"].append([float(found.group(1)), found.group(2)])
        elif found := PYTEST_SLOW.match(line):
            figures["slowest"].append(
                [float(found.group(1)), f"{found.group(3)} ({found.group(2)})"]
            )
        if found := LANES_TOTAL.match(line):
            figures.update(passed=int(found.group(1)), failed=int(found.group(2)))
            figures["skipped"] = int(found.group(3))
        if found := LANES_WALL.match(line):
            figures["pytest_wall_s"] = round(float(found.group(1)) * 60, 1)
        if found := LANE_LINE.match(line):
            figures.setdefault("lanes", {})[found.group(1)] = {
                "exit": int(found.group(2)),
                "minutes": float(found.group(3)),
            }
        if found := CI_WALL.match(line):
            figures["ci_run_wall_s"] = int(found.group(2))
    if "pytest_wall_s" not in figures:
        for line in lines:
            if (found := PYTEST_TOTAL.search(line)) and "lanes" not in figures:
                figures.update(passed=int(found.group(1)), skipped=int(found.group(2) or 0))
                figures["failed"] = 0
                figures["pytest_wall_s"] = float(found.group(3))
    figures["slowest"] = sorted(figures["slowest"], reverse=True)[:10]
    return figures


def timed(argv: list[str]) -> tuple[float, str, int]:
    started = time.monotonic()
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    return time.monotonic() - started, done.stdout + done.stderr, done.returncode


def commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True)
    return out.stdout.decode().strip()


def save(label: str, figures: dict[str, Any]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    data = json.loads(JSON.read_text()) if JSON.is_file() else {}
    data[label] = {
        **figures,
        "measured": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
    }
    JSON.write_text(json.dumps(data, indent=2) + "\n")
    write_markdown(data)


def minutes(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 60:.1f}"


def write_markdown(data: dict[str, Any]) -> None:
    out = ["# The test suite's wall time", ""]
    out += ["| run | commit | `make test` (min) | `.ci/run` (min) | `make check` (min) | tests |"]
    out += ["|---|---|---|---|---|---|"]
    for label, run in data.items():
        tests = f"{run.get('passed', '?')} passed, {run.get('skipped', '?')} skipped"
        out.append(
            f"| {label} | {run.get('commit', '')} | {minutes(run.get('pytest_wall_s'))} "
            f"| {minutes(run.get('ci_run_wall_s'))} | {minutes(run.get('check_wall_s'))} "
            f"| {tests} |"
        )
    labels = list(data)
    if len(labels) >= 2 and all("pytest_wall_s" in data[k] for k in labels[:2]):
        first, last = data[labels[0]]["pytest_wall_s"], data[labels[-1]]["pytest_wall_s"]
        out += ["", f"- {labels[-1]} / {labels[0]}: {last / first:.2f} of the wall time"]
    for label, run in data.items():
        if run.get("lanes"):
            lanes = ", ".join(f"{k} {v['minutes']:.1f} min" for k, v in run["lanes"].items())
            out += [f"- {label}: lanes {lanes}"]
        out += ["", f"Ten slowest tests, {label} (measured {run.get('measured', '')}):", ""]
        out += [f"- {seconds:.1f} s {name}" for seconds, name in run.get("slowest", [])]
    # Notes written by hand below the figures stay.
    kept = MD.read_text().partition("\n## Notes")[2] if MD.is_file() else ""
    MD.write_text("\n".join(out) + "\n" + (f"\n## Notes{kept}" if kept else ""))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    run = sub.add_parser("run", help="time `make check` and `make test` here")
    run.add_argument("--label", default="now")
    log = sub.add_parser("log", help="read a finished run's output")
    log.add_argument("label")
    log.add_argument("file", type=Path)
    log.add_argument("--commit", default="")
    log.add_argument("--check-log", type=Path, help="a `make check` run's output, with its time")
    args = parser.parse_args(argv)
    if args.mode == "log":
        figures = read_log(args.file.read_text(errors="replace"))
        figures["commit"] = args.commit
        save(args.label, figures)
        return 0
    check_s, _, check_rc = timed(["make", "check"])
    test_s, output, test_rc = timed(["make", "test"])
    figures = read_log(output)
    figures.update(
        commit=commit(), check_wall_s=round(check_s, 1), make_test_wall_s=round(test_s, 1)
    )
    figures.update(check_exit=check_rc, test_exit=test_rc)
    save(args.label, figures)
    return 0 if check_rc == test_rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
