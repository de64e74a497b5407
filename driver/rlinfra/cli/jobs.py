"""Commands on a cluster's jobs: run (and run --recover), logs."""

from __future__ import annotations

import dataclasses
import os
from typing import Annotated, Any

import typer

from rlinfra import ui
from rlinfra.cli.common import ClusterArg, EnvOpt, JsonOpt, SecretOpt, make_request, print_json
from rlinfra.errors import UsageError


def run(
    cluster: ClusterArg,
    env: EnvOpt = None,
    secret: SecretOpt = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Stream the job's log until it ends.")
    ] = False,
    recover: Annotated[
        bool,
        typer.Option(
            "--recover",
            help="Follow the job; when it fails because a node was lost, heal the cluster "
            "(replace only that node), resubmit and resume from the last checkpoint, up to the "
            "profile's recovery.max_attempts times.",
        ),
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Submit the profile's workload to a running cluster as a Ray job (no re-provisioning).

    `--env NAME=VALUE` changes the workload's variables for this run only (e.g. TOTAL_EPOCHS);
    the job resumes from the latest checkpoint in the bucket. With --recover, lost nodes are
    replaced and the job resumed until it succeeds; `status` lists every recovery.
    """
    from rlinfra.deploy import require_cluster
    from rlinfra.jobspec import job_spec
    from rlinfra.ops import jobs
    from rlinfra.ops.prepare import prepare, report_overrides

    _, record = require_cluster(cluster)
    request = make_request(None, cluster, None, env, secret, None)
    if record.resolved_profile is not None:
        # The profile as `up` resolved it (its --num-nodes, --env, ...), not the file today.
        request = dataclasses.replace(request, resolved=record.resolved_profile)
        the_plan, secrets = prepare(request, os.environ)
    else:  # a cluster made before records kept the profile
        the_plan, secrets = prepare(request, os.environ)
        if record.num_nodes not in (None, the_plan.num_nodes):
            # The cluster was made with --num-nodes: the job runs on the nodes it has.
            the_plan, secrets = prepare(
                make_request(None, cluster, record.num_nodes, env, secret, None), os.environ
            )
    if the_plan.profile.workload is None:
        raise UsageError(
            f"{the_plan.source}: workload: the profile of {cluster!r} has no workload to run"
        )
    report_overrides(the_plan)
    spec = job_spec(the_plan)
    spec.refuse_unset()
    if recover:
        _run_recovering(cluster, request, the_plan, spec, secrets, json_out)
        return
    submitted = jobs.submit(cluster, spec, secrets)
    state = (
        jobs.follow(cluster, submitted.submission_id, to_stderr=json_out) if follow else "SUBMITTED"
    )
    if json_out:
        print_json({"submission_id": submitted.submission_id, "status": state})
    else:
        ui.info(f"job {submitted.submission_id}: {state}")
        if not follow:
            ui.info(f"follow it: rlinfra logs {cluster} --follow")
    if state in ("FAILED", "STOPPED"):
        raise typer.Exit(1)


def _run_recovering(
    cluster: str,
    request: Any,
    the_plan: Any,
    spec: Any,
    secrets: dict[str, str],
    json_out: bool,
) -> None:
    """`run --recover`: follow, heal and resubmit (rlinfra.ops.recover), then print the outcome."""
    from rlinfra.ops import recovery
    from rlinfra.ops.recover import run_recovering

    outcome = run_recovering(cluster, request, the_plan, spec, secrets, to_stderr=json_out)
    if json_out:
        print_json(
            {
                "status": outcome.state,
                "jobs": outcome.jobs,
                "recoveries": outcome.recoveries,
                "reason": outcome.reason,
            }
        )
    else:
        ui.info(f"job {outcome.jobs[-1]}: {outcome.state}")
        for entry in outcome.recoveries:
            ui.info(recovery.describe(entry))
    if outcome.state != "SUCCEEDED":
        if outcome.reason and not json_out:
            ui.err.print(f"Error: {outcome.reason}", style="red", soft_wrap=True)
        raise typer.Exit(1)


def logs(
    cluster: ClusterArg,
    job: Annotated[
        str | None,
        typer.Option("--job", metavar="ID", help="Submission id (default: the latest job)."),
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep streaming until the job ends.")
    ] = False,
) -> None:
    """Print a job's log (the latest job of the cluster by default)."""
    from rlinfra.ops import jobs

    job_id = job or jobs.latest_job(cluster)
    if follow:
        state = jobs.follow(cluster, job_id)
        ui.info(f"job {job_id}: {state}")
        if state in ("FAILED", "STOPPED"):
            raise typer.Exit(1)
        return
    ui.out.print(jobs.job_logs(cluster, job_id), end="", markup=False, highlight=False)
