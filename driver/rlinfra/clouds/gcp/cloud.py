"""Google Cloud: GPU VMs in a VPC network with a compact placement policy, checkpoint buckets in
Cloud Storage.

Credentials are Application Default Credentials (``gcloud auth application-default login``,
GOOGLE_APPLICATION_CREDENTIALS, or a VM's service account) and never reach Terraform's
variables, state or the deployment folder. The project is the profile's ``project`` (required by
`up`); default bucket names derive from it. ``RLINFRA_GCP_API_ENDPOINT`` points the API calls of
the preflight at another endpoint (a local test server), ``STORAGE_EMULATOR_HOST`` those of the
bucket operations at a Cloud Storage emulator (see ``gcp_preflight``).

The nodes reach their checkpoint bucket through their own service account (``gcp_cluster``'s
``bucket_name`` grant, made and removed with the cluster); the storage role mounts it with
rclone (``storage_backend: gcs``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlinfra.clouds.access import check_ssh_cidrs
from rlinfra.clouds.base import Cloud
from rlinfra.context import Context
from rlinfra.errors import UsageError
from rlinfra.plan import Plan, Site
from rlinfra.profile import Profile
from rlinfra.serving import service_clients
from rlinfra.storage.base import Store
from rlinfra.storage.gcs import GcsStore, GoogleApi

if TYPE_CHECKING:
    from rlinfra.clouds.gcp.catalog import Choice

ROOTS: dict[str, tuple[str, ...]] = {
    "storage": ("gcp_bucket",),
    "cluster": ("gcp_network", "gcp_cluster"),
}

DEFAULT_REGION = "us-central1"
# Boot disk types gcp_cluster takes; the profile's default ("gp3", AWS's) leaves the choice to it.
DISK_TYPES = ("pd-balanced", "pd-ssd", "pd-standard", "hyperdisk-balanced")
PROFILE_DEFAULT_DISK_TYPE = "gp3"
MIN_DISK_GB = 50  # the GPU images need about 50 GB (gcp_cluster refuses less)
# Compute Engine names (gcp_cluster's cluster_name): a letter, up to 31 characters, no '-' last.
CLUSTER_NAME_RE = re.compile(r"^[a-z]([a-z0-9-]{0,29}[a-z0-9])?$")


def project_of(profile: Profile) -> str | None:
    """The profile's Google Cloud project (its ``project:`` key, ``clouds/gcp/section.py``)."""
    value: str | None = profile.section("project")
    return value


def region(profile: Profile) -> str:
    return profile.region or DEFAULT_REGION


def label_value(text: str) -> str:
    """A Google Cloud label value: lowercase letters, digits, '_' and '-', at most 63."""
    return re.sub(r"[^a-z0-9_-]", "-", text.lower())[:63]


def _refuse_unsupported(profile: Profile, source: str, cluster: str) -> None:
    res = profile.resources
    if not CLUSTER_NAME_RE.fullmatch(cluster):
        raise UsageError(
            f"{source}: cluster name {cluster!r} is not a Compute Engine name",
            "On gcp a cluster name ends with a letter or digit (at most 31 characters).",
        )
    if res.max_price is not None:
        raise UsageError(
            f"{source}: resources.max_price: Spot VMs on Google Cloud take no price cap",
            "Remove max_price (Spot prices change at most once a day and stay below on-demand).",
        )
    if res.disk_type != PROFILE_DEFAULT_DISK_TYPE and res.disk_type not in DISK_TYPES:
        raise UsageError(
            f"{source}: resources.disk_type: {res.disk_type!r} is not a GCP boot disk type",
            "Use one of: " + ", ".join(DISK_TYPES) + " (or leave it out).",
        )
    if res.disk_gb < MIN_DISK_GB:
        raise UsageError(
            f"{source}: resources.disk_gb: {res.disk_gb} is below {MIN_DISK_GB} GB, which the "
            "GPU images need"
        )
    if profile.network.efa:
        raise UsageError(
            f"{source}: network.efa: EFA is AWS's; GCP nodes use gVNIC",
            "Remove network.efa from the profile.",
        )
    if profile.state.backend != "local":
        raise UsageError(
            f"{source}: state.backend: {profile.state.backend} is not rendered for gcp yet; "
            "GCP deployments keep Terraform's state in the deployment folder",
            "Remove the state section (a gcs backend is described in "
            "terraform/modules/gcp_bucket/README.md).",
        )


def _choice(plan: Plan) -> Choice:
    from rlinfra.clouds.gcp.catalog import Choice

    if not plan.choices:
        raise UsageError(f"{plan.source}: resources: no machine type was chosen")
    choice = plan.choices[0]
    if not isinstance(choice, Choice):
        raise TypeError(f"a gcp plan holds a {type(choice).__name__}, not a gcp_catalog.Choice")
    return choice


def _common(plan: Plan) -> dict[str, Any]:
    return {
        "project": project_of(plan.profile),
        "region": region(plan.profile),
        "labels": {"rlinfra-profile": label_value(plan.profile.name)},
    }


