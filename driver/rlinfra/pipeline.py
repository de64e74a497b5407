"""The stages of `up`, `down`, `check` and friends: where decisions meet the runners.

validate -> plan (pure) -> write the deployment folder -> terraform -> inventory -> ansible ->
record. Every stage records how far it got, so an interrupted run is re-run to convergence.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rlinfra import __version__, layout, ui
from rlinfra.clouds import cloud_for
from rlinfra.clouds.base import Cloud, Gone
from rlinfra.context import Context, Controller, rlinfra_cache, rlinfra_home
from rlinfra.deploy import (
    RAY_TOKEN_FILE,
    Record,
    Stage,
    cluster_lock,
    deployment_dir,
    ensure_ray_token,
    ensure_ssh_key,
    known_clusters,
    lock_holder,
    new_task_id,
    read_record,
    require_cluster,
    update_record,
    write_files,
    write_record,
)
from rlinfra.errors import OperationError, UsageError
from rlinfra.plan import Plan, make_plan, needs_account
from rlinfra.profile import Overrides, apply_overrides, load_profile, profile_from_data
from rlinfra.render import Host, render, render_inventory
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
    plan = make_plan(profile, source, request.cluster, tuple(changes))
    if account is not None and profile.ssh is not None and profile.ssh.detect_gpus:
        # `plan`, `render`, `up`: the hosts say what GPUs they have (read-only SSH).
        from rlinfra.clouds.ssh import with_detected_gpus

        profile, detected = with_detected_gpus(plan)
        changes.append(detected)
        plan = make_plan(profile, source, request.cluster, tuple(changes))
    for name, flag in request.overrides.secrets.items():
        if flag is not None and flag != "-" and not flag.startswith("@"):
            ui.warn(LITERAL_SECRET_WARNING.format(name=name))
    secrets = resolve_secrets(
        profile, request.overrides.secrets, environ, source, require=need_secrets
    )
    # A profile of several clouds is now the chosen cloud's (plan.clouds keeps the others).
    profile = plan.profile
    if account in ("lookup", "require") and needs_account(profile):
        cloud = cloud_for(profile.cloud)
        if account == "require":
            # What needs no cloud call is refused first.
            cloud.check_inputs(plan)
        account_id = cloud.account_id(environ, required=account == "require")
        if account_id is not None:
            others, left_out = plan.clouds, plan.clouds_left_out
            plan = make_plan(profile, source, request.cluster, tuple(changes), account=account_id)
            plan = replace(plan, clouds=others, clouds_left_out=left_out)
    return plan, secrets


def env_readers(plan: Plan) -> dict[str, list[str]]:
    """Each profile env variable: the settings that read it (empty: the node environment only).

    Every variable is also exported to the nodes (``/opt/rlinfra/node.env``); this says which
    settings of the run it changes as well.
    """
    from rlinfra.plan import BUCKET_ENV

    readers: dict[str, list[str]] = {name: [] for name in plan.profile.env}
    if plan.profile.workload is not None:
        for name, fields in plan.job.env_readers.items():
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
        for warning in plan.job.warnings:
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
    if plan.profile.cloud == "local":
        # Local hosts see the cache: each copies uv from there instead of through SSH.
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


REVIEW_KEY = "ssh-ed25519 AAAAREVIEWPLACEHOLDER rlinfra review: `up` makes the key in {path}"


def render_to(plan: Plan, out: Path, home: Path | None = None) -> list[str]:
    """`rlinfra render`: write the deployment's rendered files into ``out``, for review.

    The files name the cluster's own deployment folder (where `up` keeps the key, the token and
    the state), but nothing is written there, and no secret is written anywhere: the SSH public
    key is the cluster's when it has one, else a placeholder; there is no private key.
    """
    home = home or rlinfra_home()
    folder = deployment_dir(plan.cluster, home)
    target = out.resolve()
    if target == folder.resolve() or folder.resolve() in target.parents:
        raise UsageError(
            f"--out {out}: that is the cluster's own deployment folder",
            "Render into another folder; `up` writes this one.",
        )
    pub = folder / "ssh" / "id_ed25519.pub"
    record = read_record(folder)
    ctx = Context(
        deployment_dir=folder,
        home=home,
        cache=rlinfra_cache(home),
        ssh_public_key=(
            pub.read_text().strip()
            if pub.is_file()
            else REVIEW_KEY.format(path=folder / "ssh" / "id_ed25519")
        ),
        # A review render has no run yet: the run id is assigned by the first `up`.
        task_id=(record.task_id if record else None) or f"{plan.cluster}-unassigned",
        controller=controller_facts(plan, home, build=False),
    )
    return write_files(target, render(plan, ctx))


# ---------------------------------------------------------------- plan (for auditors)


def rendered_digest(files: dict[str, str]) -> str:
    import hashlib

    digest = hashlib.sha256()
    for rel in sorted(files):
        digest.update(rel.encode() + b"\0" + files[rel].encode() + b"\0")
    return digest.hexdigest()


def audit(plan: Plan, out: Path | None = None) -> dict[str, Any]:
    """Render, `terraform plan` every root, save the plans and their JSON, and summarize them.

    The saved plans are what `rlinfra up --from-plan` applies, refusing if the rendered
    configuration changed since.
    """
    from rlinfra.audit import prices_of, render_text, summarize
    from rlinfra.runners.terraform import terraform_binary

    home = rlinfra_home()
    cloud = cloud_for(plan.cloud)
    terraform_binary()
    folder = (out or deployment_dir(plan.cluster, home)).resolve()
    prices = prices_of(plan.choices)
    with cluster_lock(folder, "plan"):
        ctx = make_context(plan, folder, home, build=False)
        files = render(plan, ctx)
        write_files(folder, files)
        record = read_record(folder) or Record(cluster=plan.cluster)
        write_record(
            folder,
            record.with_(
                cluster=plan.cluster,
                cloud=plan.cloud,
                profile=plan.profile.name,
                source=plan.source,
                task_id=ctx.task_id,
                subnet=plan.subnet,
            ),
        )
        roots: dict[str, Any] = {}
        for root in cloud.roots:
            if root not in cloud.tfvars(plan, ctx):
                continue
            tf = _terraform(ctx, root)
            tf.init()
            gone = _gone(cloud, tf, root)
            _replacing(gone)
            changed = tf.plan(replace=[item.address for item in gone])
            shown = tf.show_json()
            (tf.root / "tfplan.json").write_text(json.dumps(shown, indent=2, sort_keys=True) + "\n")
            summary = summarize(shown, prices)
            roots[root] = {
                "changes": changed,
                "summary": summary.to_json(),
                "plan_file": str(tf.root / "tfplan"),
                "text": render_text(summary),
            }
        digest = rendered_digest(files)
        (folder / "plan-digest.txt").write_text(digest + "\n")
    return {
        "cluster": plan.cluster,
        "folder": str(folder),
        "digest": digest,
        "candidates": [
            {
                "instance_type": c.instance_type,
                "accelerator": str(c.accelerator or "cpu"),
                "hourly_usd": c.hourly if c.hourly == c.hourly else None,
                "chosen": i == 0,
            }
            for i, c in enumerate(plan.choices)
        ],
        "roots": roots,
        "hourly_usd": round(sum(r["summary"]["hourly_usd"] or 0.0 for r in roots.values()), 4),
    }


# ---------------------------------------------------------------- up


def _terraform(ctx: Context, root: str) -> Any:
    return _terraform_at(ctx.deployment_dir, root, ctx.controller.tf_plugin_mirror)


def _gone(cloud: Cloud, tf: Any, root: str) -> list[Gone]:
    """Resources of the root's state that the cloud lost and Terraform cannot see.

    ``tf`` must be initialized. A cloud that does not look for lost resources costs nothing
    here (``terraform show -json`` of the state starts the provider).
    """
    if not cloud.finds_gone or not tf.has_state():
        return []
    return cloud.gone_resources(root, tf.root, tf.state_json())


def _replacing(gone: list[Any]) -> list[str]:
    """Warn of each lost resource that Terraform replaces; the warnings, for the result."""
    lines = [f"{item.what}: {item.reason}" for item in gone]
    for line in lines:
        ui.warn(f"{line}; Terraform replaces it")
    return lines


def _apply_root(tf: Any, gone: list[Any], from_plan: bool = False) -> bool:
    """plan + apply of one initialized root, replacing ``gone``; whether it changed anything.

    With ``from_plan`` the plan saved by `rlinfra plan --terraform` is applied as it is
    (Terraform itself refuses a plan whose state has moved on; ``_require_replacements`` has
    checked that it replaces what was lost since).
    """
    if from_plan and (tf.root / "tfplan").is_file():
        tf.apply()
        return True
    changed: bool = tf.plan(replace=[item.address for item in gone])
    if changed:
        tf.apply()
    else:
        ui.info(f"terraform ({tf.root.name}): no changes")
    return changed


def _apply_with_failover(
    plan: Plan, ctx: Context, cloud: Cloud, tf: Any, gone: list[Gone]
) -> tuple[Plan, bool]:
    """Apply the cluster root with the plan's machine; when the cloud has no capacity or quota
    for it, the next candidate in the plan's order, and so on. Each try and its error are
    shown; Terraform's state stays consistent (a failed create leaves nothing, the next try
    replaces what the last one made). Returns the plan that was applied."""
    import dataclasses

    from rlinfra.errors import TerraformError

    tried: list[str] = []
    choices = list(plan.choices)
    for index, choice in enumerate(choices):
        if index:
            rest = [c for c in choices if c is not choice]
            plan = dataclasses.replace(
                plan,
                choices=(choice, *rest),
                accelerator=choice.accelerator or plan.accelerator,
            )
            # Every file the machine decides is rendered again (tfvars, Ansible's GPU checks).
            write_files(ctx.deployment_dir, render(plan, ctx))
        try:
            return plan, _apply_root(tf, gone)
        except TerraformError as exc:
            code = cloud.capacity_error(exc.output)
            if code is None:
                raise
            tried.append(f"{choice.instance_type}: {code}")
            following = (
                f"; trying {choices[index + 1].instance_type} ({index + 2} of {len(choices)})"
                if index + 1 < len(choices)
                else ""
            )
            ui.warn(f"capacity: {choice.instance_type} in {ctx_zone(plan)}: {code}{following}")
    raise OperationError(
        f"no candidate could be created ({'; '.join(tried)})",
        "Try another zone or region (zone:, region:), other accelerators, or on-demand "
        "capacity; the state is consistent, and re-running `up` tries them again.",
    )


def ctx_zone(plan: Plan) -> str:
    return plan.profile.zone or plan.profile.region or plan.cloud


def _require_replacements(tf: Any, gone: list[Any]) -> None:
    """A saved plan must replace what was lost since: otherwise Ansible would meet no host."""
    if not gone or not (tf.root / "tfplan").is_file():
        return
    replaced = {
        change["address"]
        for change in tf.show_json().get("resource_changes") or []
        if {"delete", "create"} <= set(change.get("change", {}).get("actions") or [])
    }
    missing = [item for item in gone if item.address not in replaced]
    if missing:
        raise UsageError(
            f"{missing[0].what} was lost after the plan was saved ({missing[0].reason}); "
            "nothing was applied",
            "Review a new plan, which replaces it: rlinfra plan --terraform",
        )


@dataclass
class UpResult:
    cluster: str
    hosts: list[Host]
    terraform_changed: bool
    ansible_changed: int
    check: dict[str, Any] | None
    # "applied": the playbook ran; "verified": skipped, every node checked (rlinfra.verify).
    configured: str = "applied"
    # What the node check found, when it found something (the playbook then ran).
    verify_problems: list[str] = field(default_factory=list)
    # What the cloud had lost under a standing state, and Terraform made again.
    replaced: list[str] = field(default_factory=list)
    # Wall-clock seconds of the phases: terraform, ansible (verify or playbook) and, when the
    # playbook ran, ray_join (its ray_cluster role).
    seconds: dict[str, float] = field(default_factory=dict)


def up(
    plan: Plan,
    secrets: dict[str, str],
    run_check: bool = True,
    stop_after: str | None = None,
    from_plan: bool = False,
    full: bool = False,
) -> UpResult:
    """Create or converge a cluster. Safe to re-run after any failure or interrupt."""
    from rlinfra.runners.terraform import terraform_binary, terraform_version

    home = rlinfra_home()
    cloud = cloud_for(plan.cloud)
    binary = terraform_binary()
    cloud.preflight(plan)
    check_collisions(plan, home)
    folder = deployment_dir(plan.cluster, home)
    existing = read_record(folder)
    if existing and existing.cloud != plan.cloud:
        raise UsageError(
            f"cluster {plan.cluster!r} exists on cloud {existing.cloud!r}, "
            f"the profile says {plan.cloud!r}",
            "Pick another cluster name with --cluster, or `rlinfra down` it first.",
        )
    kept = list(existing.buckets) if existing else []
    if kept and kept != plan.storage_buckets:
        # Terraform would replace the kept bucket (and its checkpoints) with the new name's.
        raise UsageError(
            f"cluster {plan.cluster!r} keeps its checkpoints in bucket {kept[0]}, and the plan "
            f"names {plan.storage_buckets[0] if plan.storage_buckets else 'none'}; nothing was "
            "changed",
            f"Keep it with --env CHECKPOINT_BUCKET_NAME={kept[0]}, or remove it first with "
            f"`rlinfra down {plan.cluster} --delete-buckets`.",
        )
    report_overrides(plan)
    # Where the cache, wheelhouse and buckets will be: refused before anything is built or
    # written (the deployment folder, its key and token included).
    cloud.check_context(plan, paths_context(plan, folder, home))

    with cluster_lock(folder, "up"):
        ctx = make_context(plan, folder, home, build=True)
        files = render(plan, ctx)
        if from_plan:
            saved = folder / "plan-digest.txt"
            if not saved.is_file():
                raise UsageError(
                    f"cluster {plan.cluster!r} has no saved plan",
                    f"Make one: rlinfra plan --terraform -c {plan.cluster}",
                )
            if saved.read_text().strip() != rendered_digest(files):
                raise UsageError(
                    f"the rendered configuration of {plan.cluster!r} changed since its plan "
                    "was saved; nothing was applied",
                    "Review a new plan: rlinfra plan --terraform",
                )
        write_files(folder, files)
        terraforms = {
            root: _terraform(ctx, root)
            for root in cloud.roots
            if (folder / "terraform" / root / "terraform.tfvars.json").is_file()
        }
        gone: dict[str, list[Any]] = {}
        if from_plan:
            # Every saved plan is checked before any is applied.
            for root, tf in terraforms.items():
                tf.init()
                gone[root] = _gone(cloud, tf, root)
                _require_replacements(tf, gone[root])
        before = read_record(folder) or Record(cluster=plan.cluster)
        record = before.with_(
            cluster=plan.cluster,
            cloud=plan.cloud,
            profile=plan.profile.name,
            source=plan.source,
            task_id=ctx.task_id,
            subnet=plan.subnet,
            buckets=plan.storage_buckets,
            num_nodes=plan.num_nodes,
            gpus_per_node=plan.gpus_per_node,
            ray=plan.profile.network.ray.model_dump(),
            services=services(plan),
            versions={"rlinfra": __version__, "terraform": terraform_version(binary)},
            resolved_profile=plan.profile.model_dump(mode="json"),
            instance_type=plan.instance_type,
            paths=layout.paths(),
            stage=Stage.RENDERED,
            error=None,
        )
        write_record(folder, record)
        try:
            changed = False
            replaced: list[str] = []
            seconds: dict[str, float] = {}
            started = time.monotonic()
            for root, tf in terraforms.items():
                tf.init()
                if root not in gone:
                    gone[root] = _gone(cloud, tf, root)
                replaced += _replacing(gone[root])
                if root == "cluster" and not from_plan and len(plan.choices) > 1:
                    plan, applied = _apply_with_failover(plan, ctx, cloud, tf, gone[root])
                    changed = applied or changed
                    update_record(folder, instance_type=plan.instance_type)
                else:
                    changed = _apply_root(tf, gone[root], from_plan) or changed
            if from_plan:
                (folder / "plan-digest.txt").unlink(missing_ok=True)
            given = cloud.hosts_from_plan(plan, ctx)
            hosts = (
                given
                if given is not None
                else cloud.hosts_from_outputs(_terraform(ctx, "cluster").output())
            )
            (folder / "ansible" / "inventory.yml").write_text(render_inventory(plan, hosts, ctx))
            update_record(folder, stage=Stage.INFRASTRUCTURE, hosts=hosts)
            seconds["terraform"] = time.monotonic() - started
            if stop_after == "infrastructure":
                return UpResult(
                    plan.cluster, hosts, changed, 0, None, replaced=replaced, seconds=seconds
                )
            started = time.monotonic()

            from rlinfra import verify
            from rlinfra.runners.ansible import run_playbook

            extravars: dict[str, Any] = {"acceptance_enabled": False}
            digest = verify.inputs_digest(folder / "ansible", extravars)
            verified = None
            if (
                not full
                and not changed
                and before.stage == Stage.READY
                and before.ansible_digest == digest
            ):
                with ui.step(f"verify {len(hosts)} node(s) against the last configuration run"):
                    verified = verify.verify_cluster(folder, hosts, digest)
                if verified.ok:
                    ui.info(
                        "ansible: skipped, the inputs are unchanged and every node verified "
                        "(--full runs every role)"
                    )
                else:
                    more = len(verified.problems) - 1
                    ui.info(
                        f"verify: {verified.reason}"
                        + (f" (+{more} more)" if more else "")
                        + "; running Ansible"
                    )
            ansible_changed = 0
            if verified is None or not verified.ok:
                update_record(folder, ansible_digest=None)
                cloud.before_configure(plan, folder, hosts)
                result = run_playbook(
                    folder / "ansible",
                    "site.yml",
                    f"configure {len(hosts)} node(s) with Ansible",
                    extravars={**extravars, "rlinfra_inputs_digest": digest},
                )
                ansible_changed = result.total_changed
                if "ray_cluster" in result.role_seconds:
                    seconds["ray_join"] = result.role_seconds["ray_cluster"]
                update_record(folder, ansible_digest=digest)
                ui.info(f"ansible: changed={ansible_changed} on {len(hosts)} node(s)")
            configured = "verified" if verified is not None and verified.ok else "applied"
            seconds["ansible"] = time.monotonic() - started
            check = None
            if run_check and plan.profile.check.enabled:
                previous = before.check if before.stage == Stage.READY else None
                if previous and not changed and ansible_changed == 0:
                    # Nothing changed since the last passing check: its result still holds.
                    ui.info("acceptance check: nothing changed since the last pass, not re-run")
                    check = previous
                else:
                    (folder / "check.json").unlink(missing_ok=True)
                    _run_check(folder, hosts)
                    check = _read_check(folder)
            update_record(folder, stage=Stage.READY, check=check)
            return UpResult(
                plan.cluster,
                hosts,
                changed,
                ansible_changed,
                check,
                configured,
                verified.problems if verified is not None else [],
                replaced,
                seconds,
            )
        except KeyboardInterrupt:
            update_record(folder, stage=Stage.INTERRUPTED, error="interrupted by the user")
            raise
        except OperationError as exc:
            update_record(folder, stage=Stage.FAILED, error=exc.message)
            raise


# Where the acceptance role keeps the running check's pid and its script, on every node.
ACCEPTANCE_SCRIPT = layout.ACCEPTANCE_SCRIPT
ACCEPTANCE_PIDFILE = layout.ACCEPTANCE_PIDFILE


def _run_check(folder: Path, hosts: list[Host]) -> None:
    """The check playbook; interrupted, it also ends the all-reduce it started on the nodes."""
    from rlinfra.runners.ansible import run_playbook

    try:
        run_playbook(folder / "ansible", "check.yml", "acceptance check (all-reduce)")
    except KeyboardInterrupt:
        with ui.step("interrupted: ending the all-reduce on the nodes"):
            stopped = stop_remote_checks(folder, hosts)
        for name in stopped:
            ui.info(f"stopped the all-reduce on {name}")
        raise


def stop_remote_checks(folder: Path, hosts: list[Host]) -> list[str]:
    """End a running acceptance check on every node; the nodes where one was running."""
    from concurrent.futures import ThreadPoolExecutor

    from rlinfra.jobs import NODE_PYTHON
    from rlinfra.runners import ssh

    command = f"{NODE_PYTHON} {ACCEPTANCE_SCRIPT} --stop --pidfile {ACCEPTANCE_PIDFILE}"

    def stop(host: Host) -> str | None:
        try:
            done = ssh.run(folder, host, command, capture=True, timeout=30)
        except subprocess.TimeoutExpired:
            return None
        return host.name if done.returncode == 0 and "stopped" in (done.stdout or "") else None

    with ThreadPoolExecutor(max_workers=min(16, max(1, len(hosts)))) as pool:
        return [name for name in pool.map(stop, hosts) if name]


def _read_check(folder: Path) -> dict[str, Any] | None:
    path = folder / "check.json"
    if not path.is_file():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


# ---------------------------------------------------------------- check


# How long `check` waits for each node's answer before calling it unreachable.
CHECK_REACH_S = 20.0


def _is_lost(problem: str) -> bool:
    """A node problem that stops an all-reduce: unreachable, or not alive in Ray."""
    text = problem.lower()
    return any(word in text for word in ("no answer", "did not run", "gave no answer", "ray"))


def check(cluster: str) -> dict[str, Any]:
    from rlinfra import verify

    folder, record = require_cluster(cluster)
    _require_ready(cluster, record)
    (folder / "check.json").unlink(missing_ok=True)
    with cluster_lock(folder, "check"):
        # A node that is unreachable or gone from Ray fails the check at once, by name, instead
        # of an all-reduce that waits for it.
        hosts = list(record.hosts)
        with ui.step(f"reach {len(hosts)} node(s) and their Ray"):
            found = verify.verify_cluster(
                folder, hosts, record.ansible_digest or "", timeout=CHECK_REACH_S
            )
        # A worker's own problem names the node that is gone; the head's report follows it.
        lost = sorted(
            (p for p in found.problems if _is_lost(p)),
            key=lambda p: p.startswith(f"{hosts[0].name}:"),
        )
        if lost:
            more = f" (+{len(lost) - 1} more)" if len(lost) > 1 else ""
            raise OperationError(
                f"acceptance check not run: {lost[0]}{more}",
                f"`rlinfra up {cluster}` heals the cluster; then check again.",
            )
        _run_check(folder, hosts)
    result = _read_check(folder)
    if result is None:
        raise OperationError("the acceptance check wrote no result")
    update_record(folder, check=result)
    return result


def _require_ready(cluster: str, record: Record) -> None:
    if record.stage == Stage.DOWN or not record.hosts:
        raise UsageError(
            f"cluster {cluster!r} is down", f"Bring it up: rlinfra up --cluster {cluster}"
        )


# ---------------------------------------------------------------- down


@dataclass
class DownPlan:
    cluster: str
    folder: Path
    hosts: list[Host]
    buckets: list[str]
    delete_buckets: bool
    cloud: str = "local"
    # Object versions in each bucket that --delete-buckets deletes with it (clouds that count).
    contents: dict[str, int] = field(default_factory=dict)
    # Machines that stay (the ssh cloud): what `down` stops and removes on each, shown first.
    release: list[str] = field(default_factory=list)
    purge: bool = False

    def describe(self) -> list[str]:
        lines = [f"cluster {self.cluster}: {len(self.hosts)} node(s)"]
        if self.release:
            lines += self.release
        else:
            lines += [f"  destroy node {h.name} ({h.private_ip})" for h in self.hosts]
        for bucket in self.buckets:
            if not self.delete_buckets:
                lines.append(f"  keep bucket {bucket}")
                continue
            count = self.contents.get(bucket)
            data = f" and its {count} object version(s)" if count else ""
            lines.append(f"  DELETE bucket {bucket}{data}")
        return lines


def plan_down(cluster: str, delete_buckets: bool, purge: bool = False) -> DownPlan:
    from rlinfra.errors import ClusterBusyError

    folder, record = require_cluster(cluster)
    holder = lock_holder(folder)
    if holder is not None and holder["running"]:
        # Refused before the list of what would be destroyed is shown.
        raise ClusterBusyError(
            f"cluster {cluster!r} is busy: `rlinfra {holder['command']}` (pid {holder['pid']}) "
            "holds its lock",
            "Wait for it to finish; the lock is released when that command exits.",
        )
    buckets = list(record.buckets)
    cloud = record.cloud
    contents: dict[str, int] = {}
    provider = cloud_for(cloud)
    if delete_buckets and provider.counts_buckets(folder):
        contents = {bucket: provider.bucket_versions(folder, bucket) for bucket in buckets}
    if purge and not provider.keeps_machines:
        raise UsageError(
            f"--purge: the {cloud} cloud destroys its machines; there is nothing to purge",
            "Run `down` without --purge.",
        )
    release = provider.release_lines(record, purge) if provider.keeps_machines else []
    return DownPlan(
        cluster,
        folder,
        list(record.hosts),
        buckets,
        delete_buckets,
        cloud,
        contents,
        release,
        purge,
    )


def down(todo: DownPlan) -> None:
    folder = todo.folder
    with cluster_lock(folder, "down"):
        stop_tunnels(folder)
        provider = cloud_for(todo.cloud)
        if provider.keeps_machines:
            record = read_record(folder)
            if record is not None:
                provider.release_hosts(folder, record, todo.purge)
        cluster_root = folder / "terraform" / "cluster"
        if cluster_root.is_dir():
            tf = _terraform_at(folder, "cluster")
            if tf.has_state():
                tf.init()
                tf.destroy()
        update_record(folder, stage=Stage.DOWN, hosts=[], check=None)
        (folder / "ssh" / "known_hosts").unlink(missing_ok=True)
        storage_root = folder / "terraform" / "storage"
        if todo.delete_buckets and storage_root.is_dir():
            provider = cloud_for(todo.cloud)
            if provider.counts_buckets(folder):
                # Buckets are made with force_destroy = false: their data goes first, as shown
                # and confirmed, so Terraform never stops halfway on a non-empty bucket.
                for bucket in todo.buckets:
                    if todo.contents.get(bucket):
                        ui.info(
                            f"deleted {provider.empty_bucket(folder, bucket)} object version(s) of {bucket}"
                        )
            tf = _terraform_at(folder, "storage")
            if tf.has_state():
                tf.init()
                tf.destroy()
            update_record(folder, buckets=[])
    record = read_record(folder)
    if record is None or not record.buckets:
        import shutil

        shutil.rmtree(folder)


def _terraform_at(folder: Path, root: str, mirror: str | None = None) -> Any:
    """One Terraform root of a deployment; `down` has no context, so it reads the mirror here."""
    from rlinfra.runners.terraform import Terraform, cli_config

    mirror = mirror or os.environ.get("RLINFRA_TF_PLUGIN_MIRROR") or None
    return Terraform(folder / "terraform" / root, folder / "logs", cli_config(mirror))


# ---------------------------------------------------------------- status


def status(cluster: str, live: bool = True) -> dict[str, Any]:
    folder, record = require_cluster(cluster)
    hosts = list(record.hosts)
    out: dict[str, Any] = {
        "cluster": cluster,
        "cloud": record.cloud,
        "profile": record.profile,
        "stage": record.stage.value,
        "error": record.error,
        "task_id": record.task_id,
        "nodes": [
            {
                "name": h.name,
                "rank": h.rank,
                "role": "head" if h.rank == 0 else "worker",
                "ssh_host": h.ssh_host,
                "private_ip": h.private_ip,
            }
            for h in hosts
        ],
        "buckets": list(record.buckets),
        "services": list(record.services),
        "updated_at": record.updated_at,
        "recoveries": list(record.recoveries),
        "lock": lock_holder(folder),
        "ray": None,
    }
    stopped = out["lock"] is not None and not out["lock"]["running"]
    live_stages = {Stage.READY, Stage.FAILED, Stage.INTERRUPTED}
    if live and hosts and (record.stage in live_stages or stopped):
        out["ray"] = ray_state(folder, hosts, record.dashboard_port)
        if out["ray"].get("reachable") and record.stage == Stage.READY and record.jobs:
            from rlinfra import jobs

            # A command at work on the cluster (an `up`) may change its stage meanwhile: the
            # jobs are then not readable, and status says so instead of failing.
            try:
                out["jobs"] = jobs.list_jobs(record.cluster or cluster)
            except (OperationError, UsageError, subprocess.TimeoutExpired) as exc:
                out["jobs_error"] = exc.message if isinstance(exc, UsageError) else str(exc)
            out["progress"] = training_progress(folder, hosts[0], out.get("jobs") or [])
    return out


def training_progress(folder: Path, head: Host, job_list: list[dict[str, Any]]) -> dict[str, Any]:
    """The latest job's last Verl step (from its log), the last checkpoint in the bucket, the
    served model's step and the spot nodes' preemption notices (rlinfra_node.progress on the
    head)."""
    import re
    import shlex

    import rlinfra_node.progress as probe
    from rlinfra import jobs
    from rlinfra.runners import ssh

    try:
        spec = json.loads((folder / "job.json").read_text())
    except (OSError, ValueError):
        spec = {}
    record = read_record(folder)
    port = next((s["port"] for s in (record.services if record else []) if s["name"] == "model"), 0)
    out: dict[str, Any] = {
        "job_step": None,
        "checkpoint_step": None,
        "served_step": None,
        "notices": [],
    }
    from rlinfra_node.spot_watch import NOTICE_DIR_ENV

    env_vars = spec.get("runtime_env_vars")
    notice_dir = env_vars.get(NOTICE_DIR_ENV) if isinstance(env_vars, dict) else None
    if job_list:
        latest = str(job_list[-1]["submission_id"])
        try:
            steps = re.findall(r"(?m)\bstep:(\d+) - ", jobs.job_logs(folder.name, latest))
            out["job_step"] = int(steps[-1]) if steps else None
            out["job"] = latest
        except (OperationError, UsageError, subprocess.TimeoutExpired):
            pass
    command = shlex.join(
        [
            layout.PYTHON,
            "-I",
            "-",
            str(spec.get("checkpoint_dir") or ""),
            str(port),
            str(notice_dir or ""),
        ]
    )
    try:
        result = ssh.run(
            folder, head, command, capture=True, timeout=30, stdin=Path(probe.__file__).read_bytes()
        )
        if result.returncode == 0:
            found = json.loads(result.stdout.strip().splitlines()[-1])
            out.update({k: found.get(k) for k in ("checkpoint_step", "served_step")})
            out["notices"] = found.get("notices") or []
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        pass
    return out


def ray_state(folder: Path, hosts: list[Host], dashboard_port: int) -> dict[str, Any]:
    """Alive Ray nodes, asked of the head's dashboard over SSH (it listens on loopback only)."""
    from rlinfra.runners import ssh

    # ssh.run loads node.env, which carries the Ray token's settings.
    command = (
        f"{layout.VENV}/bin/ray list nodes --address http://127.0.0.1:{dashboard_port} "
        "--format json --filter state=ALIVE --limit 10000"
    )
    head = hosts[0]
    try:
        result = ssh.run(folder, head, command, capture=True, timeout=60)
    except subprocess.TimeoutExpired:
        return {"reachable": False, "error": "timed out asking the head node"}
    if result.returncode != 0:
        return {"reachable": False, "error": (result.stderr.strip().splitlines() or ["?"])[-1]}
    try:
        nodes = json.loads(result.stdout[result.stdout.index("[") :])
    except ValueError:
        return {"reachable": False, "error": "the head's state API gave no node list"}
    alive = sorted(n["node_ip"] for n in nodes)
    missing = [h.name for h in hosts if h.private_ip not in alive]
    return {
        "reachable": True,
        "alive_nodes": len(alive),
        "alive_ips": alive,
        "missing_nodes": missing,
    }


