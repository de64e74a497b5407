"""The entrypoint of an rlinfra Ray job, on the head node: a profile's workload end to end.

    python -m rlinfra_node.job_runner --spec DIR/spec.json [--secrets DIR/secrets.env]

``spec.json`` is the driver's JobSpec (rlinfra.workloads.spec; it holds no secret). In order:

1. secrets: ``secrets.env`` (``NAME=VALUE`` lines, hex-free of newlines, mode 0600) is read into
   this process's environment and deleted at once, so the values live only in the environment
   of this job's processes: never in arguments, job metadata or files left behind;
2. files: the spec's files (e.g. the search tool config) are written;
3. data steps: each skipped when its done marker already exists (data in the bucket is reused);
4. probes: a service the job needs must answer, else the run fails;
5. the training entrypoint;
6. after steps (merge, optional Hub upload).

Each step's command and outcome are printed (they are the job's logs); the first failing step
fails the job with its exit code.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any


def read_secrets(path: Path) -> dict[str, str]:
    """``NAME=VALUE`` lines; the file is removed once read."""
    values: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8")
    finally:
        path.unlink(missing_ok=True)
    for line in text.splitlines():
        if not line.strip():
            continue
        name, sep, value = line.partition("=")
        if not sep or not name.isidentifier():
            raise SystemExit(f"job_runner: {path}: a line is not NAME=VALUE")
        values[name] = value
    return values


def plan_steps(spec: Mapping[str, Any]) -> list[tuple[str, list[str], str | None]]:
    """(name, argv, done marker) of every command, in the order they run."""
    steps: list[tuple[str, list[str], str | None]] = []
    for step in spec.get("data_steps", []):
        steps.append((step["name"], list(step["argv"]), step.get("done_marker")))
    for step in spec.get("probe_steps", []):
        steps.append((step["name"], list(step["argv"]), None))
    steps.append(("train", list(spec["entrypoint"]), None))
    for step in spec.get("after_steps", []):
        steps.append((step["name"], list(step["argv"]), None))
    return steps


def run_job(
    spec: Mapping[str, Any],
    env: Mapping[str, str],
    run: Callable[[list[str], Mapping[str, str]], int],
    log: Callable[[str], None],
) -> int:
    for path, text in spec.get("files", []):
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        log(f"job_runner: wrote {target}")
    for name, argv, marker in plan_steps(spec):
        if marker and Path(marker).exists():
            log(f"job_runner: {name}: already done ({marker} exists), skipped")
            continue
        log(f"job_runner: {name}: {' '.join(argv)}")
        start = time.monotonic()
        code = run(argv, env)
        took = time.monotonic() - start
        if code != 0:
            log(f"job_runner: {name} failed with exit code {code} after {took:.1f} s")
            return code
        log(f"job_runner: {name} done in {took:.1f} s")
    return 0


def resolve(argv: list[str], python: str = sys.executable) -> list[str]:
    """The spec says ``python3``; steps run with this runner's interpreter (the node venv's)."""
    return [python, *argv[1:]] if argv and argv[0] == "python3" else list(argv)


def _run(argv: list[str], env: Mapping[str, str]) -> int:
    return subprocess.run(resolve(argv), env=dict(env), check=False).returncode


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="job_runner")
    parser.add_argument("--spec", type=Path, required=True)
    parser.add_argument("--secrets", type=Path, default=None)
    args = parser.parse_args(argv)
    env = dict(os.environ)
    if args.secrets is not None and args.secrets.exists():
        secrets = read_secrets(args.secrets)
        env.update(secrets)
        print(f"job_runner: secrets given: {', '.join(sorted(secrets)) or 'none'}", flush=True)
    spec = json.loads(args.spec.read_text())
    return run_job(spec, env, _run, lambda text: print(text, flush=True))


if __name__ == "__main__":
    sys.exit(main())
