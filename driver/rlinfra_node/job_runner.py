"""The entrypoint of an rlinfra Ray job, on the head node: a profile's workload end to end.

    python -m rlinfra_node.job_runner --spec DIR/spec.json [--secrets DIR/secrets.env]

``spec.json`` is the driver's JobSpec (rlinfra.jobspec; it holds no secret). In order:

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


def secret_fingerprint(value: str) -> str:
    """``sha256:`` and the first 12 hex digits of the value's SHA-256: shows that a secret
    arrived (and which one), not what it is."""
    import hashlib

    return "sha256:" + hashlib.sha256(value.encode()).hexdigest()[:12]


def entrypoint(spec: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """The training command, with the spec's ``when_secret`` overrides for the secrets given
    (e.g. ``trainer.logger=[console,wandb]`` once WANDB_API_KEY is there)."""
    argv = list(spec["entrypoint"])
    for secret, override in spec.get("when_secret", []):
        if not env.get(secret):
            continue
        key = override.partition("=")[0] + "="
        argv = [override if arg.startswith(key) else arg for arg in argv]
        if override not in argv:
            argv.append(override)
    return argv


def plan_steps(
    spec: Mapping[str, Any], env: Mapping[str, str] | None = None
) -> list[tuple[str, list[str], str | None]]:
    """(name, argv, done marker) of every command, in the order they run."""
    steps: list[tuple[str, list[str], str | None]] = []
    for step in spec.get("data_steps", []):
        steps.append((step["name"], list(step["argv"]), step.get("done_marker")))
    for step in spec.get("probe_steps", []):
        steps.append((step["name"], list(step["argv"]), None))
    steps.append(("train", entrypoint(spec, env or {}), None))
    for step in spec.get("after_steps", []):
        steps.append((step["name"], list(step["argv"]), None))
    return steps


def run_job(
    spec: Mapping[str, Any],
    env: Mapping[str, str],
    run: Callable[[list[str], Mapping[str, str]], int],
    log: Callable[[str], None],
    train: Callable[[list[str], Mapping[str, str]], int] | None = None,
) -> int:
    """Run every step with ``run`` (the training step with ``train`` when given)."""
    for path, text in spec.get("files", []):
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        log(f"job_runner: wrote {target}")
    for secret, override in spec.get("when_secret", []):
        if env.get(secret):
            log(f"job_runner: {secret} is given: {override}")
    for name, argv, marker in plan_steps(spec, env):
        if marker and Path(marker).exists():
            log(f"job_runner: {name}: already done ({marker} exists), skipped")
            continue
        log(f"job_runner: {name}: {' '.join(argv)}")
        start = time.monotonic()
        code = (train or run)(argv, env) if name == "train" else run(argv, env)
        took = time.monotonic() - start
        if code != 0:
            log(f"job_runner: {name} failed with exit code {code} after {took:.1f} s")
            return code
        log(f"job_runner: {name} done in {took:.1f} s")
    return 0


def resolve(argv: list[str], python: str = sys.executable) -> list[str]:
    """The spec says ``python3``; steps run with this runner's interpreter (the node venv's)."""
    return [python, *argv[1:]] if argv and argv[0] == "python3" else list(argv)


# The node contract's JSON file (the node_env role writes it; `rlinfra.layout.CONTRACT`).
CONTRACT = Path("/opt/rlinfra/node.json")
# The contract's variables that name the cluster's members (node_env's
# node_env_membership_variables): a new member does not restart Ray, so the environment Ray's
# jobs inherit keeps the old ones; the contract's file has the new.
MEMBERSHIP = tuple(
    f"{prefix}_{name}" for prefix in ("RLINFRA", "SKYPILOT") for name in ("NODE_IPS", "NUM_NODES")
)


def contract_members(contract: Path = CONTRACT) -> dict[str, str]:
    """The membership variables as the node contract's file has them now ({} if unreadable)."""
    try:
        data = json.loads(contract.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {name: str(data[name]) for name in MEMBERSHIP if data.get(name)}


def with_current_members(env: Mapping[str, str], contract: Path = CONTRACT) -> dict[str, str]:
    """``env`` with the cluster's members from the contract's file, where it has them."""
    return {**env, **contract_members(contract)}


def contract_node_ips(env: Mapping[str, str], contract: Path = CONTRACT) -> list[str]:
    """The cluster's node IPs, head first: from the node contract's file, which `up` rewrites
    when a node is replaced, else from RLINFRA_NODE_IPS."""
    text = with_current_members(env, contract).get("RLINFRA_NODE_IPS", "")
    return [ip for ip in text.split("\n") if ip]


def node_label(ip: str, node_ips: Sequence[str]) -> str:
    """'node 1 (10.0.0.11)': the rank from RLINFRA_NODE_IPS (head first), when it is there."""
    return f"node {node_ips.index(ip)} ({ip})" if ip in node_ips else f"node {ip}"


def lost_nodes(before: Mapping[str, str], alive: Mapping[str, str]) -> list[str]:
    """IPs of the nodes (by Ray node id) alive in ``before`` and gone from ``alive``."""
    return sorted(ip for node_id, ip in before.items() if node_id not in alive)


def ray_alive_nodes() -> dict[str, str]:
    """Ray node id -> IP of every alive node of the cluster this job runs on."""
    import ray

    if not ray.is_initialized():
        ray.init(address="auto", log_to_driver=False, logging_level="ERROR")
    return {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive")}


class Watched:
    """Runs a step; stops it at once, naming the node, when a node leaves the cluster.

    A multi-node trainer whose worker node died can hang in a collective for a long time; the
    job fails within a few seconds instead, with the node named.
    """

    def __init__(
        self,
        nodes: Callable[[], Mapping[str, str]],
        log: Callable[[str], None],
        node_ips: Sequence[str],
        poll_s: float = 2.0,
        settle_s: float = 45.0,
    ) -> None:
        self.nodes = nodes
        self.log = log
        self.node_ips = list(node_ips)
        self.poll_s = poll_s
        self.settle_s = settle_s

    def _lost_after_failure(self, before: Mapping[str, str]) -> list[str]:
        deadline = time.monotonic() + self.settle_s
        while True:
            try:
                gone = lost_nodes(before, self.nodes())
            except Exception:  # the state API may blink
                gone = []
            if gone or time.monotonic() >= deadline:
                return gone
            time.sleep(self.poll_s)

    def __call__(self, argv: list[str], env: Mapping[str, str]) -> int:
        # The step starts first: the first look at the nodes connects to Ray (seconds), which
        # overlaps the trainer's own start instead of delaying it.
        proc = subprocess.Popen(resolve(argv), env=dict(env), start_new_session=True)
        before: dict[str, str] | None = None
        while True:
            if before is None:
                try:
                    before = dict(self.nodes())
                except Exception as exc:  # the state API may blink; the next poll asks again
                    self.log(f"job_runner: could not read the cluster's nodes: {exc}")
            try:
                code = proc.wait(timeout=self.poll_s)
            except subprocess.TimeoutExpired:
                pass
            else:
                # A step that failed because a node went names it too. Collectives notice a lost
                # peer within seconds, before Ray has marked its node dead: give Ray a moment.
                gone = self._lost_after_failure(before) if code != 0 and before else []
                if gone:
                    names = ", ".join(node_label(ip, self.node_ips) for ip in gone)
                    self.log(f"job_runner: {names} left the Ray cluster; the step failed ({code})")
                    return NODE_LOST
                return code
            if before is None:
                continue
            try:
                gone = lost_nodes(before, self.nodes())
            except Exception as exc:  # the state API may blink; the step goes on
                self.log(f"job_runner: could not read the cluster's nodes: {exc}")
                continue
            if gone:
                names = ", ".join(node_label(ip, self.node_ips) for ip in gone)
                self.log(f"job_runner: {names} left the Ray cluster; stopping the step")
                _stop(proc)
                return NODE_LOST


NODE_LOST = 75


def _stop(proc: subprocess.Popen[bytes]) -> None:
    import signal

    for sig, wait in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 15.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _run(argv: list[str], env: Mapping[str, str]) -> int:
    return subprocess.run(resolve(argv), env=dict(env), check=False).returncode


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="job_runner")
    parser.add_argument("--spec", type=Path, required=True)
    parser.add_argument("--secrets", type=Path, default=None)
    args = parser.parse_args(argv)
    env = with_current_members(os.environ)
    if args.secrets is not None and args.secrets.exists():
        secrets = read_secrets(args.secrets)
        env.update(secrets)
        print(f"job_runner: secrets given: {', '.join(sorted(secrets)) or 'none'}", flush=True)
        for name in sorted(secrets):
            # Proof that the value arrived intact, without showing it.
            print(f"job_runner: secret {name}: {secret_fingerprint(secrets[name])}", flush=True)
    spec = json.loads(args.spec.read_text())

    def log(text: str) -> None:
        print(text, flush=True)

    # Every worker's lines reach the job's log (Ray would fold lines that differ only in
    # numbers, such as each rank's node address, into one).
    env.setdefault("RAY_DEDUP_LOGS", "0")
    node_ips = contract_node_ips(env)
    return run_job(spec, env, _run, log, train=Watched(ray_alive_nodes, log, node_ips))


if __name__ == "__main__":
    sys.exit(main())