# ---------------------------------------------------------------- endpoints and tunnels


def endpoint(cluster: str, port: int) -> dict[str, Any]:
    """A URL for ``port`` on the head node that works from this machine.

    Direct when the port answers on the head's address; otherwise through an SSH tunnel that
    rlinfra starts (and `down` stops). For Ray's dashboard (and job API) it also names the file
    that holds the cluster's token, which they ask for (never the token itself).
    """
    folder, record = require_cluster(cluster)
    _require_ready(cluster, record)
    info = _endpoint(folder, record, port)
    if port == record.dashboard_port:
        info["ray_token_file"] = str(folder / RAY_TOKEN_FILE)
    return info


def endpoint_from(cluster: str, port: int, client: str) -> dict[str, Any]:
    """A URL for ``port`` on ``cluster``'s head that works from ``client``'s nodes, checked on
    ``client``'s head (see ``rlinfra.reach``): what a trainer cluster gives its search tool."""
    from rlinfra import reach

    _folder, record = require_cluster(cluster)
    _require_ready(cluster, record)
    client_folder, client_record = require_cluster(client)
    _require_ready(client, client_record)
    client_head = client_record.hosts[0]
    attempts = reach.run_check(client_folder, client_head, port, reach.candidates(record.hosts[0]))
    front = _retrieval_port(record) == port
    return reach.choose(cluster, client, client_head, port, attempts, front=front)


