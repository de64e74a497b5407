"""Commands on a cluster's machines and Ray: up, check, status, down."""

from __future__ import annotations

import os
import time
from typing import Annotated, Any

import typer

from rlinfra import ui
from rlinfra.cli.common import (
    AccOpt,
    CidrOpt,
    CloudOpt,
    ClusterArg,
    ClusterOpt,
    EnvOpt,
    JsonOpt,
    NodesOpt,
    ProfileOpt,
    SecretOpt,
    make_request,
    print_json,
)
from rlinfra.errors import UsageError


def up(
    profile: ProfileOpt = None,
    cluster: ClusterOpt = None,
    num_nodes: NodesOpt = None,
    env: EnvOpt = None,
    secret: SecretOpt = None,
    accelerators: AccOpt = None,
    allow_cidr: CidrOpt = None,
    cloud: CloudOpt = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask before creating.")] = False,
    no_check: Annotated[
        bool, typer.Option("--no-check", help="Skip the acceptance check at the end.")
    ] = False,
    infra_only: Annotated[
        bool, typer.Option("--infra-only", help="Stop after Terraform (no Ansible).")
    ] = False,
    from_plan: Annotated[
        bool,
        typer.Option("--from-plan", help="Apply the plan saved by `plan --terraform`, exactly."),
    ] = False,
    no_run: Annotated[
        bool,
        typer.Option(
            "--no-run", help="Do not submit the profile's workload once the cluster is up."
        ),
    ] = False,
    full: Annotated[
        bool,
        typer.Option(
            "--full",
            help="Run every Ansible role, even when the inputs are unchanged and the nodes verify.",
        ),
    ] = False,
    take_over: Annotated[
        bool,
        typer.Option(
            "--take-over",
            help="cloud ssh: take over hosts that run another rlinfra cluster or a Ray that "
            "rlinfra did not start (their Ray is stopped), instead of refusing them.",
        ),
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Create the cluster (or converge it), configure every node, form Ray, run the check.

    Re-running it converges: Terraform applies only what changed. When nothing did and the last
    configuration run succeeded, each node is checked (configuration marker, node contract,
    venv, bucket mounts, its Ray raylet; on the head, every node alive in Ray) instead of
    re-running Ansible, and Ansible runs only if a check fails (or with --full).

    A profile with a workload then gets it submitted as a Ray job (not while one of its jobs
    still runs); follow it with `rlinfra logs CLUSTER --follow`.
    """
    from rlinfra.clouds.registry import cloud_for
    from rlinfra.jobspec import job_spec
    from rlinfra.ops.prepare import prepare
    from rlinfra.ops.up import up as run_up

    the_plan, secrets = prepare(
        make_request(profile, cluster, num_nodes, env, secret, accelerators, allow_cidr, cloud),
        os.environ,
        account="require",
    )
    if the_plan.profile.workload is not None and not infra_only and not no_run:
        job_spec(the_plan).refuse_unset()
    target = cloud_for(the_plan.cloud)
    if take_over:
        the_plan = target.with_take_over(the_plan)
    question = target.up_question(the_plan)
    if question is not None and not yes:
        ui.out.print(question.notice)
        if not ui.confirm("Proceed?"):
            raise UsageError(
                f"not confirmed; {question.declined}", "Pass --yes to skip the question."
            )
    result = run_up(
        the_plan,
        secrets,
        from_plan=from_plan,
        run_check=not no_check,
        stop_after="infrastructure" if infra_only else None,
        full=full,
    )
    job = None
    if the_plan.profile.workload is not None and not infra_only and not no_run:
        from rlinfra.ops.jobs import submit_unless_running

        job = submit_unless_running(the_plan, secrets)
    if json_out:
        print_json(
            {
                "cluster": result.cluster,
                "nodes": [h.__dict__ for h in result.hosts],
                "terraform_changed": result.terraform_changed,
                "ansible_changed": result.ansible_changed,
                "configured": result.configured,
                "verify_problems": result.verify_problems,
                "replaced": result.replaced,
                "check": result.check,
                "job": job,
            }
        )
        return
    ui.out.print(f"cluster {result.cluster} is up: {len(result.hosts)} node(s)")
    for host in result.hosts:
        role = "head" if host.rank == 0 else "worker"
        ui.out.print(f"  {host.name:<20} {role:<7} {host.private_ip}")
    if result.check:
        print_check(result.check)
    ui.out.print(f"next: rlinfra status {result.cluster} | rlinfra exec {result.cluster} -- CMD")


def print_check(result: dict[str, Any]) -> None:
    ui.out.print(
        f"acceptance check: {result.get('backend')} all-reduce, world size {result.get('world_size')}"
    )
    for row in result.get("results", []):
        # busbw is null with one rank (nothing crosses a link).
        busbw = row.get("busbw_gbps")
        ui.out.print(
            f"  {row['size_bytes'] / 2**20:>8.0f} MiB  {row['time_s'] * 1e3:>9.2f} ms  "
            + (f"busbw {busbw:.3f} GB/s" if busbw is not None else "busbw n/a (one rank)")
        )


def status(
    cluster: Annotated[
        str | None, typer.Argument(help="Cluster (all clusters if omitted).")
    ] = None,
    endpoint: Annotated[
        int | None,
        typer.Option(
            "--endpoint", metavar="PORT", help="Print a URL for this port on the head node."
        ),
    ] = None,
    from_cluster: Annotated[
        str | None,
        typer.Option(
            "--from",
            help="With --endpoint: the URL as this other cluster's nodes reach it (e.g. a "
            "trainer using a retrieval cluster), checked on that cluster's head.",
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Show clusters, their nodes, Ray's state and any command at work on them (or killed
    midway); --endpoint PORT gives a URL that works from here (directly or through an SSH
    tunnel), and with --from OTHER one that works from OTHER's nodes. When nothing listens on
    PORT on the head node, the URL is still printed and the command exits 1, naming the ports
    the cluster serves."""
    from rlinfra.deploy import known_clusters
    from rlinfra.ops.endpoints import NotListening, endpoint_from
    from rlinfra.ops.endpoints import endpoint as get_endpoint
    from rlinfra.ops.status import status as get_status

    if from_cluster is not None and (endpoint is None or cluster is None):
        raise UsageError("--from needs a cluster and --endpoint PORT")

    if cluster is None:
        rows = [get_status(name, live=False) for name in known_clusters()]
        if json_out:
            print_json(rows)
            return
        if not rows:
            ui.out.print("no clusters")
        for row in rows:
            ui.out.print(
                f"{row['cluster']:<20} {row['cloud']:<6} {row['stage']:<14} "
                f"{len(row['nodes'])} node(s){_lock_note(row['lock'], short=True)}"
            )
        return
    if endpoint is not None:
        if not 1 <= endpoint <= 65535:
            raise UsageError(f"--endpoint {endpoint}: port out of range (1-65535)")
        unanswered: NotListening | None = None
        if from_cluster is not None:
            info = endpoint_from(cluster, endpoint, from_cluster)
        else:
            try:
                info = get_endpoint(cluster, endpoint)
            except NotListening as exc:
                # The URL still goes to standard output; the error line follows it.
                info, unanswered = exc.endpoint, exc
        if json_out:
            print_json(info)
        else:
            ui.out.print(info["url"])
            checked = info.get("checked")
            if checked:
                ui.info(
                    f"{checked['node']} of {info['from']} reached it (source address "
                    f"{checked['source']}, {checked['request']} -> {checked['status']})"
                )
            if info.get("ray_token_file"):
                ui.info(
                    "Ray asks for the cluster's token (header 'Authorization: Bearer TOKEN'); "
                    f"it is in {info['ray_token_file']}"
                )
        if unanswered is not None:
            raise unanswered
        return
    state = get_status(cluster)
    if json_out:
        print_json(state)
        return
    ui.out.print(
        f"cluster {state['cluster']} ({state['cloud']}, profile {state['profile']}): "
        f"{state['stage']}"
    )
    if state.get("lock"):
        ui.out.print(f" {_lock_note(state['lock'], short=False)}")
    if state.get("error"):
        ui.out.print(f"  last error: {state['error']}")
    for node in state["nodes"]:
        ui.out.print(f"  {node['name']:<20} {node['role']:<7} {node['private_ip']}")
    ray = state.get("ray")
    if ray:
        if ray.get("reachable"):
            missing = ", ".join(ray["missing_nodes"]) or "none"
            line = f"  ray: {ray['alive_nodes']} node(s) alive; missing: {missing}"
        else:
            line = f"  ray: {ray.get('error')}"
        if ray.get("hint"):
            line = f"{line}. {ray['hint']}"
        ui.out.print(line)
    for bucket in state["buckets"]:
        ui.out.print(f"  bucket {bucket}")
    for service in state.get("services") or []:
        ui.out.print(
            f"  service {service['name']} ({service['engine']}) on port {service['port']}: "
            f"rlinfra status {state['cluster']} --endpoint {service['port']}"
        )
    for job in state.get("jobs") or []:
        ui.out.print(f"  job {job['submission_id']}: {job['status']}")
    from rlinfra.ops.recovery import describe, describe_notice

    for entry in state.get("recoveries") or []:
        ui.out.print(f"  {describe(entry)}")
    progress = state.get("progress")
    if progress:
        now = time.time()
        for notice in progress.get("notices") or []:
            ui.out.print(f"  {describe_notice(notice, now)}")

        def shown(value: Any) -> str:
            return "none" if value is None else str(value)

        ui.out.print(
            f"  training: latest job at step {shown(progress['job_step'])}; last checkpoint "
            f"step {shown(progress['checkpoint_step'])}; served model from step "
            f"{shown(progress['served_step'])}"
        )
    if state.get("jobs_error"):
        ui.out.print(f"  jobs: not readable ({state['jobs_error']})")


def _lock_note(lock: dict[str, Any] | None, short: bool) -> str:
    """What status says of the command holding a cluster's lock ("" when none does)."""
    if not lock:
        return ""
    command = f"`rlinfra {lock['command']}` (pid {lock['pid']})"
    if lock["running"]:
        return f"  ({lock['command']} running)" if short else f" {command} is running"
    if short:
        return f"  ({lock['command']} killed)"
    return (
        f" {command} was killed before it finished; the stage is where it stopped. "
        f"Running `rlinfra {lock['command']}` again converges."
    )


def check(cluster: ClusterArg, json_out: JsonOpt = False) -> None:
    """Run the acceptance check: an all-reduce across every node, against the profile's floor."""
    from rlinfra.ops.check import check as run_check

    result = run_check(cluster)
    if json_out:
        print_json(result)
    else:
        print_check(result)


def down(
    cluster: ClusterArg,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
    delete_buckets: Annotated[
        bool, typer.Option("--delete-buckets", help="Also delete the cluster's buckets and data.")
    ] = False,
    purge: Annotated[
        bool,
        typer.Option(
            "--purge",
            help="cloud ssh: also remove what rlinfra installed on the hosts (/opt/rlinfra, its "
            "venv, its system settings); the machines stay.",
        ),
    ] = False,
) -> None:
    """Destroy a cluster's nodes (cloud ssh: leave the machines, stop rlinfra's processes and
    remove the node contract). Buckets are kept unless --delete-buckets."""
    from rlinfra.ops.down import down as run_down
    from rlinfra.ops.down import plan_down

    todo = plan_down(cluster, delete_buckets, purge)
    for line in todo.describe():
        ui.out.print(line)
    if not yes and not ui.confirm("Destroy these?"):
        raise UsageError("not confirmed; nothing was destroyed", "Pass --yes to skip the question.")
    run_down(todo)
    ui.out.print(
        f"cluster {cluster} is down"
        + ("" if delete_buckets or not todo.buckets else " (buckets kept)")
    )
