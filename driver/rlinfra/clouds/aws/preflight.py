"""Read-only checks of an AWS account before Terraform runs (boto3).

Each check either passes, returns warnings (where AWS cannot answer, e.g. a Service Quotas code
it does not know), or raises ``UsageError`` with one line saying what to fix. Nothing is created.
Every call takes a boto3 session and an endpoint URL, so tests point them at an AWS API emulator;
credentials always come from the session (the environment), never from a profile.

boto3 is imported inside the functions so that importing this module costs nothing.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rlinfra.errors import UsageError

# Error codes with which AWS rejects the caller's credentials.
CREDENTIAL_ERRORS = frozenset(
    {
        "InvalidClientTokenId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "ExpiredTokenException",
        "UnrecognizedClientException",
        "InvalidAccessKeyId",
        "AuthFailure",
        "AccessDenied",
        "AccessDeniedException",
    }
)

# EC2 vCPU quotas in Service Quotas (service code "ec2"), by instance family class:
# (on-demand code, name), (spot code, name). P and G/VT families have their own quotas; every
# other family this catalog knows (m, c, r, ...) counts against the Standard one.
VCPU_QUOTAS: dict[str, tuple[tuple[str, str], tuple[str, str]]] = {
    "p": (
        ("L-417A185B", "Running On-Demand P instances"),
        ("L-7212CCBC", "All P Spot Instance Requests"),
    ),
    "g": (
        ("L-DB2E81BA", "Running On-Demand G and VT instances"),
        ("L-3819A6DF", "All G and VT Spot Instance Requests"),
    ),
    "standard": (
        ("L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances"),
        ("L-34B43A08", "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests"),
    ),
}

_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_IPV4_RE = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")

CREDENTIALS_HINT = (
    "Export AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (plus AWS_SESSION_TOKEN "
    "for temporary keys), then retry; `aws sts get-caller-identity` shows what AWS sees."
)


@dataclass(frozen=True)
class AwsTarget:
    """What the deployment will ask AWS for."""

    region: str
    instance_type: str
    node_count: int
    zone: str | None = None
    spot: bool = False
    bucket: str | None = None
    vcpus_per_node: int | None = None  # None: from the catalog, else from DescribeInstanceTypes


@dataclass(frozen=True)
class PreflightReport:
    account: str
    arn: str
    zones: tuple[str, ...]  # zones of the region that offer the instance type
    warnings: tuple[str, ...] = field(default_factory=tuple)


# --- building blocks ------------------------------------------------------------------------------


def _session(session: Any) -> Any:
    if session is not None:
        return session
    import boto3

    return boto3.Session()


def client(session: Any, service: str, region: str, endpoint_url: str | None = None) -> Any:
    """A client with few retries and short timeouts: a preflight must answer quickly."""
    from botocore.config import Config

    config = Config(
        retries={"max_attempts": 2, "mode": "standard"}, connect_timeout=5, read_timeout=20
    )
    return _session(session).client(
        service, region_name=region, endpoint_url=endpoint_url, config=config
    )


def _aws_errors() -> tuple[type[Exception], ...]:
    """What a boto3 call raises when AWS (or the endpoint) says no or does not answer."""
    from botocore.exceptions import BotoCoreError, ClientError
    from botocore.parsers import ResponseParserError

    return (BotoCoreError, ClientError, ResponseParserError)


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def _is_credential_error(exc: Exception) -> bool:
    from botocore.exceptions import ClientError, NoCredentialsError, PartialCredentialsError

    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return True
    return isinstance(exc, ClientError) and _code(exc) in CREDENTIAL_ERRORS


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


def bucket_name_problem(name: str) -> str | None:
    """What is wrong with an S3 bucket name (general purpose buckets), or None."""
    if not 3 <= len(name) <= 63:
        return "it must be 3 to 63 characters long"
    if not _BUCKET_RE.match(name):
        return (
            "only lowercase letters, digits, dots and hyphens are allowed, "
            "and it must start and end with a letter or digit"
        )
    if ".." in name:
        return "it must not contain two dots in a row"
    if _IPV4_RE.match(name):
        return "it must not look like an IP address"
    for prefix in ("xn--", "sthree-", "amzn-s3-demo-"):
        if name.startswith(prefix):
            return f"it must not start with {prefix!r}"
    for suffix in ("-s3alias", "--ol-s3", ".mrap", "--x-s3"):
        if name.endswith(suffix):
            return f"it must not end with {suffix!r}"
    return None


def vcpu_quota_for(instance_type: str, spot: bool) -> tuple[str, str]:
    """The Service Quotas (code, name) that limits vCPUs of this type."""
    family = instance_type.split(".", 1)[0]
    key = family[0] if family[:1] in ("p", "g") else "standard"
    on_demand, spot_quota = VCPU_QUOTAS[key]
    return spot_quota if spot else on_demand


# --- checks ----------------------------------------------------------------------------------------


def check_credentials(
    session: Any = None, region: str = "us-east-1", endpoint_url: str | None = None
) -> dict[str, str]:
    """STS GetCallerIdentity: returns {account, arn}; UsageError when AWS does not accept us."""
    from botocore.exceptions import NoCredentialsError, PartialCredentialsError

    try:
        identity = client(session, "sts", region, endpoint_url).get_caller_identity()
    except (NoCredentialsError, PartialCredentialsError) as exc:
        raise UsageError(f"no AWS credentials found ({_one_line(exc)})", CREDENTIALS_HINT) from exc
    except _aws_errors() as exc:
        if _is_credential_error(exc):
            detail = _code(exc) or type(exc).__name__
            raise UsageError(
                f"AWS did not accept the credentials ({detail}): {_one_line(exc)}",
                CREDENTIALS_HINT,
            ) from exc
        raise UsageError(
            f"cannot check AWS credentials: STS did not answer ({_one_line(exc)})",
            "Check the network (proxy, VPN) or the endpoint setting, then retry.",
        ) from exc
    return {"account": str(identity.get("Account", "")), "arn": str(identity.get("Arn", ""))}


def known_regions(session: Any = None) -> set[str]:
    """Regions boto3 knows, in every partition (offline)."""
    sess = _session(session)
    regions: set[str] = set()
    for partition in sess.get_available_partitions():
        regions.update(sess.get_available_regions("ec2", partition_name=partition))
    return regions


def check_region(region: str, session: Any = None, endpoint_url: str | None = None) -> list[str]:
    """The region exists and is enabled; where EC2 cannot answer, boto3's region list decides."""
    warnings: list[str] = []
    status: dict[str, str] = {}
    try:
        answer = client(session, "ec2", region, endpoint_url).describe_regions(AllRegions=True)
        status = {r["RegionName"]: r.get("OptInStatus", "") for r in answer.get("Regions", [])}
    except _aws_errors() as exc:
        if _is_credential_error(exc):
            raise UsageError(
                f"AWS did not accept the credentials in {region} ({_code(exc)})", CREDENTIALS_HINT
            ) from exc
        known = known_regions(session)
        if region not in known:
            raise _unknown_region(region, known) from exc
        warnings.append(
            f"EC2 in {region} did not list its regions ({_one_line(exc)}); "
            "the region was checked against boto3's region list only"
        )
        return warnings
    if region not in status:
        raise _unknown_region(region, set(status))
    if status[region] == "not-opted-in":
        raise UsageError(
            f"region {region} is not enabled for this AWS account",
            "Enable it under Account > AWS Regions, or choose another region in the profile.",
        )
    return warnings


