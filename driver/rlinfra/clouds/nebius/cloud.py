"""Nebius AI Cloud: GPU VMs (an InfiniBand GPU cluster for 8-GPU presets) in a VPC network,
checkpoint buckets in Nebius Object Storage (S3-compatible).

Credentials are the user's Nebius environment (NEBIUS_IAM_TOKEN for Terraform's provider; the
preflight also takes a CLI profile or a service-account key file, ``preflight.find_credentials``)
and never reach Terraform's variables, state or the deployment folder. The project is the
profile's ``nebius.project_id`` or NEBIUS_PROJECT_ID; default bucket names derive from it.

The nodes mount the bucket with rclone over S3 (``storage_backend: s3`` with the region's
endpoint, https://storage.<region>.nebius.cloud) and a key of the user's
(``nebius.access_key_id_env``/``secret_access_key_env``), which reaches them over SSH's standard
input only (``storage.s3.send_bucket_key``), as the ssh cloud's S3 key does.
``RLINFRA_NEBIUS_S3_ENDPOINT`` points the nodes and the bucket operations at another S3
endpoint (an emulator, in tests).

Spot: ``resources.spot`` makes preemptible VMs, stopped when Nebius needs the capacity back.
rlinfra knows of no preemption notice that a Nebius VM receives beforehand, so no watcher runs:
the job learns of a preemption when the node is gone, and ``run --recover`` heals the cluster
and resumes from the last checkpoint.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlinfra import layout
from rlinfra.clouds.access import check_ssh_cidrs
from rlinfra.clouds.base import Cloud
from rlinfra.clouds.nebius.section import NebiusSettings
from rlinfra.context import Context
from rlinfra.deploy import read_record
from rlinfra.errors import UsageError
from rlinfra.plan import Plan, Site
from rlinfra.profile import Profile
from rlinfra.record import Host
from rlinfra.serving import service_clients
from rlinfra.storage.base import Store
from rlinfra.storage.s3 import S3Store, send_bucket_key

if TYPE_CHECKING:
    from rlinfra.clouds.nebius.catalog import Choice

ROOTS: dict[str, tuple[str, ...]] = {
    "storage": ("nebius_bucket",),
    "cluster": ("nebius_network", "nebius_cluster"),
}

DEFAULT_REGION = "eu-north1"
PROJECT_ENV = "NEBIUS_PROJECT_ID"
S3_ENDPOINT_ENV = "RLINFRA_NEBIUS_S3_ENDPOINT"
# The profile's default disk type (AWS's); Nebius boot disks are network SSDs, chosen by the module.
PROFILE_DEFAULT_DISK_TYPE = "gp3"
MIN_DISK_GB = 50
# Nebius resource names (nebius_cluster's cluster_name): a letter first, no '-' last.
CLUSTER_NAME_RE = re.compile(r"^[a-z]([a-z0-9-]{0,29}[a-z0-9])?$")
LABEL_RE = re.compile(r"[^a-z0-9_-]")

# What Nebius answers when a region has no capacity for the preset, or the project no quota for
# it (gRPC status names, as the provider prints them), most specific first. Seen in Nebius's
# API reference, not in a provider's output: no provider binary runs here.
CAPACITY_ERRORS: tuple[tuple[str, str], ...] = (
    ("RESOURCE_EXHAUSTED", "RESOURCE_EXHAUSTED"),
    ("ResourceExhausted", "RESOURCE_EXHAUSTED"),
    ("not enough resources", "RESOURCE_EXHAUSTED"),
    ("quota exceeded", "QUOTA_EXCEEDED"),
    ("QuotaExceeded", "QUOTA_EXCEEDED"),
)
# What the provider says without a token (gRPC UNAUTHENTICATED, or its own "no credentials").
NO_CREDENTIALS = ("UNAUTHENTICATED", "Unauthenticated", "NEBIUS_IAM_TOKEN")
CREDENTIALS_HINT = (
    "Export NEBIUS_IAM_TOKEN (e.g. `export NEBIUS_IAM_TOKEN=$(nebius iam get-access-token)`): "
    "Terraform's Nebius provider reads it from the environment."
)


def settings(profile: Profile) -> NebiusSettings:
    """The profile's ``nebius:`` section (its defaults where it has none)."""
    value: NebiusSettings | None = profile.section("nebius")
    return value or NebiusSettings()


