"""Terraform state in S3 with Terraform's lock file (profile `state: {backend: s3}`), for real:
the local cloud's storage root (built-in resources only) applied through rlinfra's Terraform
runner against the test process's AWS API emulator, in a state bucket of the test's own; the state object and the lock are read
back with boto3."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from helpers.emulators import AwsEmulator
from rlinfra.clouds.planning import make_plan
from rlinfra.context import Context, Controller
from rlinfra.deploy import write_files
from rlinfra.errors import OperationError
from rlinfra.profile import load_profile, profile_from_data
from rlinfra.render import backend_files, render
from rlinfra.runners.terraform import Terraform

STATE_BUCKET = "rlinfra-tfstate"


def s3_plan(cluster: str, bucket: str = STATE_BUCKET):  # type: ignore[no-untyped-def]
    profile, source = load_profile("local")
    data = profile.model_dump(mode="json")
    data["state"] = {"backend": "s3", "bucket": bucket, "key_prefix": "teams/rl"}
    return make_plan(profile_from_data(data, source, "local"), source, cluster)


def test_backend_files_only_for_s3_state() -> None:
    profile, source = load_profile("local")
    assert backend_files(make_plan(profile, source), "storage") == {}
    files = backend_files(s3_plan("c1"), "storage", "http://127.0.0.1:5000")
    assert 'backend "s3" {}' in files["backend.tf"]
    config = files["backend.tfbackend"]
    assert 'key          = "teams/rl/c1/storage.tfstate"' in config
    assert "use_lockfile = true" in config and "encrypt      = true" in config
    assert 'endpoints                   = { s3 = "http://127.0.0.1:5000" }' in config
    assert "endpoints" not in backend_files(s3_plan("c1"), "storage")["backend.tfbackend"]


def test_state_without_bucket_is_refused() -> None:
    profile, source = load_profile("local")
    data = profile.model_dump(mode="json")
    data["state"] = {"backend": "s3"}
    with pytest.raises(Exception, match="backend s3 needs a bucket"):
        profile_from_data(data, source, "local")


def test_state_and_lock_live_in_s3(
    aws_api: AwsEmulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_CA_BUNDLE", raising=False)
    cluster = f"st-{uuid.uuid4().hex[:6]}"
    state_bucket = f"{STATE_BUCKET}-{cluster}"
    emu = aws_api
    s3 = emu.client("s3")
    s3.create_bucket(Bucket=state_bucket)
    try:
        plan = s3_plan(cluster, state_bucket)
        folder = tmp_path / "deploy"
        ctx = Context(
            deployment_dir=folder,
            home=tmp_path / "home",
            cache=tmp_path / "cache",
            ssh_public_key="ssh-ed25519 AAAA test",
            task_id=f"{cluster}-t",
            controller=Controller(
                uv_binary="uv", system_python="python3", wheelhouse=None, aws_endpoint=emu.url
            ),
        )
        write_files(folder, render(plan, ctx))
        tf = Terraform(folder / "terraform" / "storage", folder / "logs")
        key = f"teams/rl/{cluster}/storage.tfstate"

        tf.init()
        assert tf.plan() is True
        tf.apply()
        state = json.loads(s3.get_object(Bucket=state_bucket, Key=key)["Body"].read())
        assert {r["type"] for r in state["resources"]} >= {"terraform_data"}
        assert not (tf.root / "terraform.tfstate").exists()
        listed = [o["Key"] for o in s3.list_objects_v2(Bucket=state_bucket)["Contents"]]
        assert listed == [key]  # the lock file is gone once the apply ended
        assert (tmp_path / "home" / "buckets" / "rlinfra-local-checkpoints").is_dir()
        assert tf.has_state() is True
        assert tf.plan() is False  # converged: a re-run changes nothing

        # Another run holds the lock: this one refuses to touch the state.
        lock = {"ID": "0f1e", "Operation": "OperationTypeApply", "Who": "ci@runner"}
        s3.put_object(Bucket=state_bucket, Key=key + ".tflock", Body=json.dumps(lock).encode())
        with pytest.raises(OperationError, match="(?i)lock"):
            tf.plan()
        s3.delete_object(Bucket=state_bucket, Key=key + ".tflock")

        tf.destroy()
        assert tf.has_state() is False
    finally:
        for item in s3.list_objects_v2(Bucket=state_bucket).get("Contents", []):
            s3.delete_object(Bucket=state_bucket, Key=item["Key"])
        s3.delete_bucket(Bucket=state_bucket)
