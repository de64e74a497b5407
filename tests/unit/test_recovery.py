"""rlinfra.ops.recovery's loop, over a scripted cluster: which failures it recovers from, what it
records, and when it gives up. The real loop on real hosts is tests/e2e/test_local_cluster.py's
test_run_recover_replaces_a_killed_worker_host_and_resumes."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from rlinfra.ops.recovery import Healed, Ops, describe, last_step, lost_in_log, run_with_recovery

LOST = "job_runner: node 1 (10.0.0.11) left the Ray cluster; stopping the step\n"


def steps(first: int, last: int) -> str:
    return "".join(f"step:{n} - timing_s/step:1.0\n" for n in range(first, last + 1))


class Cluster:
    """Jobs that end as scripted; heal/missing/checkpoint answers; a clock moved by the calls."""

    def __init__(self, jobs: list[tuple[str, str]], checkpoint: int | None = 4) -> None:
        self.jobs = list(jobs)
        self.submitted: list[str] = []
        self.healed = 0
        self.recorded: list[dict[str, Any]] = []
        self.missing: list[str] = []
        self.checkpoint = checkpoint
        self.time = 100.0

    def ops(self) -> Ops:
        return Ops(
            submit=self.submit,
            follow=self.follow,
            missing_nodes=lambda: list(self.missing),
            heal=self.heal,
            checkpoint_step=lambda: self.checkpoint,
            record=lambda entry: self.recorded.append({**entry, "seconds": dict(entry["seconds"])}),
            clock=lambda: self.time,
            now=lambda: dt.datetime(2026, 12, 5, 12, 0, tzinfo=dt.timezone.utc),
        )

    def submit(self) -> str:
        self.submitted.append(f"job-{len(self.submitted) + 1}")
        return self.submitted[-1]

    def follow(self, job: str, on_log: Callable[[str], None]) -> tuple[str, str]:
        state, log = self.jobs.pop(0)
        self.time += 7.0  # Verl's start, then its first step
        on_log(log)
        self.time += 30.0
        return state, log

    def heal(self) -> Healed:
        self.healed += 1
        self.time += 60.0
        return Healed(
            ["node c-1: its sshd (pid file /x) is not running"],
            [],
            {"terraform": 10.0, "ansible": 50.0, "ray_join": 8.0},
        )


def test_a_lost_node_is_healed_once_and_the_job_resumed() -> None:
    cluster = Cluster([("FAILED", steps(5, 7) + LOST), ("SUCCEEDED", steps(5, 12))])
    outcome = run_with_recovery(cluster.ops(), max_attempts=3)
    assert outcome.state == "SUCCEEDED" and outcome.reason is None
    assert outcome.jobs == ["job-1", "job-2"] and cluster.healed == 1
    (entry,) = outcome.recoveries
    assert entry["nodes"] == ["node 1 (10.0.0.11)"]
    assert entry["reason"] == "left the Ray cluster (job runner)"
    assert (entry["last_step"], entry["resumed_from_step"], entry["steps_lost"]) == (7, 4, 3)
    assert entry["resubmitted"] == "job-2"
    assert entry["seconds"] == {
        "terraform": 10.0,
        "ansible": 50.0,
        "ray_join": 8.0,
        "heal": 60.0,
        "verl_restart": 7.0,
        "total": 67.0,
    }
    # Recorded at once after the heal, again when resubmitted, and once the restart is known.
    assert [("resubmitted" in r, "verl_restart" in r["seconds"]) for r in cluster.recorded] == [
        (False, False),
        (True, False),
        (True, True),
    ]
    line = describe(entry)
    assert line.startswith("recovery at 2026-12-05T12:00:00+00:00: node 1 (10.0.0.11) left")
    assert "resumed from step 4, 3 step(s) lost; 67 s" in line
    assert "(terraform 10 s, ansible 50 s, ray join 8 s, verl restart 7 s)" in line


def test_a_node_missing_from_ray_counts_when_the_log_names_none() -> None:
    cluster = Cluster([("FAILED", steps(1, 2) + "NCCL error\n"), ("SUCCEEDED", steps(1, 4))])
    cluster.missing = ["c-1"]
    outcome = run_with_recovery(cluster.ops(), max_attempts=1)
    assert outcome.state == "SUCCEEDED"
    assert outcome.recoveries[0]["nodes"] == ["c-1"]
    assert outcome.recoveries[0]["reason"] == "missing from Ray after the job failed"


def test_a_job_that_fails_with_every_node_alive_is_not_retried() -> None:
    cluster = Cluster([("FAILED", steps(1, 2) + "Traceback: ValueError\n")])
    outcome = run_with_recovery(cluster.ops(), max_attempts=3)
    assert outcome.state == "FAILED" and cluster.healed == 0
    assert outcome.reason == "job job-1 ended FAILED with every node alive: not a lost node"


def test_it_gives_up_after_the_profiles_limit() -> None:
    lost = ("FAILED", steps(1, 1) + LOST)
    cluster = Cluster([lost, lost, lost])
    outcome = run_with_recovery(cluster.ops(), max_attempts=2)
    assert outcome.state == "FAILED" and cluster.healed == 2
    assert len(outcome.recoveries) == 2 and len(outcome.jobs) == 3
    assert outcome.reason == (
        "gave up after 2 recoveries (recovery.max_attempts is 2): job job-3 lost node 1 (10.0.0.11)"
    )
    nothing = Cluster([lost])
    assert run_with_recovery(nothing.ops(), max_attempts=0).reason.startswith(
        "gave up after 0 recoveries"
    )


def test_log_parsing() -> None:
    log = (
        "job_runner: node 1 (10.0.0.11), node 2 (10.0.0.12) left the Ray cluster; stopping\n"
        "job_runner: node 2 (10.0.0.12) left the Ray cluster; the step failed (1)\n"
    )
    assert lost_in_log(log) == ["node 1 (10.0.0.11)", "node 2 (10.0.0.12)"]
    assert last_step("(TaskRunner) step:3 - a:1\nstep:12 - b:2\n") == 12
    assert last_step("no steps") is None


def test_a_roles_seconds_span_its_tasks_on_every_host() -> None:
    from rlinfra.runners.ansible import _widen

    spans: dict[str, list[float]] = {}
    _widen(spans, "ray_cluster", "2026-12-05T12:00:00.000000", "2026-12-05T12:00:03.500000")
    _widen(spans, "ray_cluster", "2026-12-05T12:00:01.000000", "2026-12-05T12:00:09.000000")
    _widen(spans, "ray_cluster", None, "not a time")  # events without times change nothing
    (start, end) = spans["ray_cluster"]
    assert end - start == 9.0