def project_of(profile: Profile, environ: Mapping[str, str] | None = None) -> str | None:
    """The project: the profile's ``nebius.project_id``, else ``NEBIUS_PROJECT_ID``."""
    own = settings(profile).project_id
    if own is not None or environ is None:
        return own
    return environ.get(PROJECT_ENV) or None


def region(profile: Profile) -> str:
    return profile.region or DEFAULT_REGION


def s3_endpoint(region_name: str, environ: Mapping[str, str]) -> str:
    """The S3 endpoint of the region's object storage (or the override, for an emulator)."""
    return environ.get(S3_ENDPOINT_ENV) or f"https://storage.{region_name}.nebius.cloud"


def label_value(text: str) -> str:
    return LABEL_RE.sub("-", text.lower())[:63]


def _refuse_unsupported(profile: Profile, source: str, cluster: str) -> None:
    res = profile.resources
    if not CLUSTER_NAME_RE.fullmatch(cluster):
        raise UsageError(
            f"{source}: cluster name {cluster!r} is not a Nebius resource name",
            "On nebius a cluster name ends with a letter or digit (at most 31 characters).",
        )
    if res.max_price is not None:
        raise UsageError(
            f"{source}: resources.max_price: Nebius preemptible VMs take no price cap",
            "Remove max_price (preemptible VMs have a fixed price).",
        )
    if res.disk_type != PROFILE_DEFAULT_DISK_TYPE:
        raise UsageError(
            f"{source}: resources.disk_type: Nebius boot disks are network SSDs chosen by rlinfra",
            "Remove disk_type from the profile.",
        )
    if res.disk_gb < MIN_DISK_GB:
        raise UsageError(
            f"{source}: resources.disk_gb: {res.disk_gb} is below {MIN_DISK_GB} GB, which the "
            "GPU images need"
        )
    if profile.network.efa:
        raise UsageError(
            f"{source}: network.efa: EFA is AWS's; Nebius 8-GPU presets use InfiniBand",
            "Remove network.efa from the profile.",
        )
    if profile.state.backend != "local":
        raise UsageError(
            f"{source}: state.backend: {profile.state.backend} is not rendered for nebius; "
            "Nebius deployments keep Terraform's state in the deployment folder",
            "Remove the state section.",
        )


def _choice(plan: Plan) -> Choice:
    from rlinfra.clouds.nebius.catalog import Choice

    if not plan.choices:
        raise UsageError(f"{plan.source}: resources: no preset was chosen")
    choice = plan.choices[0]
    if not isinstance(choice, Choice):
        raise TypeError(f"a nebius plan holds a {type(choice).__name__}, not a nebius Choice")
    return choice


def _fabric(plan: Plan, choice: Choice) -> str | None:
    """The GPU cluster's fabric: several nodes of an 8-GPU preset with placement asked for get
    one (the profile's, else the catalog's first for the platform and region)."""
    if not choice.fabrics or plan.num_nodes < 2 or not plan.profile.resources.placement_group:
        return None
    return settings(plan.profile).fabric or choice.fabric


def _common(plan: Plan) -> dict[str, Any]:
    return {
        "parent_id": project_of(plan.profile, os.environ),
        "region": region(plan.profile),
        "labels": {"rlinfra-profile": label_value(plan.profile.name)},
    }


def bucket_key(plan: Plan, environ: Mapping[str, str]) -> tuple[str, str] | None:
    """The nodes' S3 key for the bucket, from ``environ``; UsageError naming what is unset."""
    if not plan.profile.storage:
        return None
    own = settings(plan.profile)
    names = (own.access_key_id_env, own.secret_access_key_env)
    missing = [name for name in names if not environ.get(name)]
    if missing:
        raise UsageError(
            f"{plan.source}: nebius: {' and '.join(missing)} not set in this environment; the "
            "nodes mount the checkpoint bucket with that S3 key",
            "Create an access key for a service account that may use the bucket (`nebius iam "
            "v2 access-key create`) and export it, or name other variables in "
            "nebius.access_key_id_env/secret_access_key_env.",
        )
    return environ[names[0]], environ[names[1]]


