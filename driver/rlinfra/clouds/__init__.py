"""One module per cloud, each with the same small surface.

A cloud module provides:

- ``ROOTS``: Terraform roots it renders, each with the modules copied into it;
- ``tfvars(plan, ctx)``: variables per root (pure);
- ``ansible_vars(plan, ctx)``: role variables that differ on this cloud (pure);
- ``preflight(plan)``: read-only checks of the world before anything is created;
- ``hosts_from_outputs(outputs)``: the inventory from ``terraform output -json``.
"""

from __future__ import annotations

from types import ModuleType

from rlinfra.errors import UsageError

# The clouds this version deploys; a profile naming another is refused at `validate`.
SUPPORTED = ("local", "aws")


def cloud_module(name: str) -> ModuleType:
    if name == "local":
        from rlinfra.clouds import local

        return local
    if name == "aws":
        from rlinfra.clouds import aws

        return aws
    raise UsageError(
        f"cloud {name!r} cannot be deployed by this version of rlinfra",
        "Supported clouds: " + ", ".join(SUPPORTED) + ".",
    )
