"""S3 buckets through boto3, with the region (and, for an emulator, the endpoint) that the
deployment's storage root was rendered with."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rlinfra import layout, ui
from rlinfra.context import Context
from rlinfra.errors import OperationError
from rlinfra.record import Host
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


def key_file_body(key: tuple[str, str]) -> bytes:
    """The key file's text: two shell assignments, which rclone's shell loads (set -a; .)."""
    return (
        f"AWS_ACCESS_KEY_ID={shlex.quote(key[0])}\nAWS_SECRET_ACCESS_KEY={shlex.quote(key[1])}\n"
    ).encode()


def key_file_script(root: str = layout.ROOT) -> str:
    """Writes standard input to ``<root>/secrets/buckets.env`` (0600, in a 0700 folder), leaving
    ``root`` itself readable (0755: the login user runs the venv's Python)."""
    secrets = root + layout.SECRETS.removeprefix(layout.ROOT)
    target = root + layout.BUCKET_CREDENTIALS.removeprefix(layout.ROOT)
    return (
        f"install -d -m 0755 {root} && install -d -m 0700 {secrets} && umask 077 && "
        f"cat > {target}.tmp && mv -f {target}.tmp {target}"
    )


def send_bucket_key(folder: Path, nodes: list[Host], key: tuple[str, str]) -> None:
    """Write the nodes' bucket key (id, secret) to each node's BUCKET_CREDENTIALS (0600, its
    folder 0700), which rclone's shell loads, through SSH's standard input: never in an argument,
    a rendered file, Terraform's state or Ansible's hands. OperationError naming the hosts where
    that failed."""
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    from rlinfra.runners import ssh

    body = key_file_body(key)
    script = key_file_script()

    def send(host: Host) -> str | None:
        sudo = "" if host.ssh_user == "root" else "sudo -n "
        try:
            done = ssh.run(
                folder,
                host,
                f"{sudo}sh -c {shlex.quote(script)}",
                capture=True,
                timeout=60,
                stdin=body,
            )
        except subprocess.TimeoutExpired:
            return f"{host.name}: no answer within 60 s"
        except OSError as exc:
            return f"{host.name}: {exc}"
        if done.returncode != 0:
            detail = ((done.stderr or "").strip().splitlines() or ["no output"])[-1]
            return f"{host.name}: {detail} (exit {done.returncode})"
        return None

    with (
        ui.step(f"bucket key to {len(nodes)} host(s) over SSH"),
        ThreadPoolExecutor(max_workers=min(32, max(1, len(nodes)))) as pool,
    ):
        failed = [line for line in pool.map(send, nodes) if line]
    if failed:
        raise OperationError(
            f"could not give the bucket key to {len(failed)} of {len(nodes)} host(s): {failed[0]}",
            "Fix the host and run `up` again.",
        )


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
    """S3 buckets; ``connect(folder)`` gives the boto3 client for a deployment (by default the
    AWS one its storage root was rendered for; an S3-compatible store passes its own)."""

    kind = "S3 bucket"

    def __init__(self, connect: Callable[[Path], Any] | None = None) -> None:
        self._connect = connect or s3_client

    def bucket_versions(self, folder: Path, bucket: str) -> int:
        from botocore.exceptions import BotoCoreError, ClientError

        s3 = self._connect(folder)
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

        s3 = self._connect(folder)
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