# Google's answers when a zone has no capacity for the machine, or the project no quota for it
# (Compute Engine error codes and messages, as the Google provider prints them), most specific
# first.
CAPACITY_ERRORS: tuple[tuple[str, str], ...] = (
    ("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"),
    ("ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED"),
    ("does not have enough resources available", "ZONE_RESOURCE_POOL_EXHAUSTED"),
    ("does not currently have sufficient capacity", "ZONE_RESOURCE_POOL_EXHAUSTED"),
    ("QUOTA_EXCEEDED", "QUOTA_EXCEEDED"),
    ("quotaExceeded", "QUOTA_EXCEEDED"),
)


# What Terraform's Google provider says when Application Default Credentials cannot be found.
NO_CREDENTIALS = (
    "Attempted to load application default credentials",
    "could not find default credentials",
)


# --- buckets (Cloud Storage JSON API) -------------------------------------------------------------


def _storage(environ: Mapping[str, str]) -> tuple[Any, str]:
    """A session and base URL for the Cloud Storage JSON API: against an emulator
    (STORAGE_EMULATOR_HOST) a plain session, as Google's client libraries use there; else one
    authorized by Application Default Credentials."""
    from rlinfra.clouds.gcp.preflight import (
        STORAGE_EMULATOR_ENV,
        authorized_session,
        load_credentials,
        storage_base,
    )

    if environ.get(STORAGE_EMULATOR_ENV):
        import requests

        return requests.Session(), storage_base(environ)
    credentials, _ = load_credentials(environ)
    return authorized_session(credentials), storage_base(environ)


def _google_api() -> GoogleApi:
    """The Cloud Storage JSON API as this machine reaches it (ADC, or an emulator)."""
    from rlinfra.clouds.gcp.preflight import call, error_message

    return GoogleApi(connect=lambda: _storage(os.environ), call=call, error_message=error_message)


