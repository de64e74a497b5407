"""AWS: GPU instances in a VPC with a cluster placement group, checkpoint buckets in S3.

Credentials come from the environment (or the usual AWS config files) and never reach
Terraform's variables, state or the deployment folder. ``RLINFRA_AWS_ENDPOINT_URL`` points every
service at an AWS-compatible endpoint (an emulator in tests).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlinfra.clouds.access import check_ssh_cidrs
from rlinfra.clouds.base import Cloud
from rlinfra.context import Context
from rlinfra.errors import UsageError
from rlinfra.plan import Plan, Site
from rlinfra.profile import Profile
from rlinfra.serving import service_clients
from rlinfra.storage.base import Store
from rlinfra.storage.s3 import S3, S3_ROOT_MODULES, common_tfvars, credentials_configured

ROOTS: dict[str, tuple[str, ...]] = {
    "storage": S3_ROOT_MODULES,
    "cluster": ("aws_network", "aws_cluster"),
}

DEFAULT_REGION = "us-east-1"


def region(plan: Plan) -> str:
    return plan.profile.region or DEFAULT_REGION


def _common(plan: Plan, ctx: Context) -> dict[str, Any]:
    return common_tfvars(region(plan), plan.profile.name, ctx)


# EC2 error codes that mean "not this instance type here, now": another candidate may work.
CAPACITY_ERRORS = (
    "InsufficientInstanceCapacity",
    "InsufficientHostCapacity",
    "InsufficientCapacity",
    "InstanceLimitExceeded",
    "VcpuLimitExceeded",
    "MaxSpotInstanceCountExceeded",
    "SpotMaxPriceTooLow",
    "Unsupported",
)


# What Terraform's AWS provider says when it finds no credentials, and the AWS error codes of
# credentials that AWS refuses.
NO_CREDENTIALS = ("No valid credential sources found", "failed to refresh cached credentials")
REFUSED_CREDENTIALS = ("InvalidClientTokenId", "SignatureDoesNotMatch", "ExpiredToken")


class AwsCloud(Cloud):
    """GPU instances in a VPC with a cluster placement group; buckets in S3."""

    name = "aws"
    candidate = True
    spot_notices = "aws"  # the instance metadata service's spot/instance-action
    roots = ROOTS

    def site(self, profile: Profile, source: str, cluster: str, offered: set[str] | None) -> Site:
        """Instance types that meet the profile, cheapest first (from the packaged catalog); the
        accelerator is the chosen type's."""
        from rlinfra.clouds.aws.catalog import Choice, choice_for, choose, load_catalog

        res = profile.resources
        candidates = res.accelerator_candidates
        if len({c.count for c in candidates}) > 1:
            raise UsageError(
                f"{source}: resources.accelerators: candidates must have the same GPU count "
                "per node"
            )
        region_name = profile.region or DEFAULT_REGION
        catalog = load_catalog()
        try:
            if res.instance_type:
                if region_name not in catalog.regions:
                    raise ValueError(f"region {region_name!r} is not in rlinfra's AWS catalog")
                choices: tuple[Choice, ...] = (
                    choice_for(catalog.get(res.instance_type), region_name, res.spot),
                )
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
        accelerator = choices[0].accelerator or (candidates[0] if candidates else None)
        return Site(accelerator=accelerator, choices=choices)

    def tfvars(self, plan: Plan, ctx: Context) -> dict[str, dict[str, Any]]:
        profile = plan.profile
        res = profile.resources
        if plan.instance_type is None:
            raise UsageError(f"{plan.source}: resources: no instance type was chosen")
        cluster: dict[str, Any] = {
            **_common(plan, ctx),
            "cluster_name": plan.cluster,
            "node_count": plan.num_nodes,
            "instance_type": plan.instance_type,
            "availability_zone": profile.zone,
            "ami": res.image,
            "ssh_public_key": ctx.ssh_public_key,
            "allowed_cidrs": list(profile.network.allowed_cidrs),
            "allow_public": profile.network.allow_public,
            "service_ports": sorted(profile.ports),
            "service_clients": service_clients(profile.serving),
            "placement_group": res.placement_group and plan.num_nodes > 1,
            "efa": profile.network.efa,
            "spot": res.spot,
            "spot_max_price": res.max_price,
            "root_volume": {"size_gb": res.disk_gb, "type": res.disk_type},
            "bucket_name": plan.storage_buckets[0] if plan.storage_buckets else None,
        }
        out = {"cluster": cluster}
        if plan.storage_buckets:
            out["storage"] = {**_common(plan, ctx), "buckets": plan.storage_buckets}
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
            "node_env_efa": plan.profile.network.efa,
            "storage_backend": "s3",
            "storage_s3_region": region(plan),
        }

    def check_inputs(self, plan: Plan) -> None:
        """What `up` needs that the profile and flags alone decide (no cloud call)."""
        if plan.instance_type is None:
            raise UsageError(f"{plan.source}: resources: no instance type was chosen")
        check_ssh_cidrs(plan)

    def account_id(self, environ: Mapping[str, str], required: bool) -> str | None:
        """The AWS account id (STS GetCallerIdentity), for default bucket names.

        Not ``required`` (`plan`, `render`): asked only where credentials are configured, and a
        failure leaves the name's suffix unknown (with a warning). ``required`` (`up`): a failure is
        the preflight's one-line error.
        """
        from rlinfra import ui
        from rlinfra.clouds.aws.preflight import check_credentials

        if not required and not credentials_configured(environ):
            return None
        endpoint = environ.get("RLINFRA_AWS_ENDPOINT_URL") or None
        try:
            return check_credentials(endpoint_url=endpoint)["account"] or None
        except UsageError as exc:
            if required:
                raise
            ui.warn(f"default bucket names need the AWS account id: {exc.message}")
            return None

    def preflight(self, plan: Plan) -> None:
        """Credentials, region, zone offering, vCPU quota and bucket, before Terraform runs."""
        from rlinfra import ui
        from rlinfra.clouds.aws.preflight import AwsTarget
        from rlinfra.clouds.aws.preflight import preflight as run

        self.check_inputs(plan)
        assert plan.instance_type is not None
        report = run(
            AwsTarget(
                region=region(plan),
                instance_type=plan.instance_type,
                node_count=plan.num_nodes,
                zone=plan.profile.zone,
                spot=plan.profile.resources.spot,
                bucket=plan.storage_buckets[0] if plan.storage_buckets else None,
            ),
            endpoint_url=os.environ.get("RLINFRA_AWS_ENDPOINT_URL") or None,
        )
        for warning in report.warnings:
            ui.warn(warning)

    def capacity_error(self, output: str) -> str | None:
        """The first EC2 capacity or quota error in Terraform's output (the AWS SDK writes
        ``api error CODE: message``), else None."""
        import re

        for match in re.finditer(r"api error (?:Server\.)?([A-Za-z]+):", output):
            if match.group(1) in CAPACITY_ERRORS:
                return match.group(1)
        return None

    def credentials_error(self, output: str) -> UsageError | None:
        """No AWS credentials (or refused ones) in Terraform's output: the error to give;
        else None."""
        import re

        from rlinfra.clouds.aws.preflight import CREDENTIALS_HINT

        flat = " ".join(output.split())
        if any(text in flat for text in NO_CREDENTIALS):
            return UsageError("Terraform found no AWS credentials", CREDENTIALS_HINT)
        for match in re.finditer(r"api error ([A-Za-z]+):", flat):
            if match.group(1) in REFUSED_CREDENTIALS:
                return UsageError(
                    f"AWS did not accept the credentials ({match.group(1)})", CREDENTIALS_HINT
                )
        return None

    def store(self, folder: Path) -> Store:
        return S3


CLOUD = AwsCloud()
