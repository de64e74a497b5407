"""`run --recover`: the recovery loop (rlinfra.ops.recovery) over a cluster's real operations:
follow the job, find lost nodes in Ray, heal with `up`, read the last checkpoint, record.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from rlinfra.deploy import require_cluster, update_record
from rlinfra.jobspec import JobSpec
from rlinfra.ops import jobs, recovery
from rlinfra.ops.prepare import Request, prepare
from rlinfra.ops.status import ray_state, training_progress
from rlinfra.ops.up import up as run_up
from rlinfra.plan import Plan


def run_recovering(
    cluster: str,
    request: Request,
    the_plan: Plan,
    spec: JobSpec,
    secrets: dict[str, str],
    to_stderr: bool,
) -> recovery.Outcome:
    """Submit, follow, heal and resubmit up to the profile's recovery.max_attempts times (the
    job's log goes to stderr with ``to_stderr``, keeping stdout for JSON)."""

    folder, _ = require_cluster(cluster)

    def follow(job: str, on_log: Any) -> tuple[str, str]:
        # The log as follow last read it: no second fetch at the end.
        seen = [""]

        def keep(text: str) -> None:
            seen[0] = text
            on_log(text)

        state = jobs.follow(cluster, job, on_log=keep, to_stderr=to_stderr)
        return state, seen[0]

    def missing_nodes() -> list[str]:
        _, record = require_cluster(cluster)
        state = ray_state(folder, list(record.hosts), record.dashboard_port)
        return list(state.get("missing_nodes") or []) if state.get("reachable") else []

    # The heal configures the nodes as the last `up` did: the run's --env is the job's alone.
    # (With it, every node's contract would change, and a new contract restarts the head's Ray,
    # and so every node and job of the cluster: seen in the recovery e2e.)
    heal_request = dataclasses.replace(
        request, overrides=dataclasses.replace(request.overrides, env={})
    )

    def heal() -> recovery.Healed:
        # `up` as it would run by hand, with the account's bucket names resolved.
        plan_now, _ = prepare(heal_request, os.environ, account="require")
        result = run_up(plan_now, secrets, run_check=False)
        return recovery.Healed(result.replaced, result.verify_problems, result.seconds)

    def checkpoint_step() -> int | None:
        _, record = require_cluster(cluster)
        step = training_progress(folder, record.hosts[0], [])["checkpoint_step"]
        return None if step is None else int(step)

    def record(entry: dict[str, Any]) -> None:
        _, current = require_cluster(cluster)
        kept = [r for r in current.recoveries if r.job != entry["job"]]
        update_record(folder, recoveries=[*kept, dict(entry)][-recovery.KEPT :])

    ops = recovery.Ops(
        submit=lambda: jobs.submit(cluster, spec, secrets).submission_id,
        follow=follow,
        missing_nodes=missing_nodes,
        heal=heal,
        checkpoint_step=checkpoint_step,
        record=record,
    )
    return recovery.run_with_recovery(ops, the_plan.profile.recovery.max_attempts)
