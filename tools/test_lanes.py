"""Run the test suite as lanes side by side, one pytest process each, and report them as one.

    python tools/test_lanes.py --lane NAME=PATH[,PATH...] [--lane ...] [-- PYTEST_ARGS...]

Each lane runs `python -m pytest -p no:cacheprovider -q PATHS` with a temporary root and a JUnit
report of its own, its output kept in a log. While they run, a line a minute says which lanes are
still going. At the end: each lane's output (in lane order), the slowest tests of all lanes, and
one closing line ``N passed, N failed, N skipped`` over every lane. The exit status is 0 only
when every lane passed.

Lanes do not collide: every testbed, subnet, namespace and cluster name in the tests is unique per
run, cache fills take a file lock, and each lane has its own pytest temporary root.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

SLOWEST = 25


@dataclass
class Lane:
    name: str
    paths: list[str]
    folder: Path
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    seconds: float = 0.0
    times: list[tuple[float, str]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def log(self) -> Path:
        return self.folder / "output.log"

    @property
    def junit(self) -> Path:
        return self.folder / "junit.xml"

    def start(self, extra: list[str]) -> None:
        argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *self.paths]
        argv += ["--basetemp", str(self.folder / "tmp"), "--junitxml", str(self.junit)]
        # legacy: the tests' record_property needs it (xunit2 warns, and warnings are errors).
        argv += ["-o", "junit_family=legacy", *extra]
        self.started = time.monotonic()
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)

    def read_report(self) -> None:
        counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
        if not self.junit.is_file():
            self.counts = counts
            return
        for case in ET.parse(self.junit).getroot().iter("testcase"):
            name = f"{case.get('classname', '')}::{case.get('name', '')}"
            self.times.append((float(case.get("time") or 0), name))
            kinds = {child.tag for child in case}
            if "failure" in kinds:
                counts["failed"] += 1
            elif "error" in kinds:
                counts["errors"] += 1
            elif "skipped" in kinds:
                counts["skipped"] += 1
            else:
                counts["passed"] += 1
        self.counts = counts


def parse_lane(text: str, root: Path) -> Lane:
    name, sep, paths = text.partition("=")
    if not sep or not name or not paths:
        raise SystemExit(f"--lane {text!r}: write NAME=PATH[,PATH...]")
    folder = root / name
    folder.mkdir()
    return Lane(name, [p for p in paths.split(",") if p], folder)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lane", action="append", required=True, help="NAME=PATH[,PATH...]")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments, after --")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="rlinfra-lanes-"))
    lanes = [parse_lane(text, root) for text in args.lane]
    began = time.monotonic()
    try:
        for lane in lanes:
            lane.start(args.pytest_args)
        named = [f"{lane.name} ({' '.join(lane.paths)})" for lane in lanes]
        print(f"lanes: {', '.join(named)}")
        sys.stdout.flush()
        last_note = time.monotonic()
        while any(lane.process and lane.process.poll() is None for lane in lanes):
            time.sleep(1)
            for lane in lanes:
                if lane.process and lane.process.poll() is not None and not lane.seconds:
                    lane.seconds = time.monotonic() - lane.started
                    state = "passed" if lane.process.returncode == 0 else "FAILED"
                    print(f"lane {lane.name}: {state} in {lane.seconds / 60:.1f} min")
                    sys.stdout.flush()
            if time.monotonic() - last_note >= 60:
                running = [lane.name for lane in lanes if lane.process.poll() is None]  # type: ignore[union-attr]
                minutes = (time.monotonic() - began) / 60
                print(f"... {minutes:.0f} min: still running: {', '.join(running)}")
                sys.stdout.flush()
                last_note = time.monotonic()
        for lane in lanes:
            if not lane.seconds:
                lane.seconds = time.monotonic() - lane.started
        wall = time.monotonic() - began
        for lane in lanes:
            lane.read_report()
            print(f"\n===== lane {lane.name}: {' '.join(lane.paths)} =====")
            sys.stdout.write(lane.log.read_text(errors="replace"))
        every = sorted((t for lane in lanes for t in lane.times), reverse=True)
        print(f"\n===== the {SLOWEST} slowest tests of all lanes (setup + call + teardown) =====")
        for seconds, name in every[:SLOWEST]:
            print(f"{seconds:8.1f}s  {name}")
        print("\n===== lanes =====")
        for lane in lanes:
            code = lane.process.returncode if lane.process else -1
            print(f"{lane.name:>12}: exit {code}, {lane.seconds / 60:.1f} min, {lane.counts}")
        print(f"{'wall':>12}: {wall / 60:.1f} min")
        total = {k: sum(lane.counts.get(k, 0) for lane in lanes) for k in lanes[0].counts}
        failed = total["failed"] + total["errors"]
        print(f"{total['passed']} passed, {failed} failed, {total['skipped']} skipped")
        ok = all(lane.process is not None and lane.process.returncode == 0 for lane in lanes)
        return 0 if ok else 1
    finally:
        for lane in lanes:
            if lane.process and lane.process.poll() is None:
                lane.process.terminate()
                try:
                    lane.process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    lane.process.kill()
        if os.environ.get("RLINFRA_KEEP_LANES") != "1":
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"lane logs and reports kept in {root}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
