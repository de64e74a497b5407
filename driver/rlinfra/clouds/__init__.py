"""Clouds: one folder each (``clouds/<name>/``), one class behind the interface declared in
``clouds/base.py``, and this registry, the one place that names them.

``REGISTRY`` maps a cloud's name to the module holding its ``CLOUD`` (an instance of a
:class:`~rlinfra.clouds.base.Cloud` subclass), imported on first use; ``cloud_for(name)`` gives
that instance, ``CLOUDS`` every cloud as a mapping, and ``make_plan`` plans a profile on them.
Adding a cloud is its folder, its Terraform and its line here (docs/design.md has the
checklist).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from rlinfra.errors import UsageError
from rlinfra.jobspec import job_spec
from rlinfra.plan import Plan, decide
from rlinfra.plan import needs_account as _needs_account
from rlinfra.plan import with_account as _with_account
from rlinfra.profile import Override, Profile

if TYPE_CHECKING:
    from rlinfra.clouds.base import Cloud

# The clouds this version deploys, by name: the module that holds each one's CLOUD. A profile
# naming another is refused at `validate`.
REGISTRY: dict[str, str] = {
    "local": "rlinfra.clouds.local.cloud",
    "aws": "rlinfra.clouds.aws.cloud",
    "gcp": "rlinfra.clouds.gcp.cloud",
    "ssh": "rlinfra.clouds.ssh.cloud",
}


def cloud_for(name: str) -> Cloud:
    """The cloud called ``name`` (its module is imported on first use)."""
    if name not in REGISTRY:
        raise UsageError(
            f"cloud {name!r} cannot be deployed by this version of rlinfra",
            "Supported clouds: " + ", ".join(REGISTRY) + ".",
        )
    cloud: Cloud = importlib.import_module(REGISTRY[name]).CLOUD
    return cloud


class _Registry(Mapping[str, "Cloud"]):
    """Every registered cloud by name, each imported when first looked up."""

    def __getitem__(self, name: str) -> Cloud:
        if name not in REGISTRY:
            raise KeyError(name)
        return cloud_for(name)

    def __iter__(self) -> Iterator[str]:
        return iter(REGISTRY)

    def __len__(self) -> int:
        return len(REGISTRY)


CLOUDS: Mapping[str, Cloud] = _Registry()


def make_plan(
    profile: Profile,
    source: str,
    cluster: str | None = None,
    overrides: tuple[Override, ...] = (),
    offered: set[str] | None = None,
    account: str | None = None,
) -> Plan:
    """Decide the deployment on the cloud(s) the profile names (``rlinfra.plan.decide``) and
    check its workload's job before anything is spent: Verl override keys, GPU needs, variables.
    """
    plan = decide(profile, source, CLOUDS, cluster, overrides, offered, account)
    if plan.profile.workload is not None:
        job_spec(plan)
    return plan


def with_account(plan: Plan, account: str) -> Plan:
    """The plan with its cloud's account id known (``rlinfra.plan.with_account``)."""
    return _with_account(plan, cloud_for(plan.cloud), account)


def needs_account(profile: Profile) -> bool:
    """Whether a default bucket name derives from the cloud account (``rlinfra.plan``)."""
    return _needs_account(profile, CLOUDS)