def _unknown_region(region: str, known: set[str]) -> UsageError:
    close = difflib.get_close_matches(region, sorted(known), n=1)
    hint = f"Did you mean {close[0]!r}?" if close else "Use a region name such as 'us-east-1'."
    return UsageError(f"unknown AWS region {region!r}", hint)


def _check_zone_name(region: str, zone: str | None) -> None:
    if zone is not None and not (zone.startswith(region) and len(zone) > len(region)):
        raise UsageError(
            f"zone {zone!r} is not in region {region}",
            f"Use a zone of {region}, such as '{region}a'.",
        )


def _check_bucket_name(bucket: str) -> None:
    problem = bucket_name_problem(bucket)
    if problem:
        raise UsageError(
            f"bucket name {bucket!r} is not valid: {problem}",
            "Bucket names are 3 to 63 lowercase letters, digits, dots and hyphens, e.g. "
            "'acme-rl-checkpoints'.",
        )


def check_offered(
    region: str,
    instance_type: str,
    zone: str | None = None,
    session: Any = None,
    endpoint_url: str | None = None,
) -> tuple[str, ...]:
    """The zones of the region that offer the type; UsageError when the given zone does not."""
    _check_zone_name(region, zone)
    ec2 = client(session, "ec2", region, endpoint_url)
    zones: list[str] = []
    try:
        pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
            LocationType="availability-zone",
            Filters=[{"Name": "instance-type", "Values": [instance_type]}],
        )
        for page in pages:
            zones.extend(o["Location"] for o in page.get("InstanceTypeOfferings", []))
    except _aws_errors() as exc:
        raise UsageError(
            f"cannot list where {instance_type} is offered in {region}: {_one_line(exc)}",
            "Check the credentials' ec2:DescribeInstanceTypeOfferings permission and retry.",
        ) from exc
    offered = tuple(sorted(set(zones)))
    if not offered:
        raise UsageError(
            f"instance type {instance_type} is not offered in any zone of {region}",
            "Choose another region, or other accelerator candidates in the profile.",
        )
    if zone is not None and zone not in offered:
        raise UsageError(
            f"instance type {instance_type} is not offered in zone {zone}",
            f"Zones of {region} that offer it: {', '.join(offered)}.",
        )
    return offered


