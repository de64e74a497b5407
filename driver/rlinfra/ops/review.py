"""What a reviewer sees before money is spent: the rendered folder and the Terraform plans."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlinfra.clouds.registry import cloud_for
from rlinfra.context import Context, rlinfra_cache, rlinfra_home
from rlinfra.deploy import cluster_lock, deployment_dir, read_record, write_files, write_record
from rlinfra.errors import UsageError
from rlinfra.ops.prepare import controller_facts, env_readers, identity, make_context
from rlinfra.ops.roots import explain_failure, find_gone, open_root, replacing
from rlinfra.plan import Plan
from rlinfra.record import Record
from rlinfra.render import render
from rlinfra.secrets import secret_status

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
    from rlinfra.audit import prices_of
    from rlinfra.runners.terraform import terraform_binary

    home = rlinfra_home()
    terraform_binary()
    folder = (out or deployment_dir(plan.cluster, home)).resolve()
    # The folders this command makes (the deployment's, and any above it that are missing):
    # removed again when it fails, so that a plan that stopped leaves no cluster behind.
    made = [path for path in (folder, *folder.parents) if not path.exists()]
    prices = prices_of(plan.choices)
    with cluster_lock(folder, "plan"):
        try:
            roots, digest = _plan_roots(plan, folder, home, prices)
        except BaseException:
            _remove_made(made)
            raise
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


def _plan_roots(plan: Plan, folder: Path, home: Path, prices: Any) -> tuple[dict[str, Any], str]:
    """`audit` in the locked ``folder``: each root's saved plan and summary, and the digest of
    the rendered files. A Terraform command that failed for want of credentials or a provider
    says which (``explain_failure``)."""
    from rlinfra.audit import render_text, summarize
    from rlinfra.errors import TerraformError

    cloud = cloud_for(plan.cloud)
    ctx = make_context(plan, folder, home, build=False)
    files = render(plan, ctx)
    write_files(folder, files)
    record = read_record(folder) or Record(cluster=plan.cluster)
    write_record(folder, record.with_(**identity(plan, ctx)))
    roots: dict[str, Any] = {}
    for root in cloud.roots:
        if root not in cloud.tfvars(plan, ctx):
            continue
        tf = open_root(ctx, root)
        try:
            tf.init()
            gone = find_gone(cloud, tf, root)
            replacing(gone)
            changed = tf.plan(replace=[item.address for item in gone])
        except TerraformError as exc:
            explained = explain_failure(cloud, exc, ctx.controller.tf_plugin_mirror)
            if explained is exc:
                raise
            raise explained from exc
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
    return roots, digest


def _remove_made(made: list[Path]) -> None:
    """Remove the deployment folder that this command made (``made[0]``), then each folder
    above it that it made, while empty."""
    import shutil

    if not made:
        return
    shutil.rmtree(made[0], ignore_errors=True)
    for parent in made[1:]:
        try:
            parent.rmdir()
        except OSError:
            return


def plan_summary(
    plan: Plan, secret_flags: Mapping[str, str | None], environ: Mapping[str, str]
) -> dict[str, Any]:
    """What `plan` shows (and prints as JSON): the nodes, machines and their prices, buckets,
    software, overrides, the environment the workload reads, and the secrets' state."""
    readers = env_readers(plan)
    return {
        "cluster": plan.cluster,
        "cloud": plan.cloud,
        "profile": plan.profile.name,
        "nodes": [
            {
                "name": n.name,
                "rank": n.rank,
                "role": n.role,
                **({"where": n.where} if n.where else {}),
            }
            for n in plan.nodes
        ],
        "accelerator": str(plan.accelerator) if plan.accelerator else None,
        "instance_type": plan.instance_type,
        "candidates": [
            {
                "instance_type": c.instance_type,
                "accelerator": str(c.accelerator) if c.accelerator else None,
                "hourly_usd": None if math.isnan(c.hourly) else c.hourly,
                "chosen": i == 0,
            }
            for i, c in enumerate(plan.choices)
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
            for i, o in enumerate(plan.clouds)
        ],
        "clouds_left_out": list(plan.clouds_left_out),
        "subnet": plan.subnet,
        "pin_set": plan.pins.name,
        "packages": list(plan.pins.packages),
        "buckets": plan.storage_buckets,
        "ray": plan.profile.network.ray.model_dump(),
        "overrides": [
            {
                **o.__dict__,
                **(
                    {"read_by": readers.get(o.field.removeprefix("env."), [])}
                    if o.field.startswith("env.")
                    else {}
                ),
            }
            for o in plan.overrides
        ],
        "env": {name: {"read_by": fields} for name, fields in readers.items()},
        "secrets": [
            {"name": row.name, "required": row.required, "set": row.available}
            for row in secret_status(plan.profile, secret_flags, environ)
        ],
    }
