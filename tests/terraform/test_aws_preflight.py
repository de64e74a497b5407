"""The AWS preflight (rlinfra.clouds.aws.preflight) against an AWS API emulator.

The emulator is the test process's own (the session fixture `aws_api`, shared with the other AWS
tests); this module adds an IAM user with keys, and checks that preflight created nothing by
comparing what the emulator holds before and after its tests. Credentials: moto accepts any key unless its request authentication is switched on
(`POST /moto-api/reset-auth`); the bad-credentials tests switch it on, so moto checks the keys
against the IAM users it holds and rejects unknown ones, then switch it off again. What moto cannot
do, and how it is covered here:

- EC2 vCPU quotas: moto's Service Quotas knows only VPC quotas and answers NoSuchResourceException
  for EC2 codes; the warning path runs against moto, the too-small-quota path against a stub
  Service Quotas client handed in through the session (no patching).
- A bucket owned by another account: moto cannot make one; not covered here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from helpers.emulators import REGION, AwsEmulator, free_port
from rlinfra.clouds.aws import preflight as aws_preflight
from rlinfra.clouds.aws.preflight import AwsTarget, preflight
from rlinfra.errors import UsageError


@dataclass
class Emulator:
    """The shared emulator, seen with the keys of this module's IAM user."""

    api: AwsEmulator
    keys: dict[str, str]
    before: dict[str, Any]

    @property
    def url(self) -> str:
        return self.api.url

    def session(self, key_id: str | None = None, secret: str | None = None) -> Any:
        return self.api.session(
            key_id or self.keys["AccessKeyId"], secret or self.keys["SecretAccessKey"]
        )

    def client(self, service: str) -> Any:
        return self.session().client(service, endpoint_url=self.url)

    def require_authentication(self, on: bool) -> None:
        self.api.require_authentication(on)


def holdings(api: AwsEmulator) -> dict[str, Any]:
    """What preflight must never make: instances, key pairs, VPCs, buckets."""
    ec2, s3 = api.client("ec2"), api.client("s3")
    return {
        "instances": sorted(
            i["InstanceId"]
            for r in ec2.describe_instances()["Reservations"]
            for i in r["Instances"]
        ),
        "key_pairs": sorted(k["KeyName"] for k in ec2.describe_key_pairs()["KeyPairs"]),
        "vpcs": sorted((v["VpcId"], v["IsDefault"]) for v in ec2.describe_vpcs()["Vpcs"]),
        "buckets": sorted(b["Name"] for b in s3.list_buckets()["Buckets"]),
    }


@pytest.fixture(scope="module")
def emu(aws_api: AwsEmulator) -> Iterator[Emulator]:
    # An IAM user with keys, made while moto still accepts anyone.
    iam = aws_api.client("iam")
    iam.create_user(UserName="rlinfra-preflight")
    iam.put_user_policy(
        UserName="rlinfra-preflight",
        PolicyName="all",
        PolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
            }
        ),
    )
    keys = iam.create_access_key(UserName="rlinfra-preflight")["AccessKey"]
    try:
        yield Emulator(aws_api, keys, holdings(aws_api))
    finally:
        aws_api.require_authentication(False)
        iam.delete_access_key(UserName="rlinfra-preflight", AccessKeyId=keys["AccessKeyId"])
        iam.delete_user_policy(UserName="rlinfra-preflight", PolicyName="all")
        iam.delete_user(UserName="rlinfra-preflight")


def target(**overrides: Any) -> AwsTarget:
    values: dict[str, Any] = {
        "region": REGION,
        "zone": "us-east-1a",
        "instance_type": "p5.48xlarge",
        "node_count": 2,
        "bucket": "rlinfra-preflight-ckpt",
    }
    values.update(overrides)
    return AwsTarget(**values)


def one_line_error(excinfo: pytest.ExceptionInfo[UsageError]) -> UsageError:
    error = excinfo.value
    assert "\n" not in error.message
    assert error.exit_code == 2
    return error


# --- a good run ------------------------------------------------------------------------------------