def vcpus_of(
    instance_type: str, region: str, session: Any = None, endpoint_url: str | None = None
) -> int:
    """vCPUs of one instance: from the catalog, else from EC2 DescribeInstanceTypes."""
    from rlinfra.clouds.aws.catalog import load_catalog

    known = load_catalog().instance_types.get(instance_type)
    if known is not None:
        return known.vcpus
    try:
        answer = client(session, "ec2", region, endpoint_url).describe_instance_types(
            InstanceTypes=[instance_type]
        )
    except _aws_errors() as exc:
        raise UsageError(
            f"cannot look up instance type {instance_type}: {_one_line(exc)}",
            "Check the instance type's spelling, e.g. 'p5.48xlarge'.",
        ) from exc
    return int(answer["InstanceTypes"][0]["VCpuInfo"]["DefaultVCpus"])


def check_vcpu_quota(
    region: str,
    instance_type: str,
    node_count: int,
    vcpus_per_node: int,
    spot: bool = False,
    session: Any = None,
    endpoint_url: str | None = None,
) -> str | None:
    """UsageError when the family's vCPU quota is below what the nodes need; a warning (returned)
    when Service Quotas cannot tell. The quota also covers instances already running."""
    from botocore.exceptions import ClientError

    code, name = vcpu_quota_for(instance_type, spot)
    needed = node_count * vcpus_per_node
    quotas = client(session, "service-quotas", region, endpoint_url)
    value: float | None = None
    reasons: list[str] = []
    errors: tuple[type[Exception], ...] = (*_aws_errors(), KeyError, TypeError, ValueError)
    # The applied value first; quotas never changed may only have their AWS default.
    for call in (quotas.get_service_quota, quotas.get_aws_default_service_quota):
        try:
            value = float(call(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"])
            break
        except errors as exc:
            reasons.append(_code(exc) or _one_line(exc))
            if not (isinstance(exc, ClientError) and _code(exc) == "NoSuchResourceException"):
                break
    if value is None:
        return (
            f"could not read the vCPU quota '{name}' ({code}) in {region} "
            f"({'; '.join(reasons)}); "
            f"make sure it allows {needed} vCPUs ({node_count} x {instance_type})"
        )
    if value < needed:
        raise UsageError(
            f"vCPU quota '{name}' ({code}) in {region} is {value:g}, but {node_count} x "
            f"{instance_type} need {needed} vCPUs",
            f"Request an increase to at least {needed} in the Service Quotas console "
            f"(Amazon EC2 > {name}); instances already running count against it too.",
        )
    return None


def check_bucket(
    bucket: str,
    region: str,
    account: str | None = None,
    session: Any = None,
    endpoint_url: str | None = None,
) -> list[str]:
    """A valid name that is free, or an existing bucket of this account (HeadBucket)."""
    from botocore.exceptions import ClientError

    _check_bucket_name(bucket)
    kwargs: dict[str, str] = {"Bucket": bucket}
    if account and re.fullmatch(r"\d{12}", account):
        kwargs["ExpectedBucketOwner"] = account
    try:
        answer = client(session, "s3", region, endpoint_url).head_bucket(**kwargs)
    except ClientError as exc:
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if status == 404 or _code(exc) in ("404", "NoSuchBucket", "NotFound"):
            return []  # free: the storage root creates it
        if status == 403 or _code(exc) in ("403", "Forbidden", "AccessDenied"):
            raise UsageError(
                f"bucket {bucket!r} already exists and belongs to another AWS account "
                "(or this one may not read it)",
                "Bucket names are global: choose another name in the profile's storage section.",
            ) from exc
        raise UsageError(f"cannot check bucket {bucket!r}: {_one_line(exc)}") from exc
    except _aws_errors() as exc:
        raise UsageError(f"cannot check bucket {bucket!r}: {_one_line(exc)}") from exc
    headers = answer.get("ResponseMetadata", {}).get("HTTPHeaders", {})
    where = headers.get("x-amz-bucket-region") or answer.get("BucketRegion")
    if where and where != region:
        return [f"bucket {bucket!r} exists in {where}, not in {region}: traffic crosses regions"]
    return []


# --- all of it ----------------------------------------------------------------------------------


def preflight(
    target: AwsTarget,
    *,
    session: Any = None,
    endpoint_url: str | None = None,
    endpoints: Mapping[str, str] | None = None,
) -> PreflightReport:
    """Run every check in order: the names (no call), then credentials, region, zone offering,
    vCPU quota and bucket.

    ``endpoint_url`` serves every service; ``endpoints`` overrides it per boto3 service name
    ("sts", "ec2", "s3", "service-quotas"). Raises UsageError on the first failure.
    """
    sess = _session(session)
    urls = dict(endpoints or {})

    def url(service: str) -> str | None:
        return urls.get(service, endpoint_url)

    # What needs no call first: node count, zone name, bucket name.
    if target.node_count < 1:
        raise UsageError(f"node_count must be at least 1, not {target.node_count}")
    _check_zone_name(target.region, target.zone)
    if target.bucket:
        _check_bucket_name(target.bucket)
    identity = check_credentials(sess, target.region, url("sts"))
    warnings = check_region(target.region, sess, url("ec2"))
    zones = check_offered(target.region, target.instance_type, target.zone, sess, url("ec2"))
    vcpus = target.vcpus_per_node or vcpus_of(target.instance_type, target.region, sess, url("ec2"))
    quota_warning = check_vcpu_quota(
        target.region,
        target.instance_type,
        target.node_count,
        vcpus,
        target.spot,
        sess,
        url("service-quotas"),
    )
    if quota_warning:
        warnings.append(quota_warning)
    if target.bucket:
        warnings += check_bucket(target.bucket, target.region, identity["account"], sess, url("s3"))
    return PreflightReport(identity["account"], identity["arn"], zones, tuple(warnings))
