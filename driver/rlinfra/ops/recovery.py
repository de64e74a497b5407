"""`rlinfra run CLUSTER --recover`: a job that loses a node is resumed on a healed cluster.

The loop submits the job and follows it. When the job ends FAILED because a node left (the job
runner's "node N (IP) left the Ray cluster" line, or a node Ray no longer counts), the cluster is
converged by `up` itself, with the nodes' settings of the last `up` (the run's --env is the job's
alone): Terraform replaces only what the cloud lost (the head and the other nodes stay, and so does
the head's Ray session, its jobs and services), Ansible configures the new node and it joins
Ray. The job is then submitted again and resumes from the latest checkpoint in the bucket
(``trainer.resume_mode=auto``). A job that fails with every node alive is the job's own failure:
it is not retried. After ``recovery.max_attempts`` recoveries (the profile's) the loop gives up.

Every recovery is recorded in the cluster's record (`status` lists them): when, which node and
why, the last step the failed job reached, the checkpoint step it resumed from, the steps lost,
and the seconds spent in Terraform, Ansible (of which the Ray join), and Verl's restart (from the
new submission to its first training step).
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlinfra import ui

LEFT_RE = re.compile(r"job_runner: (.+?) left the Ray cluster")
STEP_RE = re.compile(r"(?m)\bstep:(\d+) - ")
# Records keep this many recoveries (the newest).
KEPT = 50


def lost_in_log(log: str) -> list[str]:
    """The nodes the job runner saw leave ('node 1 (10.0.0.11)'), in order, once each."""
    seen: list[str] = []
    for found in LEFT_RE.findall(log):
        for name in found.split(", "):
            if name not in seen:
                seen.append(name)
    return seen


def last_step(log: str) -> int | None:
    """The last Verl step line of a job's log (None before the first)."""
    steps = STEP_RE.findall(log)
    return int(steps[-1]) if steps else None


@dataclass
class Healed:
    """What one `up` did for a recovery."""

    replaced: list[str]
    problems: list[str]
    seconds: dict[str, float]


@dataclass
class Ops:
    """What the loop needs of a cluster (the CLI passes the real ones; tests pass their own)."""

    submit: Callable[[], str]
    # Follows a job to its end: (final state, its log); calls the callback with the log so far.
    follow: Callable[[str, Callable[[str], None]], tuple[str, str]]
    missing_nodes: Callable[[], list[str]]
    heal: Callable[[], Healed]
    checkpoint_step: Callable[[], int | None]
    record: Callable[[dict[str, Any]], None]
    clock: Callable[[], float] = time.monotonic
    now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc)


@dataclass
class Outcome:
    state: str
    jobs: list[str] = field(default_factory=list)
    recoveries: list[dict[str, Any]] = field(default_factory=list)
    # Why the loop stopped short of SUCCEEDED (None when it succeeded).
    reason: str | None = None


def run_with_recovery(ops: Ops, max_attempts: int) -> Outcome:
    """Submit, follow, and recover from lost nodes up to ``max_attempts`` times."""
    outcome = Outcome(state="SUBMITTED")
    # The recovery whose resubmitted job is being followed (its restart not yet measured).
    current: dict[str, Any] | None = None
    while True:
        job = ops.submit()
        outcome.jobs.append(job)
        submitted_at = ops.clock()
        if current is not None:
            current["resubmitted"] = job
            ops.record(current)

        def watch(
            log: str, entry: dict[str, Any] | None = current, since: float = submitted_at
        ) -> None:
            if entry is None or "verl_restart" in entry["seconds"] or not STEP_RE.search(log):
                return
            restart = ops.clock() - since
            entry["seconds"]["verl_restart"] = round(restart, 1)
            entry["seconds"]["total"] = round(entry["seconds"]["heal"] + restart, 1)
            ops.record(entry)

        state, log = ops.follow(job, watch)
        outcome.state = state
        if state == "SUCCEEDED":
            return outcome
        lost = lost_in_log(log)
        why = "left the Ray cluster (job runner)"
        if not lost:
            lost = ops.missing_nodes()
            why = "missing from Ray after the job failed"
        if not lost:
            outcome.reason = f"job {job} ended {state} with every node alive: not a lost node"
            return outcome
        if len(outcome.recoveries) >= max_attempts:
            done = len(outcome.recoveries)
            outcome.reason = (
                f"gave up after {done} recover{'y' if done == 1 else 'ies'} "
                f"(recovery.max_attempts is {max_attempts}): job {job} lost {', '.join(lost)}"
            )
            return outcome
        reached = last_step(log)
        ui.info(
            f"recovery {len(outcome.recoveries) + 1}/{max_attempts}: {', '.join(lost)} {why}; "
            f"job {job} reached step {reached if reached is not None else 'none'}"
        )
        started = ops.clock()
        healed = ops.heal()
        healed_s = ops.clock() - started
        resumed = ops.checkpoint_step()
        steps_lost = None if reached is None else reached - (resumed or 0)
        ui.info(
            f"recovery: cluster healed in {healed_s:.0f} s"
            + (f" ({'; '.join(healed.replaced)})" if healed.replaced else "")
            + f"; resuming from checkpoint step {resumed if resumed is not None else 'none'}"
            + (f", {steps_lost} step(s) lost" if steps_lost is not None else "")
        )
        current = {
            "at": ops.now().isoformat(timespec="seconds"),
            "job": job,
            "nodes": lost,
            "reason": why,
            "replaced": healed.replaced,
            "problems": healed.problems[:5],
            "last_step": reached,
            "resumed_from_step": resumed,
            "steps_lost": steps_lost,
            "seconds": {
                **{key: round(value, 1) for key, value in healed.seconds.items()},
                "heal": round(healed_s, 1),
            },
        }
        outcome.recoveries.append(current)
        ops.record(current)


def describe(recovery: dict[str, Any]) -> str:
    """One line of `status` for a recorded recovery."""
    seconds = recovery.get("seconds") or {}
    parts = [
        f"{name} {seconds[key]:.0f} s"
        for key, name in (
            ("terraform", "terraform"),
            ("ansible", "ansible"),
            ("ray_join", "ray join"),
            ("verl_restart", "verl restart"),
        )
        if isinstance(seconds.get(key), int | float)
    ]
    steps = recovery.get("steps_lost")
    total = seconds.get("total")
    return (
        f"recovery at {recovery.get('at')}: {', '.join(recovery.get('nodes') or [])} "
        f"{recovery.get('reason')}; resumed from step {recovery.get('resumed_from_step')}"
        + (f", {steps} step(s) lost" if steps is not None else "")
        + (f"; {total:.0f} s" if isinstance(total, int | float) else "")
        + (f" ({', '.join(parts)})" if parts else "")
    )


def describe_notice(notice: dict[str, Any], now: float) -> str:
    """One line of `status` for a spot node's preemption notice (rlinfra_node.spot_watch)."""
    left = float(notice["deadline"]) - now
    when = f"goes in {left:.0f} s" if left > 0 else f"went {-left:.0f} s ago"
    return f"node {notice.get('node')}: preemption notice ({notice.get('action')}), {when}"
