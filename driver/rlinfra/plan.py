"""Profile -> Plan: every decision about a deployment, made without touching the world.

Nothing in this module runs a process, opens a socket or writes a file, so every decision can be
unit-tested from a profile alone.
"""

from __future__ import annotations

import hashlib
import ipaddress
from dataclasses import dataclass, field
from typing import Any

from rlinfra.accelerators import Accelerator
from rlinfra.clouds import SUPPORTED as SUPPORTED_CLOUDS
from rlinfra.errors import UsageError
from rlinfra.pins import PinSet, pin_sets
from rlinfra.profile import BUCKET_NAME_RE, Override, Profile, check_cluster_name

LOCAL_SUPERNET = ipaddress.IPv4Network("10.213.0.0/16")


@dataclass(frozen=True)
class NodePlan:
    name: str
    rank: int

    @property
    def role(self) -> str:
        return "head" if self.rank == 0 else "worker"


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
    choices: tuple[Any, ...] = ()
    # Bucket names, one per storage entry (see bucket_names).
    buckets: tuple[str, ...] = ()

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


def bucket_names(profile: Profile, account: str | None) -> tuple[str, ...]:
    """Each storage entry's bucket: the profile's name, --env CHECKPOINT_BUCKET_NAME for the
    first entry (the seed's knob), else <prefix>[-<n>]-<account suffix> (prefix: the entry's,
    default rlinfra-<profile>). Without an
    account (none needed, or none known yet) the suffix reads ``account``."""
    names: list[str] = []
    # Local buckets are folders of this machine: no account to tell apart.
    suffix = (
        ""
        if profile.cloud == "local"
        else account_suffix(account)
        if account
        else ACCOUNT_PLACEHOLDER
    )
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


def needs_account(profile: Profile) -> bool:
    """Whether a bucket name comes from the account (an unnamed bucket, no exact name given)."""
    if profile.cloud == "local":
        return False
    exact = bool(profile.env.get(BUCKET_ENV, "").strip())
    return any(
        item.bucket is None and not (index == 0 and exact)
        for index, item in enumerate(profile.storage)
    )


def local_subnet(cluster: str) -> str:
    """A stable /24 for a local cluster, derived from its name (inside 10.213.0.0/16).

    Third octets 240-255 are left for tests and explicit profile subnets.
    """
    digest = hashlib.sha256(cluster.encode()).digest()
    third = 16 + digest[0] % 224
    return f"10.213.{third}.0/24"


def make_plan(
    profile: Profile,
    source: str,
    cluster: str | None = None,
    overrides: tuple[Override, ...] = (),
    offered: set[str] | None = None,
    account: str | None = None,
) -> Plan:
    """Decide the deployment. Raises UsageError for combinations the models cannot see.

    ``account``: the cloud account id, for default bucket names (rlinfra.plan.bucket_names).
    """
    name = check_cluster_name(cluster or profile.name)
    if profile.cloud not in SUPPORTED_CLOUDS:
        raise UsageError(
            f"{source}: cloud: {profile.cloud!r} is not supported by this version of rlinfra",
            "Supported clouds: " + ", ".join(SUPPORTED_CLOUDS) + ".",
        )
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
    accelerator = candidates[0] if candidates else None
    if len({c.count for c in candidates}) > 1:
        raise UsageError(
            f"{source}: resources.accelerators: candidates must have the same GPU count per node"
        )

    subnet: str | None = None
    names = bucket_names(profile, account)
    if len(set(names)) != len(names):
        raise UsageError(f"{source}: storage: two entries name the same bucket")
    for bucket in names:
        if not BUCKET_NAME_RE.fullmatch(bucket) or ".." in bucket:
            raise UsageError(
                f"{source}: storage: {bucket!r} is not a valid bucket name"
                + (f" (from {BUCKET_ENV})" if bucket == profile.env.get(BUCKET_ENV) else ""),
                "3-63 characters: lowercase letters, digits, '.', '-'.",
            )
    if profile.cloud == "local":
        if candidates:
            raise UsageError(
                f"{source}: resources.accelerators: the local cloud has no GPUs",
                "Remove resources.accelerators, or pick a cloud that has them.",
            )
        subnet = profile.network.subnet or local_subnet(name)
        net = ipaddress.IPv4Network(subnet)
        if net.prefixlen != 24 or not net.subnet_of(LOCAL_SUPERNET):
            raise UsageError(
                f"{source}: network.subnet: the local cloud needs a /24 inside {LOCAL_SUPERNET}"
            )
        if profile.resources.num_nodes > 64:
            raise UsageError(f"{source}: resources.num_nodes: the local cloud makes at most 64")

    choices: tuple[Any, ...] = ()
    if profile.cloud == "aws":
        choices = aws_choices(profile, source, offered)
        if choices[0].accelerator is not None:
            accelerator = choices[0].accelerator

    nodes = tuple(NodePlan(f"{name}-{rank}", rank) for rank in range(profile.resources.num_nodes))
    plan = Plan(
        cluster=name,
        profile=profile,
        source=source,
        nodes=nodes,
        accelerator=accelerator,
        pins=pins,
        subnet=subnet,
        overrides=overrides,
        secret_names=tuple(sorted(profile.secrets)),
        choices=choices,
        buckets=bucket_names(profile, account),
    )
    if profile.workload is not None:
        # Checked before anything is spent: Verl override keys, GPU needs, variables.
        from rlinfra.workloads.spec import job_spec

        job_spec(plan)
    return plan


def aws_choices(profile: Profile, source: str, offered: set[str] | None) -> tuple[Any, ...]:
    """Instance types for an AWS profile, cheapest first (from the packaged catalog)."""
    from rlinfra.clouds.aws_catalog import _choice, choose, load_catalog

    res = profile.resources
    region = profile.region or "us-east-1"
    catalog = load_catalog()
    try:
        if res.instance_type:
            if region not in catalog.regions:
                raise ValueError(f"region {region!r} is not in rlinfra's AWS catalog")
            return (_choice(catalog.get(res.instance_type), region, res.spot),)
        return tuple(
            choose(
                res.accelerator_candidates or None,
                region,
                res.cpus,
                res.memory_gb,
                offered,
                spot=res.spot,
                catalog=catalog,
            )
        )
    except ValueError as exc:
        raise UsageError(f"{source}: resources: {exc}") from None
