"""Profile -> Plan: every decision about a deployment, made without touching the world.

Nothing in this module runs a process, opens a socket or writes a file, so every decision can be
unit-tested from a profile alone.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from rlinfra.accelerators import Accelerator
from rlinfra.errors import UsageError
from rlinfra.pins import PinSet, pin_sets
from rlinfra.profile import BUCKET_NAME_RE, Override, Profile, check_cluster_name


class Candidate(Protocol):
    """A machine a cloud offers for the profile, with its price (plan shows them all)."""

    @property
    def instance_type(self) -> str: ...

    @property
    def accelerator(self) -> Accelerator | None: ...

    @property
    def hourly(self) -> float: ...

    @property
    def planned_as(self) -> str:
        """How a Terraform plan's summary names this machine (``rlinfra.audit``), so that the
        plan's instances are priced."""
        ...


@dataclass(frozen=True)
class Site:
    """Where a cluster goes on its cloud, decided from the profile alone (``Cloud.site``)."""

    accelerator: Accelerator | None
    # The cluster's private network (the local cloud's bridge); None where the cloud picks.
    subnet: str | None = None
    # Machines that meet the profile, the chosen one first, then the others by price.
    choices: tuple[Candidate, ...] = ()
    # Names of the nodes, rank order, where the profile names them (default <cluster>-<rank>),
    # and where each one is, for `plan` (e.g. "root@10.0.0.5:22"; empty: the machine type).
    node_names: tuple[str, ...] = ()
    node_where: tuple[str, ...] = ()


class CloudSite(Protocol):
    """What planning asks of a cloud (``rlinfra.clouds.base.Cloud`` implements it)."""

    @property
    def candidate(self) -> bool:
        """Whether a profile may list the cloud among several (`cloud: [aws, gcp]`): its
        catalog has prices to compare with the others'."""
        ...

    @property
    def buckets_per_account(self) -> bool:
        """Whether default bucket names end in the account's suffix (bucket names are global on
        the cloud); false where buckets are folders of this machine."""
        ...

    def site(self, profile: Profile, source: str, cluster: str, offered: set[str] | None) -> Site:
        """Machines, accelerator and network for the profile (pure)."""
        ...

    def profile_account(self, profile: Profile) -> str | None:
        """The account (or project) the profile names itself; None where it names none."""
        ...


@dataclass(frozen=True)
class NodePlan:
    name: str
    rank: int
    # Where the node is, where the profile says it (the ssh cloud's hosts); else "".
    where: str = ""

    @property
    def role(self) -> str:
        return "head" if self.rank == 0 else "worker"


@dataclass(frozen=True)
class CloudChoice:
    """One machine on one of a profile's candidate clouds (``cloud: [aws, gcp]``)."""

    cloud: str
    region: str | None
    candidate: Candidate


@dataclass(frozen=True)
class Plan:
    """What `up` will build and run, decided from a profile and command-line overrides."""

    cluster: str
    profile: Profile
    source: str
    nodes: tuple[NodePlan, ...]
    accelerator: Accelerator | None
    pins: PinSet
    subnet: str | None
    overrides: tuple[Override, ...] = ()
    secret_names: tuple[str, ...] = field(default_factory=tuple)
    # Cloud machines: the chosen type first, then the other candidates, with prices.
    choices: tuple[Candidate, ...] = ()
    # Bucket names, one per storage entry (see bucket_names).
    buckets: tuple[str, ...] = ()
    # A profile listing several clouds: every cloud's candidates, cheapest first (the chosen
    # cloud's first); empty for a profile of one cloud.
    clouds: tuple[CloudChoice, ...] = ()
    # Candidate clouds that cannot run the profile, with why ("gcp: no machine type ...").
    clouds_left_out: tuple[str, ...] = ()

    @property
    def instance_type(self) -> str | None:
        return self.choices[0].instance_type if self.choices else None

    @property
    def cloud(self) -> str:
        return self.profile.cloud

    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    @property
    def gpus_per_node(self) -> int:
        return self.accelerator.count if self.accelerator else 0

    @property
    def storage_buckets(self) -> list[str]:
        return list(self.buckets)


BUCKET_ENV = "CHECKPOINT_BUCKET_NAME"
# Stands for the account's suffix where the account is not known (a review without credentials).
ACCOUNT_PLACEHOLDER = "account"