def test_preflight_passes_with_a_warning_where_quotas_cannot_answer(emu: Emulator) -> None:
    report = preflight(target(), session=emu.session(), endpoint_url=emu.url)
    assert report.account == "123456789012"
    assert report.arn.endswith("user/rlinfra-preflight") or report.arn
    assert "us-east-1a" in report.zones
    [warning] = report.warnings
    assert "L-417A185B" in warning and "NoSuchResourceException" in warning
    assert "384 vCPUs" in warning  # 2 x 192


# --- credentials ---------------------------------------------------------------------------------


def test_bad_credentials_give_a_one_line_error(emu: Emulator) -> None:
    emu.require_authentication(True)
    try:
        # The user's keys are accepted...
        assert aws_preflight.check_credentials(emu.session(), REGION, emu.url)["arn"].endswith(
            "user/rlinfra-preflight"
        )
        # ...a key moto does not know is not,
        with pytest.raises(UsageError) as unknown:
            preflight(
                target(),
                session=emu.session("AKIAIOSFODNN7EXAMPLE", "not-a-secret"),
                endpoint_url=emu.url,
            )
        error = one_line_error(unknown)
        assert error.message.startswith("AWS did not accept the credentials (InvalidClientTokenId)")
        assert error.hint and "AWS_ACCESS_KEY_ID" in error.hint
        # ...and neither is a known key with the wrong secret.
        with pytest.raises(UsageError) as wrong_secret:
            aws_preflight.check_credentials(
                emu.session(emu.keys["AccessKeyId"], "wrong-secret"), REGION, emu.url
            )
        assert "SignatureDoesNotMatch" in one_line_error(wrong_secret).message
    finally:
        emu.require_authentication(False)


