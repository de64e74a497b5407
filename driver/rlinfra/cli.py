"""The `rlinfra` command line.

Imports of heavy libraries (ansible-runner, python-terraform, ray) happen inside the commands
that need them, so `rlinfra --help` starts fast.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Annotated, Any

import typer

from rlinfra import __version__, ui
from rlinfra.errors import EXIT_USAGE, RlinfraError, UsageError

DEFAULT_PROFILE = "local"
INTERRUPTED = "interrupted; state is saved, re-run the same command to converge"

app = typer.Typer(
    name="rlinfra",
    help=(
        "Ray clusters for RL post-training (Verl PPO/GRPO): a profile is rendered into Terraform "
        "and Ansible, applied, and checked with a distributed all-reduce.\n\n"
        "Start with `rlinfra up` (the built-in `local` profile: 2 hosts on this machine)."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

ProfileOpt = Annotated[
    str | None,
    typer.Option("--profile", "-p", help="Profile name (see `rlinfra profiles`) or YAML path."),
]
ClusterOpt = Annotated[
    str | None, typer.Option("--cluster", "-c", help="Cluster name (default: the profile's name).")
]
NodesOpt = Annotated[int | None, typer.Option("--num-nodes", "-n", help="Override node count.")]
EnvOpt = Annotated[
    list[str] | None, typer.Option("--env", "-e", help="Override an env var: NAME=VALUE (repeat).")
]
SecretOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--secret",
        help="Secret NAME: the value from your environment; NAME=@FILE: from a file; NAME=-: "
        "from standard input; NAME=VALUE puts it in process arguments (warned). Never written "
        "to disk or logs; validate, render and plan need no value.",
    ),
]
AccOpt = Annotated[
    str | None,
    typer.Option("--accelerators", "--gpus", help="Override accelerators, e.g. H100:8,A100:8."),
]
CidrOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--allow-cidr",
        help="Also allow SSH from this CIDR (repeat); added to network.allowed_cidrs.",
    ),
]
CloudOpt = Annotated[
    str | None,
    typer.Option(
        "--cloud",
        help="Plan on this one of the profile's candidate clouds (`cloud: [aws, gcp]`) instead "
        "of the cheapest.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (for CI and auditors).")]
ClusterArg = Annotated[str, typer.Argument(help="Cluster name (see `rlinfra status`).")]


def _request(
    profile: str | None,
    cluster: str | None,
    num_nodes: int | None,
    env: list[str] | None,
    secret: list[str] | None,
    accelerators: str | None,
    allow_cidr: list[str] | None = None,
    cloud: str | None = None,
) -> Any:
    from rlinfra.deploy import deployment_dir, read_record
    from rlinfra.pipeline import Request
    from rlinfra.profile import Overrides, check_cluster_name, parse_env_pairs, parse_secret_flags

    if profile is not None and not profile.strip():
        raise UsageError("--profile '': give a profile name or a YAML path")
    if profile is None and cluster is not None:
        check_cluster_name(cluster)
        record = read_record(deployment_dir(cluster))
        if record and record.source:
            profile = record.source
    overrides = Overrides(
        num_nodes=num_nodes,
        env=parse_env_pairs(env or []),
        secrets=parse_secret_flags(secret or []),
        accelerators=_accelerators(accelerators),
        allowed_cidrs=list(allow_cidr or []),
        cloud=cloud,
    )
    return Request(profile=profile or DEFAULT_PROFILE, cluster=cluster, overrides=overrides)


def _accelerators(value: str | None) -> list[str] | None:
    if value is None:
        return None
    items = [a.strip() for a in value.split(",")]
    if not all(items):
        raise UsageError(f"--accelerators {value!r}: expected e.g. H100:8 or H100:8,A100:8")
    return items


def _out_folder(out: str | None) -> Path | None:
    """--out names a folder to write into: not empty, not a file."""
    if out is None:
        return None
    if not out.strip():
        raise UsageError("--out '': give a folder to write into")
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out {out}: not a folder")
    return path


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"rlinfra {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    """Ray clusters for RL post-training."""


@app.command()
def profiles(json_out: JsonOpt = False) -> None:
    """List the profiles rlinfra knows (built-in and on $RLINFRA_PROFILE_PATH)."""
    from rlinfra.profile import known_profiles, load_profile

    rows: list[dict[str, Any]] = []
    for name, path in known_profiles().items():
        try:
            profile, _ = load_profile(str(path))
            rows.append(
                {
                    "name": name,
                    "path": str(path),
                    "cloud": profile.cloud,
                    "nodes": profile.resources.num_nodes,
                    "accelerators": profile.resources.accelerators or [],
                    "description": profile.description,
                }
            )
        except RlinfraError as exc:
            rows.append({"name": name, "path": str(path), "error": exc.message})
    if json_out:
        _print_json(rows)
        return
    for row in rows:
        if "error" in row:
            ui.out.print(f"{row['name']:<16} invalid: {row['error']}")
        else:
            acc = ",".join(row["accelerators"]) or "cpu"
            ui.out.print(
                f"{row['name']:<16} {row['cloud']:<6} {row['nodes']} x {acc:<28} "
                f"{row['description']}"
            )


@app.command()
def validate(
    profile: ProfileOpt = None,
    cluster: ClusterOpt = None,
    num_nodes: NodesOpt = None,
    env: EnvOpt = None,
    secret: SecretOpt = None,
    accelerators: AccOpt = None,
    cloud: CloudOpt = None,
) -> None:
    """Check a profile (and overrides) without touching anything; list the secrets up will need."""
    from rlinfra.pipeline import prepare, report_overrides, report_secrets

    request = _request(profile, cluster, num_nodes, env, secret, accelerators, cloud=cloud)
    plan, _ = prepare(request, os.environ, need_secrets=False)
    report_overrides(plan)
    report_secrets(plan, request.overrides.secrets, os.environ)
    ui.out.print(f"{plan.source}: ok ({plan.num_nodes} node(s), cloud {plan.cloud})")


@app.command()
def render(
    out: Annotated[str, typer.Option("--out", "-o", help="Folder to write the files into.")],
    profile: ProfileOpt = None,
    cluster: ClusterOpt = None,
    num_nodes: NodesOpt = None,
    env: EnvOpt = None,
    secret: SecretOpt = None,
    accelerators: AccOpt = None,
    allow_cidr: CidrOpt = None,
    cloud: CloudOpt = None,
) -> None:
    """Write the Terraform roots and Ansible files of a deployment into a folder, for review.

    Needs no secret value and no credentials; the folder holds no secret and no private key.
    """
    from rlinfra.pipeline import prepare, render_to, report_overrides, report_secrets

    folder = _out_folder(out)
    assert folder is not None
    request = _request(profile, cluster, num_nodes, env, secret, accelerators, allow_cidr, cloud)
    plan, _ = prepare(request, os.environ, need_secrets=False, account="lookup")
    report_overrides(plan)
    report_secrets(plan, request.overrides.secrets, os.environ)
    changed = render_to(plan, folder)
    ui.out.print(f"rendered {plan.cluster} into {out} ({len(changed)} file(s) changed)")


@app.command()
def plan(
    profile: ProfileOpt = None,
    cluster: ClusterOpt = None,
    num_nodes: NodesOpt = None,
    env: EnvOpt = None,
    secret: SecretOpt = None,
    accelerators: AccOpt = None,
    allow_cidr: CidrOpt = None,
    cloud: CloudOpt = None,
    terraform: Annotated[
        bool,
        typer.Option(
            "--terraform",
            help="Also run `terraform plan` on every root; save the plans for `up --from-plan`.",
        ),
    ] = False,
    out: Annotated[
        str | None, typer.Option("--out", "-o", help="Deployment folder (default: the cluster's).")
    ] = None,
    json_out: JsonOpt = False,
    detailed_exitcode: Annotated[
        bool,
        typer.Option(
            "--detailed-exitcode",
            help="Implies --terraform. Exit 0 when nothing would change, 2 when something would, "
            "1 on any error (as `terraform plan -detailed-exitcode`).",
        ),
    ] = False,
) -> None:
    """Show what `up` would build and what it costs, without building anything."""
    args = (profile, cluster, num_nodes, env, secret, accelerators, allow_cidr)
    if detailed_exitcode:
        try:
            changes = _plan(*args, True, out, json_out, cloud)
        except RlinfraError as exc:
            ui.err.print(_error_line(exc), style="red", soft_wrap=True)
            raise typer.Exit(1) from exc
        except typer.Exit:
            raise
        except Exception as exc:
            ui.err.print(f"Error: {exc}", style="red", soft_wrap=True)
            raise typer.Exit(1) from exc
        raise typer.Exit(2 if changes else 0)
    _plan(*args, terraform, out, json_out, cloud)


def _plan(
    profile: str | None,
    cluster: str | None,
    num_nodes: int | None,
    env: list[str] | None,
    secret: list[str] | None,
    accelerators: str | None,
    allow_cidr: list[str] | None,
    terraform: bool,
    out: str | None,
    json_out: bool,
    cloud: str | None = None,
) -> bool:
    """Print the plan; True when Terraform would change something."""
    from rlinfra.pipeline import audit, env_readers, prepare

    out_folder = _out_folder(out)
    from rlinfra.secrets import secret_status

    request = _request(profile, cluster, num_nodes, env, secret, accelerators, allow_cidr, cloud)
    the_plan, _ = prepare(request, os.environ, need_secrets=False, account="lookup")
    readers = env_readers(the_plan)
    summary: dict[str, Any] = {
        "cluster": the_plan.cluster,
        "cloud": the_plan.cloud,
        "profile": the_plan.profile.name,
        "nodes": [
            {
                "name": n.name,
                "rank": n.rank,
                "role": n.role,
                **({"where": n.where} if n.where else {}),
            }
            for n in the_plan.nodes
        ],
        "accelerator": str(the_plan.accelerator) if the_plan.accelerator else None,
        "instance_type": the_plan.instance_type,
        "candidates": [
            {
                "instance_type": c.instance_type,
                "accelerator": str(c.accelerator) if c.accelerator else None,
                "hourly_usd": None if math.isnan(c.hourly) else c.hourly,
                "chosen": i == 0,
            }
            for i, c in enumerate(the_plan.choices)
        ],
        # A profile of several clouds: every cloud's candidates, the chosen cloud's first.
        "clouds": [
            {
                "cloud": o.cloud,
                "region": o.region,
                "instance_type": o.candidate.instance_type,
                "accelerator": str(o.candidate.accelerator) if o.candidate.accelerator else None,
                "hourly_usd": None if math.isnan(o.candidate.hourly) else o.candidate.hourly,
                "chosen": i == 0,
            }
            for i, o in enumerate(the_plan.clouds)
        ],
        "clouds_left_out": list(the_plan.clouds_left_out),
        "subnet": the_plan.subnet,
        "pin_set": the_plan.pins.name,
        "packages": list(the_plan.pins.packages),
        "buckets": the_plan.storage_buckets,
        "ray": the_plan.profile.network.ray.model_dump(),
        "overrides": [
            {
                **o.__dict__,
                **(
                    {"read_by": readers.get(o.field.removeprefix("env."), [])}
                    if o.field.startswith("env.")
                    else {}
                ),
            }
            for o in the_plan.overrides
        ],
        "env": {name: {"read_by": fields} for name, fields in readers.items()},
        "secrets": [
            {"name": row.name, "required": row.required, "set": row.available}
            for row in secret_status(the_plan.profile, request.overrides.secrets, os.environ)
        ],
    }
    if terraform:
        summary["terraform"] = audit(the_plan, out_folder)
    changes = terraform and any(r["changes"] for r in summary["terraform"]["roots"].values())
    if json_out:
        _print_json(summary)
    else:
        _print_plan(the_plan, summary, terraform)
        from rlinfra.pipeline import report_secrets

        report_secrets(the_plan, request.overrides.secrets, os.environ)
    return bool(changes)


def _print_plan(the_plan: Any, summary: dict[str, Any], terraform: bool) -> None:
    from rlinfra.pipeline import report_overrides
    from rlinfra.plan import ACCOUNT_PLACEHOLDER, BUCKET_ENV

    report_overrides(the_plan)
    ui.out.print(
        f"cluster {the_plan.cluster} on {the_plan.cloud} (profile {the_plan.profile.name})"
    )
    if summary["clouds"]:
        ui.out.print("  candidates on every listed cloud (USD per node-hour, catalog prices):")
        for row in summary["clouds"]:
            mark = "*" if row["chosen"] else " "
            price = row["hourly_usd"]
            ui.out.print(
                f"   {mark} {row['cloud']:<4} {row['region'] or 'default':<14} "
                f"{row['instance_type']:<16} {row['accelerator'] or 'cpu':<12} "
                + (f"{price:>9.3f}" if price is not None else f"{'unknown':>9}")
            )
        for note in the_plan.clouds_left_out:
            ui.out.print(f"     not a candidate: {note}")
        ui.out.print("  (the cheapest is chosen; --cloud CLOUD plans another)")
    elif summary["candidates"]:
        ui.out.print("  candidates (USD per node-hour, catalog prices):")
        for row in summary["candidates"]:
            mark = "*" if row["chosen"] else " "
            ui.out.print(
                f"   {mark} {row['instance_type']:<16} {row['accelerator'] or 'cpu':<12} "
                + (
                    f"{row['hourly_usd']:>9.3f}"
                    if row["hourly_usd"] is not None
                    else f"{'unknown':>9}"
                )
            )
    for node in the_plan.nodes:
        what = node.where or the_plan.instance_type or summary["accelerator"] or "cpu"
        ui.out.print(f"  + node {node.name} ({node.role}, {what})")
    for bucket in the_plan.storage_buckets:
        ui.out.print(f"  + bucket {bucket} (kept by `down`)")
        if bucket.endswith(f"-{ACCOUNT_PLACEHOLDER}"):
            ui.out.print(
                f"    ('{ACCOUNT_PLACEHOLDER}' stands for 8 hex digits of your {the_plan.cloud} "
                "account id's SHA-256: configure credentials to see it, or name the bucket with "
                f"--env {BUCKET_ENV}=NAME)"
            )
    if the_plan.subnet:
        ui.out.print(f"  subnet {the_plan.subnet}")
    ui.out.print(f"  software: pin set {the_plan.pins.name}: {', '.join(the_plan.pins.packages)}")
    from rlinfra.pipeline import landing

    for name, fields in summary["env"].items():
        ui.out.print(f"  env {name}: {landing(fields['read_by'])}")
    if terraform:
        for root, info in summary["terraform"]["roots"].items():
            ui.out.print(f"terraform plan ({root}), saved as {info['plan_file']}:")
            for line in info["text"]:
                ui.out.print(line)
        ui.out.print(f"apply exactly this: rlinfra up -c {the_plan.cluster} --from-plan")


@app.command()
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
    from rlinfra.pipeline import prepare
    from rlinfra.pipeline import up as run_up

    the_plan, secrets = prepare(
        _request(profile, cluster, num_nodes, env, secret, accelerators, allow_cidr, cloud),
        os.environ,
        account="require",
    )
    if the_plan.profile.workload is not None and not infra_only and not no_run:
        the_plan.job.refuse_unset()
    if take_over:
        if the_plan.cloud != "ssh":
            raise UsageError("--take-over is for cloud ssh (hosts you already have)")
        from rlinfra.clouds.ssh import with_take_over

        the_plan = with_take_over(the_plan)
    if the_plan.cloud == "ssh" and not yes:
        ui.out.print(f"This configures {the_plan.num_nodes} existing host(s) over SSH.")
        if not ui.confirm("Proceed?"):
            raise UsageError(
                "not confirmed; nothing was changed", "Pass --yes to skip the question."
            )
    elif the_plan.cloud != "local" and not yes:
        ui.out.print(f"This creates {the_plan.num_nodes} node(s) on {the_plan.cloud}.")
        if not ui.confirm("Proceed?"):
            raise UsageError(
                "not confirmed; nothing was created", "Pass --yes to skip the question."
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
        job = _submit_unless_running(the_plan, secrets)
    if json_out:
        _print_json(
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
        _print_check(result.check)
    ui.out.print(f"next: rlinfra status {result.cluster} | rlinfra exec {result.cluster} -- CMD")


def _submit_unless_running(the_plan: Any, secrets: dict[str, str]) -> str | None:
    """Submit the plan's workload, unless a job of this cluster is still pending or running."""
    from rlinfra import jobs

    spec = the_plan.job
    for job in jobs.list_jobs(the_plan.cluster):
        if job["status"] not in jobs.TERMINAL and str(job["submission_id"]).startswith(
            spec.submission_prefix
        ):
            ui.info(f"job {job['submission_id']} is still {job['status']}: not submitting another")
            return str(job["submission_id"])
    submitted = jobs.submit(the_plan.cluster, spec, secrets)
    ui.info(f"submitted job {submitted.submission_id}")
    ui.info(f"follow it: rlinfra logs {the_plan.cluster} --follow")
    return submitted.submission_id