class GcpCloud(Cloud):
    """GPU VMs in a VPC network with a compact placement policy; buckets in Cloud Storage."""

    name = "gcp"
    candidate = True
    spot_notices = "gcp"  # the metadata server's instance/preempted
    roots = ROOTS

    def site(self, profile: Profile, source: str, cluster: str, offered: set[str] | None) -> Site:
        """Machine types that meet the profile, in the profile's zone or the first catalog zone of
        its region that offers each, priced ones cheapest first, unpriced last; the accelerator is
        the chosen type's. Refuses (naming the field) what GCP cannot do."""
        from rlinfra.clouds.gcp.catalog import choice_for, choose, load_catalog, zone_for

        res = profile.resources
        _refuse_unsupported(profile, source, cluster)
        region_name = region(profile)
        catalog = load_catalog()
        if region_name not in catalog.regions:
            raise UsageError(
                f"{source}: region: {region_name!r} is not in rlinfra's GCP catalog",
                "Regions with machine types: " + ", ".join(catalog.regions) + ".",
            )
        zone = profile.zone
        if zone is not None and not zone.startswith(region_name + "-"):
            raise UsageError(
                f"{source}: zone: {zone!r} is not in region {region_name}",
                f"Use a zone of {region_name}, such as '{region_name}-a', or leave zone out.",
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
                placed = zone_for(entry, region_name, zone)
                if placed is None:
                    where = f"zone {zone}" if zone else f"region {region_name}"
                    raise ValueError(f"{entry.key} is not offered in {where} by the catalog")
                choices: tuple[Choice, ...] = (choice_for(entry, region_name, placed, res.spot),)
            else:
                choices = tuple(
                    choose(
                        candidates or None,
                        region_name,
                        zone,
                        res.cpus,
                        res.memory_gb,
                        offered,
                        spot=res.spot,
                        catalog=catalog,
                    )
                )
        except ValueError as exc:
            raise UsageError(f"{source}: resources: {exc}") from None
        accelerator = choices[0].accelerator or (candidates[0] if candidates else None)
        return Site(accelerator=accelerator, choices=choices)

    def tfvars(self, plan: Plan, ctx: Context) -> dict[str, dict[str, Any]]:
        profile = plan.profile
        res = profile.resources
        choice = _choice(plan)
        guest = choice.guest_accelerator
        cluster: dict[str, Any] = {
            **_common(plan),
            "zone": choice.zone,
            "cluster_name": plan.cluster,
            "node_count": plan.num_nodes,
            "machine_type": choice.machine_type,
            "guest_accelerator": {"type": guest.type, "count": guest.count} if guest else None,
            "image": res.image,
            "boot_disk": {
                "size_gb": res.disk_gb,
                "type": None if res.disk_type == PROFILE_DEFAULT_DISK_TYPE else res.disk_type,
            },
            "ssh_public_key": ctx.ssh_public_key,
            "allowed_cidrs": list(profile.network.allowed_cidrs),
            "allow_public": profile.network.allow_public,
            "service_ports": sorted(profile.ports),
            "service_clients": service_clients(profile.serving),
            "placement_policy": res.placement_group and plan.num_nodes > 1,
            "spot": res.spot,
            "bucket_name": plan.storage_buckets[0] if plan.storage_buckets else None,
        }
        if profile.network.subnet:
            cluster["subnet_cidr"] = profile.network.subnet
        out = {"cluster": cluster}
        if plan.storage_buckets:
            out["storage"] = {**_common(plan), "buckets": plan.storage_buckets}
        return out

    def ansible_vars(self, plan: Plan, ctx: Context) -> dict[str, Any]:
        return {
            "ansible_python_interpreter": "/usr/bin/python3",
            # The controller reaches the nodes over the internet: compress SSH (not in ansible.cfg).
            "ansible_ssh_common_args": "-C",
            "base_manage_limits": True,
            "base_extra_packages": (
                ["rsync", "rclone", "fuse3"] if plan.profile.storage else ["rsync"]
            ),
            # rclone reaches Cloud Storage as the node's service account (its bucket grant).
            "storage_backend": "gcs",
        }

    def check_inputs(self, plan: Plan) -> None:
        """What `up` needs that the profile and flags alone decide (no cloud call)."""
        from rlinfra.clouds.gcp.preflight import gcs_bucket_name_problem

        _choice(plan)
        if project_of(plan.profile) is None:
            raise UsageError(
                f"{plan.source}: project: not set; `up` on gcp creates everything in that project",
                "Set project: YOUR-PROJECT-ID at the top of the profile (`gcloud config get "
                "project` shows yours).",
            )
        check_ssh_cidrs(plan, ipv4_only="GCP")
        for bucket in plan.storage_buckets:
            problem = gcs_bucket_name_problem(bucket)
            if problem:
                raise UsageError(
                    f"{plan.source}: storage: bucket name {bucket!r} is not valid on Cloud "
                    f"Storage: {problem}",
                    "Name the bucket in the profile's storage section, or with "
                    "--env CHECKPOINT_BUCKET_NAME=NAME.",
                )

    def account_id(self, environ: Mapping[str, str], required: bool) -> str | None:
        """The project of Application Default Credentials, for default bucket names where the
        profile names no project (a profile's project is taken without any call: profile_account).

        Not ``required`` (`plan`, `render`): asked only where credentials are configured, and a
        failure leaves the name's suffix unknown (with a warning). ``required``: missing
        credentials or a missing project are one-line errors.
        """
        from rlinfra import ui
        from rlinfra.clouds.gcp.preflight import credentials_configured, load_credentials

        if not required and not credentials_configured(environ):
            return None
        try:
            _, project = load_credentials(environ)
        except UsageError as exc:
            if required:
                raise
            ui.warn(f"default bucket names need the Google Cloud project: {exc.message}")
            return None
        if project is None and required:
            raise UsageError(
                "the Google Cloud credentials name no project, and the profile sets none",
                "Set project: YOUR-PROJECT-ID at the top of the profile.",
            )
        return project

    def profile_account(self, profile: Profile) -> str | None:
        return project_of(profile)

    def preflight(self, plan: Plan) -> None:
        """Credentials, project and region, the zone's machine type, GPU quota and bucket, before
        Terraform runs (gcp_preflight)."""
        from rlinfra import ui
        from rlinfra.clouds.gcp.catalog import load_catalog
        from rlinfra.clouds.gcp.preflight import GcpTarget
        from rlinfra.clouds.gcp.preflight import preflight as run

        self.check_inputs(plan)
        choice = _choice(plan)
        the_project = project_of(plan.profile)
        assert the_project is not None
        entry = load_catalog().machine_types.get(choice.instance_type)
        report = run(
            GcpTarget(
                project=the_project,
                region=choice.region,
                zone=choice.zone,
                machine_type=choice.machine_type,
                node_count=plan.num_nodes,
                accelerator=choice.accelerator,
                guest_accelerator=(
                    choice.guest_accelerator.type if choice.guest_accelerator else None
                ),
                spot=plan.profile.resources.spot,
                bucket=plan.storage_buckets[0] if plan.storage_buckets else None,
            ),
            os.environ,
            catalog_zones=entry.zones.get(choice.region, ()) if entry else (),
        )
        for warning in report.warnings:
            ui.warn(warning)

    def capacity_error(self, output: str) -> str | None:
        """The first Compute Engine capacity or quota error in Terraform's output, else None (with
        the quota's metric where the message names it, e.g. ``QUOTA_EXCEEDED NVIDIA_H100_GPUS``)."""
        for needle, code in CAPACITY_ERRORS:
            if needle in output:
                metric = re.search(r"Quota '([A-Z0-9_]+)' exceeded", output)
                if code == "QUOTA_EXCEEDED" and metric:
                    return f"{code} {metric.group(1)}"
                return code
        return None

    def credentials_error(self, output: str) -> UsageError | None:
        """No Google Cloud credentials in Terraform's output: the error to give; else None."""
        from rlinfra.clouds.gcp.preflight import CREDENTIALS_HINT

        flat = " ".join(output.split())
        if any(text in flat for text in NO_CREDENTIALS):
            return UsageError(
                "Terraform found no Google Cloud credentials (Application Default Credentials)",
                CREDENTIALS_HINT,
            )
        return None

    def store(self, folder: Path) -> Store:
        return GcsStore(_google_api())


CLOUD = GcpCloud()
