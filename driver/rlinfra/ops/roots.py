"""A deployment's Terraform roots: open one, find what the world lost, apply."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rlinfra import ui
from rlinfra.clouds.base import Cloud, Gone
from rlinfra.context import Context
from rlinfra.errors import OperationError, RlinfraError, TerraformError, UsageError


def open_root(ctx: Context, root: str) -> Any:
    return open_root_at(ctx.deployment_dir, root, ctx.controller.tf_plugin_mirror)


def find_gone(cloud: Cloud, tf: Any, root: str) -> list[Gone]:
    """Resources of the root's state that the cloud lost and Terraform cannot see.

    ``tf`` must be initialized. A cloud that does not look for lost resources costs nothing
    here (``terraform show -json`` of the state starts the provider).
    """
    if not cloud.finds_gone or not tf.has_state():
        return []
    return cloud.gone_resources(root, tf.root, tf.state_json())


def replacing(gone: list[Any]) -> list[str]:
    """Warn of each lost resource that Terraform replaces; the warnings, for the result."""
    lines = [f"{item.what}: {item.reason}" for item in gone]
    for line in lines:
        ui.warn(f"{line}; Terraform replaces it")
    return lines


def apply_root(tf: Any, gone: list[Any], from_plan: bool = False) -> bool:
    """plan + apply of one initialized root, replacing ``gone``; whether it changed anything.

    With ``from_plan`` the plan saved by `rlinfra plan --terraform` is applied as it is
    (Terraform itself refuses a plan whose state has moved on; ``require_replacements`` has
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


def require_replacements(tf: Any, gone: list[Any]) -> None:
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


def explain_failure(cloud: Cloud, exc: TerraformError, mirror: str | None) -> RlinfraError:
    """What a failed Terraform command lacked, as its output tells: the cloud's credentials, or
    a provider that init could not install (from ``mirror``, RLINFRA_TF_PLUGIN_MIRROR, or else
    from Terraform's registry); any other failure is ``exc`` itself."""
    from rlinfra.runners.terraform import provider_failure

    missing = cloud.credentials_error(exc.output)
    if missing is not None:
        return missing
    failed = provider_failure(exc.output)
    if failed is None:
        return exc
    what = f"Terraform could not install the provider {failed.provider}"
    if mirror and failed.not_in_mirror:
        return UsageError(
            f"{what}: the mirror RLINFRA_TF_PLUGIN_MIRROR={mirror} does not hold it",
            f"Fill it with `terraform providers mirror {mirror}` where registry.terraform.io "
            "is reachable, or unset RLINFRA_TF_PLUGIN_MIRROR to use the registry",
        )
    if not mirror and failed.registry_unreachable:
        return OperationError(
            f"{what}: the provider registry (registry.terraform.io) cannot be reached and "
            "RLINFRA_TF_PLUGIN_MIRROR is not set",
            "Set RLINFRA_TF_PLUGIN_MIRROR to a filesystem mirror that holds it (`terraform "
            "providers mirror DIR` makes one where the registry is reachable), or let this "
            "machine reach registry.terraform.io",
        )
    return OperationError(f"{what}: {failed.reason}", exc.hint)


def open_root_at(folder: Path, root: str, mirror: str | None = None) -> Any:
    """One Terraform root of a deployment; `down` has no context, so it reads the mirror here."""
    from rlinfra.runners.terraform import Terraform, cli_config

    mirror = mirror or os.environ.get("RLINFRA_TF_PLUGIN_MIRROR") or None
    return Terraform(folder / "terraform" / root, folder / "logs", cli_config(mirror))
