"""The AWS preflight (rlinfra.clouds.aws_preflight) against an AWS API emulator.

Each test module run starts its own moto server on a free port on 127.0.0.1 and stops it by pid
at the end. Credentials: moto accepts any key unless its request authentication is switched on
(`POST /moto-api/reset-auth`); the bad-credentials tests switch it on, so moto checks the keys
against the IAM users it holds and rejects unknown ones, then switch it off again. What moto cannot
do, and how it is covered here:

- EC2 vCPU quotas: moto's Service Quotas knows only VPC quotas and answers NoSuchResourceException
  for EC2 codes; the warning path runs against moto, the too-small-quota path against a stub
  Service Quotas client handed in through the session (no patching).
- A bucket owned by another account: moto cannot make one; not covered here.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rlinfra.clouds import aws_preflight
from rlinfra.clouds.aws_preflight import AwsTarget, preflight
from rlinfra.errors import UsageError

MOTO_SERVER = Path(sys.executable).parent / "moto_server"
REGION = "us-east-1"

pytestmark = pytest.mark.skipif(
    not MOTO_SERVER.exists(), reason=f"moto_server not found next to {sys.executable}"
)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Emulator:
    url: str
    keys: dict[str, str]

    def session(self, key_id: str | None = None, secret: str | None = None) -> Any:
        import boto3

        return boto3.Session(
            aws_access_key_id=key_id or self.keys["AccessKeyId"],
            aws_secret_access_key=secret or self.keys["SecretAccessKey"],
            region_name=REGION,
        )

    def client(self, service: str) -> Any:
        return self.session().client(service, endpoint_url=self.url)

    def require_authentication(self, on: bool) -> None:
        """moto checks request signatures against its IAM users once this is on."""
        request = urllib.request.Request(
            f"{self.url}/moto-api/reset-auth",
            data=b"0" if on else b"inf",
            method="POST",
            headers={"Content-Type": "text/plain"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200


@pytest.fixture(scope="module")
def emu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    import boto3

    log = tmp_path_factory.mktemp("moto") / "moto.log"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(MOTO_SERVER), "-p", str(port), "-H", "127.0.0.1"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"moto_server did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        url = f"http://127.0.0.1:{port}"
        # An IAM user with keys, made while moto still accepts anyone.
        iam = boto3.Session(
            aws_access_key_id="setup", aws_secret_access_key="setup", region_name=REGION
        ).client("iam", endpoint_url=url)
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
        yield Emulator(url, keys)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


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
    ec2, s3 = emu.client("ec2"), emu.client("s3")
    assert ec2.describe_instances()["Reservations"] == []
    assert ec2.describe_key_pairs()["KeyPairs"] == []
    assert [v["IsDefault"] for v in ec2.describe_vpcs()["Vpcs"]] == [True]
    assert s3.list_buckets()["Buckets"] == []
