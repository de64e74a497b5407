"""`up`: write the deployment folder, apply Terraform (failing over between machines),
configure the nodes with Ansible (or verify them), and check the cluster.

Every stage records how far it got, so an interrupted run is re-run to convergence.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from rlinfra import __version__, layout, ui
from rlinfra.clouds.base import Cloud, Gone
from rlinfra.clouds.registry import cloud_for
from rlinfra.context import Context, rlinfra_home
from rlinfra.deploy import (
    cluster_lock,
    deployment_dir,
    read_record,
    update_record,
    write_files,
    write_record,
)
from rlinfra.errors import OperationError, UsageError
from rlinfra.ops.check import read_check, start_check
from rlinfra.ops.prepare import (
    check_collisions,
    identity,
    make_context,
    paths_context,
    report_overrides,
    services,
)
from rlinfra.ops.review import rendered_digest
from rlinfra.ops.roots import apply_root, find_gone, open_root, replacing, require_replacements
from rlinfra.plan import Plan
from rlinfra.record import Host, Record, Stage
from rlinfra.render import render, render_inventory


def apply_with_failover(
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
            return plan, apply_root(tf, gone)
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


@dataclass
class UpResult:
    cluster: str
    hosts: list[Host]
    terraform_changed: bool
    ansible_changed: int
    check: dict[str, Any] | None
    # "applied": the playbook ran; "verified": skipped, every node checked (rlinfra.ops.verify).
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
            root: open_root(ctx, root)
            for root in cloud.roots
            if (folder / "terraform" / root / "terraform.tfvars.json").is_file()
        }
        gone: dict[str, list[Any]] = {}
        if from_plan:
            # Every saved plan is checked before any is applied.
            for root, tf in terraforms.items():
                tf.init()
                gone[root] = find_gone(cloud, tf, root)
                require_replacements(tf, gone[root])
        before = read_record(folder) or Record(cluster=plan.cluster)
        record = before.with_(
            **identity(plan, ctx),
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
                    gone[root] = find_gone(cloud, tf, root)
                replaced += replacing(gone[root])
                if root == "cluster" and not from_plan and len(plan.choices) > 1:
                    plan, applied = apply_with_failover(plan, ctx, cloud, tf, gone[root])
                    changed = applied or changed
                    update_record(folder, instance_type=plan.instance_type)
                else:
                    changed = apply_root(tf, gone[root], from_plan) or changed
            if from_plan:
                (folder / "plan-digest.txt").unlink(missing_ok=True)
            given = cloud.hosts_from_plan(plan, ctx)
            hosts = (
                given
                if given is not None
                else cloud.hosts_from_outputs(open_root(ctx, "cluster").output())
            )
            (folder / "ansible" / "inventory.yml").write_text(render_inventory(plan, hosts, ctx))
            update_record(folder, stage=Stage.INFRASTRUCTURE, hosts=hosts)
            seconds["terraform"] = time.monotonic() - started
            if stop_after == "infrastructure":
                return UpResult(
                    plan.cluster, hosts, changed, 0, None, replaced=replaced, seconds=seconds
                )
            started = time.monotonic()

            from rlinfra.ops import verify
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
                    check = previous.model_dump()
                else:
                    (folder / "check.json").unlink(missing_ok=True)
                    start_check(folder, hosts)
                    check = read_check(folder)
            update_record(folder, stage=Stage.READY, check=check)
            return UpResult(
                plan.cluster,
                hosts,
                changed,
                ansible_changed,
                check,
                configured,
                [str(p) for p in verified.problems] if verified is not None else [],
                replaced,
                seconds,
            )
        except KeyboardInterrupt:
            update_record(folder, stage=Stage.INTERRUPTED, error="interrupted by the user")
            raise
        except OperationError as exc:
            update_record(folder, stage=Stage.FAILED, error=exc.message)
            raise