def _retrieval_port(record: Record, with_clients: bool = False) -> int | None:
    """The port of the cluster's retrieval endpoint (``with_clients``: only when it serves
    other clusters, and so checks who asks); None without one."""
    serving = (record.resolved_profile or {}).get("serving") or {}
    retrieval = serving.get("retrieval") or {}
    if not retrieval or (with_clients and not retrieval.get("clients")):
        return None
    return int(retrieval.get("port", 0))


def _endpoint(folder: Path, record: Record, port: int) -> dict[str, Any]:
    from rlinfra.reach import refuses
    from rlinfra.runners import ssh

    head = record.hosts[0]
    direct = not head.ssh_proxy and ssh.port_open(head.ssh_host, port)
    # A retrieval endpoint that serves other clusters (serving.retrieval.clients) may refuse
    # this machine: the tunnel arrives on the head's loopback, which it always lets in.
    if direct and _retrieval_port(record, with_clients=True) == port:
        direct = not refuses(head.ssh_host, port)
    if direct:
        return {"url": f"http://{head.ssh_host}:{port}", "via": "direct", "port": port}
    tunnels = folder / "tunnels"
    tunnels.mkdir(exist_ok=True)
    meta_path = tunnels / f"{port}.json"
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        if _alive(meta["pid"]) and ssh.port_open("127.0.0.1", meta["local_port"]):
            return {
                "url": f"http://127.0.0.1:{meta['local_port']}",
                "via": "ssh-tunnel",
                "port": port,
                "pid": meta["pid"],
            }
    local = ssh.free_local_port()
    argv = ssh.ssh_argv(
        folder,
        head,
        "-N",
        "-o",
        "ExitOnForwardFailure=yes",
        "-L",
        f"127.0.0.1:{local}:127.0.0.1:{port}",
    )
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise OperationError(f"the SSH tunnel to {head.name}:{port} exited ({proc.returncode})")
        if ssh.port_open("127.0.0.1", local, timeout=0.3):
            break
        time.sleep(0.2)
    else:
        proc.terminate()
        raise OperationError(f"the SSH tunnel to {head.name}:{port} did not open")
    meta_path.write_text(json.dumps({"pid": proc.pid, "local_port": local, "remote_port": port}))
    return {"url": f"http://127.0.0.1:{local}", "via": "ssh-tunnel", "port": port, "pid": proc.pid}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def stop_tunnels(folder: Path) -> None:
    tunnels = folder / "tunnels"
    if not tunnels.is_dir():
        return
    for meta_path in tunnels.glob("*.json"):
        pid = json.loads(meta_path.read_text()).get("pid")
        if pid and _alive(pid):
            os.kill(pid, signal.SIGTERM)
        meta_path.unlink()