def account_suffix(account: str) -> str:
    """8 hex digits of the account id's SHA-256: unique per account, not the id itself."""
    return hashlib.sha256(account.encode()).hexdigest()[:8]


def bucket_names(
    profile: Profile, account: str | None, per_account: bool = True
) -> tuple[str, ...]:
    """Each storage entry's bucket: the profile's name, --env CHECKPOINT_BUCKET_NAME for the
    first entry (the seed's knob), else <prefix>[-<n>]-<account suffix> (prefix: the entry's,
    default rlinfra-<profile>). Without an account (none needed, or none known yet) the suffix
    reads ``account``; without ``per_account`` (buckets that are folders of this machine: no
    account to tell apart) there is none."""
    names: list[str] = []
    suffix = "" if not per_account else account_suffix(account) if account else ACCOUNT_PLACEHOLDER
    exact = profile.env.get(BUCKET_ENV, "").strip()
    for index, item in enumerate(profile.storage):
        if index == 0 and exact:
            names.append(exact)
        elif item.bucket is not None:
            names.append(item.bucket)
        else:
            part = f"-{index}" if index else ""
            base = (item.prefix or f"rlinfra-{profile.name}") + part
            names.append(f"{base[: 62 - len(suffix)]}-{suffix}" if suffix else base[:63])
    return tuple(names)


def needs_account(profile: Profile, clouds: Mapping[str, CloudSite]) -> bool:
    """Whether a bucket name comes from the account (an unnamed bucket, no exact name given)."""
    cloud = clouds.get(profile.cloud)
    if cloud is not None and not cloud.buckets_per_account:
        return False
    if cloud is not None and cloud.profile_account(profile) is not None:
        return False  # the profile names it (a GCP project)
    exact = bool(profile.env.get(BUCKET_ENV, "").strip())
    return any(
        item.bucket is None and not (index == 0 and exact)
        for index, item in enumerate(profile.storage)
    )


def decide(
    profile: Profile,
    source: str,
    clouds: Mapping[str, CloudSite],
    cluster: str | None = None,
    overrides: tuple[Override, ...] = (),
    offered: set[str] | None = None,
    account: str | None = None,
) -> Plan:
    """Decide the deployment on ``clouds`` (the clouds this version deploys, by name). Raises
    UsageError for combinations the models cannot see. The workload's job is checked by
    ``rlinfra.clouds.planning.make_plan``, which plans on every cloud rlinfra has.

    ``account``: the cloud account id, for default bucket names (rlinfra.plan.bucket_names);
    an account the profile names itself (CloudSite.profile_account, a GCP project) comes first.
    """
    name = check_cluster_name(cluster or profile.name)
    if profile.cloud not in clouds:
        raise _unsupported(profile.cloud, source, clouds)
    pinsets = pin_sets()
    if profile.software.pin_set not in pinsets:
        raise UsageError(
            f"{source}: software.pin_set: unknown pin set {profile.software.pin_set!r}",
            "Known pin sets: " + ", ".join(pinsets),
        )
    pins = pinsets[profile.software.pin_set]
    if profile.serving is not None and profile.serving.retrieval is not None:
        try:
            pins = pins.with_retrieval()
        except ValueError as exc:
            raise UsageError(
                f"{source}: software.pin_set: {exc}; serving.retrieval runs the retriever "
                "(faiss, sentence-transformers) in the node venv",
                "Pick a pin set with retrieval packages (e.g. cpu-retrieval, verl-cu126).",
            ) from exc
    candidates = profile.resources.accelerator_candidates
    if len({c.count for c in candidates}) > 1:
        raise UsageError(
            f"{source}: resources.accelerators: candidates must have the same GPU count per node"
        )
    names = _checked_buckets(profile, source, clouds[profile.cloud], account)
    if profile.clouds:
        _check_candidates(profile, source, clouds)
        profile, options, left_out = choose_cloud(profile, source, name, offered, clouds)
        plan = decide(profile, source, clouds, cluster, overrides, offered, account)
        return dataclasses.replace(plan, clouds=options, clouds_left_out=left_out)
    site = clouds[profile.cloud].site(profile, source, name, offered)

    nodes = tuple(
        NodePlan(
            site.node_names[rank] if site.node_names else f"{name}-{rank}",
            rank,
            site.node_where[rank] if site.node_where else "",
        )
        for rank in range(profile.resources.num_nodes)
    )
    plan = Plan(
        cluster=name,
        profile=profile,
        source=source,
        nodes=nodes,
        accelerator=site.accelerator,
        pins=pins,
        subnet=site.subnet,
        overrides=overrides,
        secret_names=tuple(sorted(profile.secrets)),
        choices=site.choices,
        buckets=names,
    )
    return plan