def _print_check(result: dict[str, Any]) -> None:
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


@app.command()
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
    from rlinfra import jobs
    from rlinfra.deploy import require_cluster
    from rlinfra.pipeline import prepare, report_overrides

    _, record = require_cluster(cluster)
    request = _request(None, cluster, None, env, secret, None)
    if record.resolved_profile is not None:
        # The profile as `up` resolved it (its --num-nodes, --env, ...), not the file today.
        request = dataclasses.replace(request, resolved=record.resolved_profile)
        the_plan, secrets = prepare(request, os.environ)
    else:  # a cluster made before records kept the profile
        the_plan, secrets = prepare(request, os.environ)
        if record.num_nodes not in (None, the_plan.num_nodes):
            # The cluster was made with --num-nodes: the job runs on the nodes it has.
            the_plan, secrets = prepare(
                _request(None, cluster, record.num_nodes, env, secret, None), os.environ
            )
    if the_plan.profile.workload is None:
        raise UsageError(
            f"{the_plan.source}: workload: the profile of {cluster!r} has no workload to run"
        )
    report_overrides(the_plan)
    spec = the_plan.job
    spec.refuse_unset()
    if recover:
        _run_recovering(cluster, request, the_plan, spec, secrets, json_out)
        return
    submitted = jobs.submit(cluster, spec, secrets)
    state = (
        jobs.follow(cluster, submitted.submission_id, to_stderr=json_out) if follow else "SUBMITTED"
    )
    if json_out:
        _print_json({"submission_id": submitted.submission_id, "status": state})
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
    """`run --recover`: rlinfra.recovery's loop over this cluster's real operations."""
    from rlinfra import jobs, recovery
    from rlinfra.deploy import require_cluster, update_record
    from rlinfra.pipeline import prepare, ray_state, training_progress
    from rlinfra.pipeline import up as run_up

    folder, _ = require_cluster(cluster)

    def follow(job: str, on_log: Any) -> tuple[str, str]:
        # The log as follow last read it: no second fetch at the end.
        seen = [""]

        def keep(text: str) -> None:
            seen[0] = text
            on_log(text)

        state = jobs.follow(cluster, job, on_log=keep, to_stderr=json_out)
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
        kept = [r for r in current.recoveries if r.get("job") != entry["job"]]
        update_record(folder, recoveries=[*kept, dict(entry)][-recovery.KEPT :])

    ops = recovery.Ops(
        submit=lambda: jobs.submit(cluster, spec, secrets).submission_id,
        follow=follow,
        missing_nodes=missing_nodes,
        heal=heal,
        checkpoint_step=checkpoint_step,
        record=record,
    )
    outcome = recovery.run_with_recovery(ops, the_plan.profile.recovery.max_attempts)
    if json_out:
        _print_json(
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


@app.command()
def logs(
    cluster: ClusterArg,
    job: Annotated[
        str | None, typer.Option("--job", help="Submission id (default: the latest job).")
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep streaming until the job ends.")
    ] = False,
) -> None:
    """Print a job's log (the latest job of the cluster by default)."""
    from rlinfra import jobs

    job_id = job or jobs.latest_job(cluster)
    if follow:
        state = jobs.follow(cluster, job_id)
        ui.info(f"job {job_id}: {state}")
        if state in ("FAILED", "STOPPED"):
            raise typer.Exit(1)
        return
    ui.out.print(jobs.job_logs(cluster, job_id), end="", markup=False, highlight=False)


@app.command()
def status(
    cluster: Annotated[
        str | None, typer.Argument(help="Cluster (all clusters if omitted).")
    ] = None,
    endpoint: Annotated[
        int | None, typer.Option("--endpoint", help="Print a URL for this port on the head node.")
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
    tunnel), and with --from OTHER one that works from OTHER's nodes."""
    from rlinfra.deploy import known_clusters
    from rlinfra.pipeline import endpoint as get_endpoint
    from rlinfra.pipeline import endpoint_from
    from rlinfra.pipeline import status as get_status

    if from_cluster is not None and (endpoint is None or cluster is None):
        raise UsageError("--from needs a cluster and --endpoint PORT")

    if cluster is None:
        rows = [get_status(name, live=False) for name in known_clusters()]
        if json_out:
            _print_json(rows)
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
        if from_cluster is not None:
            info = endpoint_from(cluster, endpoint, from_cluster)
        else:
            info = get_endpoint(cluster, endpoint)
        if json_out:
            _print_json(info)
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
        return
    state = get_status(cluster)
    if json_out:
        _print_json(state)
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
            ui.out.print(f"  ray: {ray['alive_nodes']} node(s) alive; missing: {missing}")
        else:
            ui.out.print(f"  ray: not reachable ({ray.get('error')})")
    for bucket in state["buckets"]:
        ui.out.print(f"  bucket {bucket}")
    for service in state.get("services") or []:
        ui.out.print(
            f"  service {service['name']} ({service['engine']}) on port {service['port']}: "
            f"rlinfra status {state['cluster']} --endpoint {service['port']}"
        )
    for job in state.get("jobs") or []:
        ui.out.print(f"  job {job['submission_id']}: {job['status']}")
    from rlinfra.recovery import describe, describe_notice

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


def _node(cluster: str, node: int) -> tuple[Path, Any]:
    from rlinfra.deploy import require_cluster

    folder, record = require_cluster(cluster)
    hosts = list(record.hosts)
    if not hosts:
        raise UsageError(f"cluster {cluster!r} is down")
    if not 0 <= node < len(hosts):
        raise UsageError(f"--node {node}: cluster {cluster!r} has nodes 0-{len(hosts) - 1}")
    return folder, hosts[node]


@app.command(name="exec")
def exec_(
    cluster: ClusterArg,
    command: Annotated[list[str], typer.Argument(help="Command to run (after --).")],
    node: Annotated[int, typer.Option("--node", help="Node rank to run on (0 = head).")] = 0,
    all_nodes: Annotated[bool, typer.Option("--all", help="Run on every node, in order.")] = False,
) -> None:
    """Run a command on a node with the node environment (RLINFRA_*, SKYPILOT_*) loaded."""
    import shlex

    from rlinfra.deploy import require_cluster
    from rlinfra.runners import ssh

    text = command[0] if len(command) == 1 else shlex.join(command)
    folder, record = require_cluster(cluster)
    hosts = list(record.hosts) if all_nodes else [_node(cluster, node)[1]]
    worst = 0
    for host in hosts:
        if all_nodes:
            ui.err.print(f"--- {host.name}")
        code = ssh.run(folder, host, text).returncode
        worst = worst or code
    raise typer.Exit(worst)


@app.command()
def ssh(
    cluster: ClusterArg,
    node: Annotated[int, typer.Option("--node", help="Node rank (0 = head).")] = 0,
) -> None:
    """Open an interactive shell on a node."""
    from rlinfra.runners import ssh as ssh_runner

    folder, host = _node(cluster, node)
    argv = ssh_runner.ssh_argv(folder, host, tty=True)
    os.execvp(argv[0], argv)


@app.command()
def check(cluster: ClusterArg, json_out: JsonOpt = False) -> None:
    """Run the acceptance check: an all-reduce across every node, against the profile's floor."""
    from rlinfra.pipeline import check as run_check

    result = run_check(cluster)
    if json_out:
        _print_json(result)
    else:
        _print_check(result)


@app.command()
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
    from rlinfra.pipeline import down as run_down
    from rlinfra.pipeline import plan_down

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


@app.command()
def lock(
    pin_set: Annotated[str, typer.Argument(help="Pin set name (see software.pin_set).")],
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Lock file to write (default: the packaged one)."),
    ] = None,
    find_links: Annotated[
        list[str] | None,
        typer.Option("--find-links", help="Also look for wheels in this folder (repeat)."),
    ] = None,
) -> None:
    """Resolve a pin set into a hash-pinned lock file that nodes install exactly."""
    from rlinfra.lock import lock as run_lock

    result = run_lock(pin_set, out, extra_find_links=find_links or [])
    ui.out.print(
        f"locked pin set {result.pin_set}: {result.requirements} requirement(s), "
        f"hashes pinned, in {result.path}"
    )


def _error_line(exc: RlinfraError) -> str:
    line = f"Error: {exc.message}"
    if exc.hint:
        line = f"{line.rstrip('.')}. {exc.hint}"
    return line


def main() -> None:
    try:
        code = app(standalone_mode=False)
        code = code if isinstance(code, int) else 0
        if code == 130:  # typer turns Ctrl-C into Exit(130)
            ui.err.print(INTERRUPTED)
        sys.exit(code)
    except RlinfraError as exc:
        if os.environ.get("RLINFRA_DEBUG"):
            traceback.print_exc()
        ui.err.print(_error_line(exc), style="red", soft_wrap=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        ui.err.print(INTERRUPTED)
        sys.exit(130)
    except typer.Exit as exc:
        if exc.exit_code == 130:
            ui.err.print(INTERRUPTED)
        sys.exit(exc.exit_code)
    except EOFError:
        # Ctrl-D at a confirmation prompt: nothing was confirmed, nothing was done.
        ui.err.print("Error: no answer (end of input); nothing was changed")
        sys.exit(EXIT_USAGE)
    except Exception as exc:
        kind = _click_kind(exc)
        if kind is None:
            raise
        if kind == "abort":
            ui.err.print(INTERRUPTED)
            sys.exit(130)
        ui.err.print(_click_line(exc), style="red", soft_wrap=True, markup=False, highlight=False)
        sys.exit(EXIT_USAGE if kind == "usage" else getattr(exc, "exit_code", 1) or 1)


def _click_kind(exc: BaseException) -> str | None:
    """What a command-line parser's exception is: "abort", "usage", "other" or None.

    Typer used to raise click's exceptions; newer releases raise their own copies of the same
    classes (a vendored click). Both are recognised by their class names, so a usage error is one
    line and exit 2 whichever is installed.
    """
    names = {cls.__name__ for cls in type(exc).__mro__}
    if "Abort" in names:
        return "abort"
    if not hasattr(exc, "format_message"):
        return None
    if "UsageError" in names:
        return "usage"
    if "ClickException" in names:
        return "other"
    return None


def _click_line(exc: BaseException) -> str:
    """One line: what was wrong, and the --help to read."""
    message = " ".join(str(exc.format_message()).split())  # type: ignore[attr-defined]
    ctx = getattr(exc, "ctx", None)
    command = getattr(ctx, "command_path", None)
    if not command or command == "rlinfra":
        # Some errors are raised before the command's context exists: name it from argv.
        words = [w for w in sys.argv[1:] if not w.startswith("-")]
        known = {c.name or c.callback.__name__ for c in app.registered_commands if c.callback}
        command = f"rlinfra {words[0]}" if words and words[0] in known else "rlinfra"
    return f"Error: {message.rstrip('.')}. See `{command} --help`."


if __name__ == "__main__":
    main()
