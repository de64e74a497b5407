"""Load, override, gather the world's facts, plan: what every command starts from.

A request (a profile and the command line's overrides) becomes a plan and the secrets it
needs; nothing here creates anything.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlinfra import ui
from rlinfra.clouds.planning import make_plan, needs_account, with_account
from rlinfra.clouds.registry import cloud_for
from rlinfra.context import Context, Controller, rlinfra_cache
from rlinfra.deploy import (
    deployment_dir,
    ensure_ray_token,
    ensure_ssh_key,
    known_clusters,
    new_task_id,
    read_record,
)
from rlinfra.errors import UsageError
from rlinfra.jobspec import job_spec
from rlinfra.plan import Plan
from rlinfra.profile import (
    Overrides,
    apply_overrides,
    check_cluster_name,
    load_profile,
    profile_from_data,
)
from rlinfra.record import Stage
from rlinfra.secrets import LITERAL_SECRET_WARNING, resolve_secrets, secret_status


@dataclass(frozen=True)
class Request:
    profile: str
    cluster: str | None = None
    overrides: Overrides = field(default_factory=Overrides)
    # The profile as data (a record's resolved_profile); ``profile`` then only names its source.
    resolved: dict[str, Any] | None = None


def prepare(
    request: Request,
    environ: Mapping[str, str],
    need_secrets: bool = True,
    account: str | None = None,
) -> tuple[Plan, dict[str, str]]:
    """Load, override, validate and plan. Raises UsageError; touches nothing.

    With ``need_secrets`` (``up``, ``run``) every required secret must have a value; without it
    (``validate``, ``render``, ``plan``) the values found are checked but none is required.
    Either way a ``--secret`` flag must yield a non-empty value. ``account``: "lookup" asks the
    cloud for the account id when a default bucket name needs it ("require": `up`, an error
    when it cannot be had; "lookup": `plan`/`render`, only where credentials are configured).
    """
    if request.resolved is not None:
        # `run`: the profile exactly as `up` resolved it (the record's), not the file today.
        source = request.profile
        profile = profile_from_data(request.resolved, source, request.cluster or "cluster")
    else:
        profile, source = load_profile(request.profile)
    profile, changes = apply_overrides(profile, request.overrides, source)
    if account is not None and not profile.clouds:
        # `plan`, `render`, `up`: the world's facts first (the ssh cloud's hosts say what GPUs
        # they have, read-only), so that the profile is planned once.
        cluster = check_cluster_name(request.cluster or profile.name)
        profile, detected = cloud_for(profile.cloud).gather_facts(profile, source, cluster)
        if detected is not None:
            changes.append(detected)
    plan = make_plan(profile, source, request.cluster, tuple(changes))
    for name, flag in request.overrides.secrets.items():
        if flag is not None and flag != "-" and not flag.startswith("@"):
            ui.warn(LITERAL_SECRET_WARNING.format(name=name))
    secrets = resolve_secrets(
        profile, request.overrides.secrets, environ, source, require=need_secrets
    )
    # A profile of several clouds is now the chosen cloud's (plan.clouds keeps the others).
    if account in ("lookup", "require") and needs_account(plan.profile):
        cloud = cloud_for(plan.cloud)
        if account == "require":
            # What needs no cloud call is refused first.
            cloud.check_inputs(plan)
        account_id = cloud.account_id(environ, required=account == "require")
        if account_id is not None:
            plan = with_account(plan, account_id)
    return plan, secrets


def check_profile(profile: str) -> Plan:
    """What `validate` checks of a profile alone (`rlinfra profiles`): load, validate and plan,
    without overrides, secret values, credentials or cloud calls. Raises UsageError."""
    plan, _ = prepare(Request(profile=profile), {}, need_secrets=False)
    return plan


def env_readers(plan: Plan) -> dict[str, list[str]]:
    """Each profile env variable: the settings that read it (empty: the node environment only).

    Every variable is also exported to the nodes (``/opt/rlinfra/node.env``); this says which
    settings of the run it changes as well.
    """
    from rlinfra.plan import BUCKET_ENV

    readers: dict[str, list[str]] = {name: [] for name in plan.profile.env}
    if plan.profile.workload is not None:
        for name, fields in job_spec(plan).env_readers.items():
            readers.setdefault(name, []).extend(fields)
    if BUCKET_ENV in readers and plan.profile.storage:
        readers[BUCKET_ENV].append("storage bucket names")
    return readers


def landing(readers: list[str]) -> str:
    if not readers:
        return "node environment only (no setting reads it)"
    shown = ", ".join(readers[:4]) + (f" (+{len(readers) - 4} more)" if len(readers) > 4 else "")
    return f"read by {shown}"


def report_overrides(plan: Plan) -> None:
    readers = env_readers(plan) if any(c.field.startswith("env.") for c in plan.overrides) else {}
    for change in plan.overrides:
        where = ""
        if change.field.startswith("env."):
            where = "; " + landing(readers.get(change.field.removeprefix("env."), []))
        ui.info(
            f"override {change.field}: {change.old} -> {change.new} (from the command line){where}"
        )
    if plan.profile.workload is not None:
        for warning in job_spec(plan).warnings:
            ui.warn(warning)


def report_secrets(plan: Plan, flags: Mapping[str, str | None], environ: Mapping[str, str]) -> None:
    """Which secrets `up` and `run` will need, and whether each has a value now."""
    rows = secret_status(plan.profile, flags, environ)
    if not rows:
        return
    parts = []
    for row in rows:
        need = "required" if row.required else "optional"
        state = (
            "set"
            if row.available
            else ("not set: up and run refuse" if row.required else "not set")
        )
        parts.append(f"{row.name} ({need}, {state})")
    ui.info("secrets for up and run: " + ", ".join(parts))


def check_collisions(plan: Plan, home: Path) -> None:
    """Two local clusters must not share a subnet."""
    if plan.subnet is None:
        return
    for other in known_clusters(home):
        if other == plan.cluster:
            continue
        other_record = read_record(deployment_dir(other, home))
        if (
            other_record is not None
            and other_record.subnet == plan.subnet
            and other_record.stage != Stage.DOWN
        ):
            raise UsageError(
                f"{plan.source}: network.subnet: {plan.subnet} is used by cluster {other!r}",
                "Set network.subnet to another /24 in 10.213.0.0/16.",
            )


def controller_facts(plan: Plan, home: Path, build: bool) -> Controller:
    from rlinfra.controller import (
        build_wheelhouse,
        stage_uv,
        staged_uv,
        system_python,
        uv_binary,
        wheelhouse_dir,
    )

    wheelhouse: str | None = None
    cache = rlinfra_cache(home)
    source = plan.profile.software.wheelhouse
    if source == "auto":
        folder = (
            build_wheelhouse(cache, plan.pins, source)
            if build
            else wheelhouse_dir(cache, plan.pins)
        )
        wheelhouse = str(folder)
    elif source:
        wheelhouse = str(build_wheelhouse(cache, plan.pins, source))
    uv = uv_binary()
    on_hosts: str | None = None
    if cloud_for(plan.cloud).hosts_see_controller_files:
        # The hosts see the cache: each copies uv from there instead of through SSH.
        on_hosts = str(stage_uv(cache, uv) if build else staged_uv(cache, uv))
    return Controller(
        uv_binary=uv,
        system_python=system_python(),
        wheelhouse=wheelhouse,
        uv_binary_on_hosts=on_hosts,
        aws_endpoint=os.environ.get("RLINFRA_AWS_ENDPOINT_URL") or None,
        tf_plugin_mirror=os.environ.get("RLINFRA_TF_PLUGIN_MIRROR") or None,
    )


def services(plan: Plan) -> list[dict[str, Any]]:
    """What the cluster serves on its head node, by port (for `status`)."""
    serving = plan.profile.serving
    out: list[dict[str, Any]] = []
    if serving is not None and serving.model is not None:
        out.append({"name": "model", "engine": serving.model.engine, "port": serving.model.port})
    if serving is not None and serving.retrieval is not None:
        out.append({"name": "retrieval", "engine": "ray-serve", "port": serving.retrieval.port})
    return out


def make_context(
    plan: Plan, folder: Path, home: Path, build: bool, task_id: str | None = None
) -> Context:
    record = read_record(folder)
    if build:
        ensure_ray_token(folder)
    return Context(
        deployment_dir=folder,
        home=home,
        cache=rlinfra_cache(home),
        ssh_public_key=ensure_ssh_key(folder),
        task_id=(record.task_id if record else None) or task_id or new_task_id(plan.cluster),
        controller=controller_facts(plan, home, build),
    )


def paths_context(plan: Plan, folder: Path, home: Path) -> Context:
    """The deployment's paths alone (no key, no token, nothing built): for checks that come
    before any change."""
    return Context(
        deployment_dir=folder,
        home=home,
        cache=rlinfra_cache(home),
        ssh_public_key="",
        task_id="",
        controller=controller_facts(plan, home, build=False),
    )


def identity(plan: Plan, ctx: Context) -> dict[str, Any]:
    """The record's fields that name the cluster and where it comes from (every command that
    writes the deployment folder sets them)."""
    return {
        "cluster": plan.cluster,
        "cloud": plan.cloud,
        "profile": plan.profile.name,
        "source": plan.source,
        "task_id": ctx.task_id,
        "subnet": plan.subnet,
    }
