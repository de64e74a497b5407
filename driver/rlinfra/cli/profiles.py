"""Commands that touch no cluster: profiles, validate, render, plan, lock."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from rlinfra import ui
from rlinfra.cli.common import (
    AccOpt,
    CidrOpt,
    CloudOpt,
    ClusterOpt,
    EnvOpt,
    JsonOpt,
    NodesOpt,
    ProfileOpt,
    SecretOpt,
    error_line,
    make_request,
    out_folder,
    print_json,
)
from rlinfra.errors import RlinfraError


def profiles(json_out: JsonOpt = False) -> None:
    """List the profiles rlinfra knows (built-in and on $RLINFRA_PROFILE_PATH); a profile that
    `validate` refuses is listed as invalid, with validate's reason (no secret, credential or
    cloud is consulted)."""
    from rlinfra.ops.prepare import check_profile
    from rlinfra.profile import known_profiles, load_profile

    rows: list[dict[str, Any]] = []
    for name, path in known_profiles().items():
        try:
            profile, _ = load_profile(str(path))
            check_profile(str(path))
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
            # The line `validate` prints for it, without "Error: ".
            reason = error_line(exc).removeprefix("Error: ")
            rows.append({"name": name, "path": str(path), "error": reason})
    if json_out:
        print_json(rows)
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
    from rlinfra.ops.prepare import prepare, report_overrides, report_secrets

    request = make_request(profile, cluster, num_nodes, env, secret, accelerators, cloud=cloud)
    plan, _ = prepare(request, os.environ, need_secrets=False)
    report_overrides(plan)
    report_secrets(plan, request.overrides.secrets, os.environ)
    ui.out.print(f"{plan.source}: ok ({plan.num_nodes} node(s), cloud {plan.cloud})")


def render(
    out: Annotated[
        str, typer.Option("--out", "-o", metavar="PATH", help="Folder to write the files into.")
    ],
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
    from rlinfra.ops.prepare import prepare, report_overrides, report_secrets
    from rlinfra.ops.review import render_to

    folder = out_folder(out)
    assert folder is not None
    request = make_request(
        profile, cluster, num_nodes, env, secret, accelerators, allow_cidr, cloud
    )
    plan, _ = prepare(request, os.environ, need_secrets=False, account="lookup")
    report_overrides(plan)
    report_secrets(plan, request.overrides.secrets, os.environ)
    changed = render_to(plan, folder)
    ui.out.print(f"rendered {plan.cluster} into {out} ({len(changed)} file(s) changed)")


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
        str | None,
        typer.Option(
            "--out", "-o", metavar="PATH", help="Deployment folder (default: the cluster's)."
        ),
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
            ui.err.print(error_line(exc), style="red", soft_wrap=True)
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
    from rlinfra.ops.prepare import prepare
    from rlinfra.ops.review import audit, plan_summary

    destination = out_folder(out)
    request = make_request(
        profile, cluster, num_nodes, env, secret, accelerators, allow_cidr, cloud
    )
    the_plan, _ = prepare(request, os.environ, need_secrets=False, account="lookup")
    summary = plan_summary(the_plan, request.overrides.secrets, os.environ)
    if terraform:
        summary["terraform"] = audit(the_plan, destination)
    changes = terraform and any(r["changes"] for r in summary["terraform"]["roots"].values())
    if json_out:
        print_json(summary)
    else:
        _print_plan(the_plan, summary, terraform)
        from rlinfra.ops.prepare import report_secrets

        report_secrets(the_plan, request.overrides.secrets, os.environ)
    return bool(changes)


def _print_plan(the_plan: Any, summary: dict[str, Any], terraform: bool) -> None:
    from rlinfra.ops.prepare import report_overrides
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
    from rlinfra.ops.prepare import landing

    for name, fields in summary["env"].items():
        ui.out.print(f"  env {name}: {landing(fields['read_by'])}")
    if terraform:
        for root, info in summary["terraform"]["roots"].items():
            ui.out.print(f"terraform plan ({root}), saved as {info['plan_file']}:")
            for line in info["text"]:
                ui.out.print(line)
        ui.out.print(f"apply exactly this: rlinfra up -c {the_plan.cluster} --from-plan")


def lock(
    pin_set: Annotated[str, typer.Argument(help="Pin set name (see software.pin_set).")],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", metavar="PATH", help="Lock file to write (default: the packaged one)."
        ),
    ] = None,
    find_links: Annotated[
        list[str] | None,
        typer.Option(
            "--find-links", metavar="FOLDER", help="Also look for wheels in this folder (repeat)."
        ),
    ] = None,
) -> None:
    """Resolve a pin set into a hash-pinned lock file that nodes install exactly."""
    from rlinfra.controller import uv_binary
    from rlinfra.lock import lock as run_lock

    result = run_lock(pin_set, out, uv=uv_binary(), extra_find_links=find_links or [])
    ui.out.print(
        f"locked pin set {result.pin_set}: {result.requirements} requirement(s), "
        f"hashes pinned, in {result.path}"
    )
