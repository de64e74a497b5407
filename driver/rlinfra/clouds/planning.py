"""Planning on every cloud rlinfra has: ``rlinfra.plan``'s pure decisions with the registry's
clouds (``rlinfra.clouds.registry.CLOUDS``), and the workload's job checked before anything is spent."""

from __future__ import annotations

from rlinfra.clouds.registry import CLOUDS, cloud_for
from rlinfra.jobspec import job_spec
from rlinfra.plan import Plan, decide
from rlinfra.plan import needs_account as _needs_account
from rlinfra.plan import with_account as _with_account
from rlinfra.profile import Override, Profile


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