def _checked_buckets(
    profile: Profile, source: str, cloud: CloudSite, account: str | None
) -> tuple[str, ...]:
    """The storage entries' bucket names (``bucket_names``), refused when two are the same or
    one is not a valid name."""
    names = bucket_names(
        profile, cloud.profile_account(profile) or account, cloud.buckets_per_account
    )
    if len(set(names)) != len(names):
        raise UsageError(f"{source}: storage: two entries name the same bucket")
    for bucket in names:
        if not BUCKET_NAME_RE.fullmatch(bucket) or ".." in bucket:
            raise UsageError(
                f"{source}: storage: {bucket!r} is not a valid bucket name"
                + (f" (from {BUCKET_ENV})" if bucket == profile.env.get(BUCKET_ENV) else ""),
                "3-63 characters: lowercase letters, digits, '.', '-'.",
            )
    return names


def with_account(plan: Plan, cloud: CloudSite, account: str) -> Plan:
    """The plan with the cloud account's id known (a fact asked of the cloud after planning,
    once the plan's own checks passed): its default bucket names end in the account's suffix.
    Nothing else of the plan depends on the account."""
    names = _checked_buckets(plan.profile, plan.source, cloud, account)
    return dataclasses.replace(plan, buckets=names)


def _hourly(candidate: Candidate) -> tuple[bool, float]:
    """Sort key: known prices first, cheapest first."""
    return (math.isnan(candidate.hourly), 0.0 if math.isnan(candidate.hourly) else candidate.hourly)


def _unsupported(name: str, source: str, clouds: Mapping[str, CloudSite]) -> UsageError:
    return UsageError(
        f"{source}: cloud: {name!r} is not supported by this version of rlinfra",
        "Supported clouds: " + ", ".join(clouds) + ".",
    )


def _check_candidates(profile: Profile, source: str, clouds: Mapping[str, CloudSite]) -> None:
    """Each cloud of a list is one this version deploys and one whose prices can be compared."""
    able = [name for name, cloud in clouds.items() if cloud.candidate]
    for name in profile.clouds:
        if name not in clouds:
            raise _unsupported(name, source, clouds)
        if not clouds[name].candidate:
            raise UsageError(
                f"{source}: cloud: {name} cannot be one of several candidates "
                f"(only {', '.join(able)} can)"
            )


def choose_cloud(
    profile: Profile,
    source: str,
    cluster: str,
    offered: set[str] | None,
    clouds: Mapping[str, CloudSite],
) -> tuple[Profile, tuple[CloudChoice, ...], tuple[str, ...]]:
    """The profile on the candidate cloud whose best machine is cheapest, and every cloud's
    candidates, cheapest first. A cloud that cannot run the profile is left out; none can, and
    the error names each one's reason."""
    options: list[CloudChoice] = []
    best: dict[str, Candidate] = {}
    errors: list[str] = []
    resolved: dict[str, Profile] = {}
    for cloud in profile.clouds:
        on_cloud = profile.for_cloud(cloud)
        try:
            site = clouds[cloud].site(on_cloud, source, cluster, offered)
        except UsageError as exc:
            errors.append(f"{cloud}: {exc.message.removeprefix(f'{source}: ')}")
            continue
        if not site.choices:
            errors.append(f"{cloud}: no machine meets the profile")
            continue
        resolved[cloud] = on_cloud
        best[cloud] = site.choices[0]
        options += [CloudChoice(cloud, on_cloud.region, c) for c in site.choices]
    if not best:
        raise UsageError(
            f"{source}: cloud: no candidate cloud can run this profile ({'; '.join(errors)})"
        )
    # The cheapest best machine; on a tie (or unknown prices) the cloud listed first.
    chosen = min(best, key=lambda cloud: _hourly(best[cloud]))
    # Every machine, cheapest first (the chosen cloud's best leads: it is the cheapest).
    ordered = sorted(
        options, key=lambda o: (o.candidate is not best[chosen], *_hourly(o.candidate))
    )
    return resolved[chosen], tuple(ordered), tuple(errors)