def _s3_client(folder: Path) -> Any:
    """boto3 S3 for the deployment's buckets: the region's endpoint and the user's bucket key."""
    import boto3

    tfvars = json.loads((folder / "terraform" / "storage" / "terraform.tfvars.json").read_text())
    record = read_record(folder)
    profile = (record.resolved_profile if record else None) or {}
    own = NebiusSettings.model_validate(profile.get("nebius") or {})
    return boto3.client(
        "s3",
        region_name=tfvars["region"],
        endpoint_url=s3_endpoint(tfvars["region"], os.environ),
        aws_access_key_id=os.environ.get(own.access_key_id_env),
        aws_secret_access_key=os.environ.get(own.secret_access_key_env),
    )


class NebiusCloud(Cloud):
    """GPU VMs in a VPC network (a GPU cluster on InfiniBand for 8-GPU presets); buckets in
    Nebius Object Storage."""

    name = "nebius"
    candidate = True
    roots = ROOTS

    def site(self, profile: Profile, source: str, cluster: str, offered: set[str] | None) -> Site:
        """Presets that meet the profile in its region, cheapest first; the accelerator is the
        chosen preset's. Refuses (naming the field) what Nebius cannot do."""
        from rlinfra.clouds.nebius.catalog import choice_for, choose, load_catalog

        res = profile.resources
        _refuse_unsupported(profile, source, cluster)
        region_name = region(profile)
        catalog = load_catalog()
        if region_name not in catalog.regions:
            raise UsageError(
                f"{source}: region: {region_name!r} is not in rlinfra's Nebius catalog",
                "Regions with presets: " + ", ".join(catalog.regions) + ".",
            )
        if profile.zone is not None:
            raise UsageError(
                f"{source}: zone: Nebius places VMs by region only",
                "Remove zone from the profile.",
            )
        candidates = res.accelerator_candidates
        try:
            if res.instance_type:
                entry = catalog.get(res.instance_type)
                if candidates and entry.accelerator not in candidates:
                    raise ValueError(
                        f"instance_type {res.instance_type} has {entry.accelerator or 'no GPUs'}, "
                        f"not one of {', '.join(str(c) for c in candidates)}"
                    )
                choices: tuple[Choice, ...] = (choice_for(entry, region_name, res.spot),)
            else:
                choices = tuple(
                    choose(
                        candidates or None,
                        region_name,
                        res.cpus,
                        res.memory_gb,
                        offered,
                        spot=res.spot,
                        catalog=catalog,
                    )
                )
        except ValueError as exc:
            raise UsageError(f"{source}: resources: {exc}") from None
        fabric = settings(profile).fabric
        if fabric is not None and choices and fabric not in choices[0].fabrics:
            known = ", ".join(choices[0].fabrics) or "none: the preset makes no GPU cluster"
            raise UsageError(
                f"{source}: nebius.fabric: {fabric} is not a fabric of {choices[0].instance_type} "
                f"in {region_name} (the catalog's: {known})"
            )
        accelerator = choices[0].accelerator or (candidates[0] if candidates else None)
        return Site(accelerator=accelerator, choices=choices)

    def tfvars(self, plan: Plan, ctx: Context) -> dict[str, dict[str, Any]]:
        profile = plan.profile
        res = profile.resources
        choice = _choice(plan)
        cluster: dict[str, Any] = {
            **_common(plan),
            "cluster_name": plan.cluster,
            "node_count": plan.num_nodes,
            "platform": choice.platform,
            "preset": choice.preset,
            "infiniband_fabric": _fabric(plan, choice),
            "image_family": res.image or choice.image_family,
            "boot_disk_size_gb": res.disk_gb,
            "existing_subnet_id": settings(profile).subnet_id,
            "subnet_cidr": profile.network.subnet,
            "ssh_public_key": ctx.ssh_public_key,
            "allowed_cidrs": list(profile.network.allowed_cidrs),
            "allow_public": profile.network.allow_public,
            "service_ports": sorted(profile.ports),
            "service_clients": service_clients(profile.serving),
            "spot": res.spot,
            "bucket_name": plan.storage_buckets[0] if plan.storage_buckets else None,
        }
        out = {"cluster": cluster}
        if plan.storage_buckets:
            out["storage"] = {**_common(plan), "buckets": plan.storage_buckets}
        return out

    def ansible_vars(self, plan: Plan, ctx: Context) -> dict[str, Any]:
        region_name = region(plan.profile)
        out: dict[str, Any] = {
            "ansible_python_interpreter": "/usr/bin/python3",
            # The controller reaches the nodes over the internet: compress SSH.
            "ansible_ssh_common_args": "-C",
            "base_manage_limits": True,
            "base_extra_packages": (
                ["rsync", "rclone", "fuse3"] if plan.profile.storage else ["rsync"]
            ),
        }
        if plan.profile.storage:
            out.update(
                {
                    "storage_backend": "s3",
                    "storage_s3_region": region_name,
                    "storage_s3_endpoint": s3_endpoint(region_name, os.environ),
                    # The key file `before_configure` writes over SSH (rclone's shell loads it).
                    "storage_s3_credentials_file": layout.BUCKET_CREDENTIALS,
                }
            )
        return out

    def check_inputs(self, plan: Plan) -> None:
        """What `up` needs that the profile, flags and environment decide (no cloud call)."""
        _choice(plan)
        if project_of(plan.profile, os.environ) is None:
            raise UsageError(
                f"{plan.source}: nebius.project_id: not set; `up` on nebius creates everything "
                "in that project",
                f"Set nebius: {{project_id: project-...}} in the profile, or export {PROJECT_ENV} "
                "(`nebius iam project list` shows yours).",
            )
        check_ssh_cidrs(plan, ipv4_only="Nebius")
        bucket_key(plan, os.environ)

    def account_id(self, environ: Mapping[str, str], required: bool) -> str | None:
        """NEBIUS_PROJECT_ID, where the profile names no project (profile_account)."""
        project = environ.get(PROJECT_ENV) or None
        if project is None and required:
            raise UsageError(
                "no Nebius project: the profile sets no nebius.project_id and "
                f"{PROJECT_ENV} is unset",
                "Set nebius: {project_id: project-...} in the profile.",
            )
        return project

    def profile_account(self, profile: Profile) -> str | None:
        return settings(profile).project_id

    def preflight(self, plan: Plan) -> None:
        """Credentials, the project and its region, the preset, GPU quota and subnet, before
        Terraform runs (``clouds/nebius/preflight.py``, read-only)."""
        from rlinfra import ui
        from rlinfra.clouds.nebius.preflight import check

        self.check_inputs(plan)
        choice = _choice(plan)
        project = project_of(plan.profile, os.environ)
        assert project is not None
        report = check(
            project,
            region(plan.profile),
            choice.platform,
            choice.preset,
            plan.num_nodes,
            settings(plan.profile).subnet_id,
            plan.profile.resources.spot,
            environ=os.environ,
        )
        for warning in report.warnings:
            ui.warn(warning)

    def before_configure(self, plan: Plan, folder: Path, nodes: list[Host]) -> None:
        """The nodes' bucket key, to each node over SSH's standard input (0600)."""
        key = bucket_key(plan, os.environ)
        if key is not None:
            send_bucket_key(folder, nodes, key)

    def capacity_error(self, output: str) -> str | None:
        for needle, code in CAPACITY_ERRORS:
            if needle in output:
                return code
        return None

    def credentials_error(self, output: str) -> UsageError | None:
        flat = " ".join(output.split())
        if any(text in flat for text in NO_CREDENTIALS):
            return UsageError(
                "Terraform's Nebius provider found no credentials, or Nebius refused them",
                CREDENTIALS_HINT,
            )
        return None

    def store(self, folder: Path) -> Store:
        return S3Store(_s3_client)


CLOUD = NebiusCloud()
