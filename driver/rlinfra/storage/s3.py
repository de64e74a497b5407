"""S3 buckets through boto3, with the region (and, for an emulator, the endpoint) that the
deployment's storage root was rendered with."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlinfra.context import Context
from rlinfra.errors import OperationError
from rlinfra.storage.base import Store

# The storage root's Terraform: terraform/roots/aws/storage with these modules.
S3_ROOT_DIR = "aws"
S3_ROOT_MODULES: tuple[str, ...] = ("aws_bucket",)


CREDENTIAL_VARIABLES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_PROFILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
)


def credentials_configured(environ: Mapping[str, str]) -> bool:
    """Whether credentials are set up for boto3 without asking an instance's metadata service."""
    if any(environ.get(name) for name in CREDENTIAL_VARIABLES):
        return True
    home = Path(environ.get("HOME") or Path.home())
    files = [
        environ.get("AWS_SHARED_CREDENTIALS_FILE") or home / ".aws" / "credentials",
        environ.get("AWS_CONFIG_FILE") or home / ".aws" / "config",
    ]
    return any(Path(f).is_file() for f in files)


def common_tfvars(region_name: str, profile_name: str, ctx: Context) -> dict[str, Any]:
    """What every root of the AWS provider takes (the S3 storage root and the aws cloud's
    cluster root): region, tags and, for an emulator, its endpoints."""
    endpoint = ctx.controller.aws_endpoint
    out: dict[str, Any] = {
        "region": region_name,
        "tags": {"rlinfra:profile": profile_name},
    }
    if endpoint:
        out["endpoints"] = {name: endpoint for name in ("ec2", "s3", "sts", "iam")}
        out["max_retries"] = 2
    return out


def s3_client(folder: Path) -> Any:
    """boto3 S3 for the deployment's storage root (its region and, for an emulator, endpoint)."""
    import boto3

    tfvars = json.loads((folder / "terraform" / "storage" / "terraform.tfvars.json").read_text())
    endpoint = (tfvars.get("endpoints") or {}).get("s3")
    return boto3.client("s3", region_name=tfvars["region"], endpoint_url=endpoint)


def _failed(bucket: str, exc: Exception) -> OperationError:
    return OperationError(
        f"S3 bucket {bucket}: {type(exc).__name__}: {exc}",
        "Check the credentials and the network, then run the same command again.",
    )


class S3Store(Store):
    kind = "S3 bucket"

    def bucket_versions(self, folder: Path, bucket: str) -> int:
        from botocore.exceptions import BotoCoreError, ClientError

        s3 = s3_client(folder)
        count = 0
        try:
            for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
                count += len(page.get("Versions", [])) + len(page.get("DeleteMarkers", []))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchBucket", "404"):
                return 0
            raise _failed(bucket, exc) from None
        except BotoCoreError as exc:
            raise _failed(bucket, exc) from None
        return count

    def empty_bucket(self, folder: Path, bucket: str) -> int:
        from botocore.exceptions import BotoCoreError, ClientError

        s3 = s3_client(folder)
        deleted = 0
        try:
            for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
                items = [
                    {"Key": item["Key"], "VersionId": item["VersionId"]}
                    for item in page.get("Versions", []) + page.get("DeleteMarkers", [])
                ]
                for start in range(0, len(items), 1000):
                    chunk = items[start : start + 1000]
                    s3.delete_objects(Bucket=bucket, Delete={"Objects": chunk, "Quiet": True})
                    deleted += len(chunk)
        except (BotoCoreError, ClientError) as exc:
            raise _failed(bucket, exc) from None
        return deleted


S3 = S3Store()