def test_missing_credentials_give_a_one_line_error(
    emu: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import boto3

    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    empty = tmp_path / "empty"
    empty.write_text("")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(UsageError) as excinfo:
        aws_preflight.check_credentials(boto3.Session(region_name=REGION), REGION, emu.url)
    error = one_line_error(excinfo)
    assert error.message.startswith("no AWS credentials found")
    assert error.hint and "AWS_PROFILE" in error.hint


def test_unreachable_sts_gives_a_one_line_error(emu: Emulator) -> None:
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(UsageError) as excinfo:
        aws_preflight.check_credentials(emu.session(), REGION, closed)
    assert "STS did not answer" in one_line_error(excinfo).message


# --- region, zone, type ---------------------------------------------------------------------------


def test_unknown_region_gives_a_one_line_error(emu: Emulator) -> None:
    with pytest.raises(UsageError) as excinfo:
        preflight(
            target(region="mars-east-1", zone=None), session=emu.session(), endpoint_url=emu.url
        )
    assert one_line_error(excinfo).message == "unknown AWS region 'mars-east-1'"
    with pytest.raises(UsageError) as typo:
        aws_preflight.check_region("us-eest-1", emu.session(), emu.url)
    assert typo.value.hint == "Did you mean 'us-east-1'?" or "Did you mean" in str(typo.value.hint)


def test_type_not_offered_in_the_zone_gives_a_one_line_error(emu: Emulator) -> None:
    # The emulator's offerings (a snapshot of AWS's): p4de.24xlarge is in us-east-1b/c, not 1a.
    with pytest.raises(UsageError) as excinfo:
        preflight(
            target(instance_type="p4de.24xlarge", zone="us-east-1a"),
            session=emu.session(),
            endpoint_url=emu.url,
        )
    error = one_line_error(excinfo)
    assert error.message == "instance type p4de.24xlarge is not offered in zone us-east-1a"
    assert error.hint and "us-east-1b" in error.hint and "us-east-1a" not in error.hint


def test_type_not_offered_in_the_region_gives_a_one_line_error(emu: Emulator) -> None:
    with pytest.raises(UsageError) as excinfo:
        aws_preflight.check_offered(REGION, "p5e.48xlarge", None, emu.session(), emu.url)
    assert "not offered in any zone of us-east-1" in one_line_error(excinfo).message


def test_zone_of_another_region_gives_a_one_line_error(emu: Emulator) -> None:
    with pytest.raises(UsageError) as excinfo:
        preflight(target(zone="us-west-2a"), session=emu.session(), endpoint_url=emu.url)
    assert one_line_error(excinfo).message == "zone 'us-west-2a' is not in region us-east-1"


# --- quota ----------------------------------------------------------------------------------------


def test_quota_warning_when_service_quotas_cannot_answer(emu: Emulator) -> None:
    warning = aws_preflight.check_vcpu_quota(
        REGION, "g6.xlarge", 3, 4, spot=True, session=emu.session(), endpoint_url=emu.url
    )
    assert warning is not None
    assert "All G and VT Spot Instance Requests" in warning and "L-3819A6DF" in warning
    assert "12 vCPUs" in warning


class _StubQuotas:
    """Service Quotas that answers one applied value (moto has no EC2 quotas)."""

    def __init__(self, value: float) -> None:
        self.value = value
        self.asked: list[str] = []

    def get_service_quota(self, ServiceCode: str, QuotaCode: str) -> dict[str, Any]:
        self.asked.append(f"{ServiceCode}/{QuotaCode}")
        return {"Quota": {"Value": self.value}}

    def get_aws_default_service_quota(self, **_: str) -> dict[str, Any]:
        raise AssertionError("not needed when the applied value is known")


class _StubSession:
    def __init__(self, quotas: _StubQuotas) -> None:
        self.quotas = quotas

    def client(self, service: str, **_: Any) -> Any:
        assert service == "service-quotas"
        return self.quotas


def test_too_small_quota_gives_a_one_line_error_with_a_stub_quota_answer() -> None:
    quotas = _StubQuotas(96)
    with pytest.raises(UsageError) as excinfo:
        aws_preflight.check_vcpu_quota(REGION, "p5.48xlarge", 2, 192, session=_StubSession(quotas))
    error = one_line_error(excinfo)
    assert error.message == (
        "vCPU quota 'Running On-Demand P instances' (L-417A185B) in us-east-1 is 96, "
        "but 2 x p5.48xlarge need 384 vCPUs"
    )
    assert error.hint and "at least 384" in error.hint
    assert quotas.asked == ["ec2/L-417A185B"]
    assert (
        aws_preflight.check_vcpu_quota(
            REGION, "r7i.8xlarge", 2, 32, session=_StubSession(_StubQuotas(64))
        )
        is None
    )


def test_quota_codes_by_family() -> None:
    assert aws_preflight.vcpu_quota_for("p4d.24xlarge", spot=False)[0] == "L-417A185B"
    assert aws_preflight.vcpu_quota_for("p5.48xlarge", spot=True)[0] == "L-7212CCBC"
    assert aws_preflight.vcpu_quota_for("g5.xlarge", spot=False)[0] == "L-DB2E81BA"
    assert aws_preflight.vcpu_quota_for("m7i.large", spot=False)[0] == "L-1216C47A"
    assert aws_preflight.vcpu_quota_for("c7i.large", spot=True)[0] == "L-34B43A08"


# --- bucket ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("ab", "3 to 63 characters"),
        ("Checkpoints", "lowercase letters"),
        ("ckpt..bucket", "two dots"),
        ("192.168.1.10", "IP address"),
        ("xn--ckpt", "'xn--'"),
        ("ckpt-s3alias", "'-s3alias'"),
    ],
)
def test_invalid_bucket_name_gives_a_one_line_error(emu: Emulator, name: str, problem: str) -> None:
    with pytest.raises(UsageError) as excinfo:
        preflight(target(bucket=name), session=emu.session(), endpoint_url=emu.url)
    error = one_line_error(excinfo)
    assert error.message.startswith(f"bucket name {name!r} is not valid")
    assert problem in error.message


def test_existing_bucket_of_this_account_passes_and_another_region_warns(emu: Emulator) -> None:
    s3 = emu.client("s3")
    s3.create_bucket(Bucket="rlinfra-preflight-mine")
    try:
        assert (
            aws_preflight.check_bucket(
                "rlinfra-preflight-mine", REGION, "123456789012", emu.session(), emu.url
            )
            == []
        )
        [warning] = aws_preflight.check_bucket(
            "rlinfra-preflight-mine", "us-west-2", "123456789012", emu.session(), emu.url
        )
        assert "exists in us-east-1, not in us-west-2" in warning
    finally:
        s3.delete_bucket(Bucket="rlinfra-preflight-mine")


# --- read only -------------------------------------------------------------------------------------


def test_preflight_created_nothing(emu: Emulator) -> None:
    assert holdings(emu.api) == emu.before
