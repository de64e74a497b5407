"""The nebius cloud on the driver's side: planning beside AWS and GCP, the rendered roots and
role settings, its profile key, `up`'s refusals before any change (the preflight against a
loopback gRPC server standing in for Nebius's API), canary credentials kept out of every
rendered file, and its bucket store against the AWS API emulator (moto) standing in for Nebius
Object Storage at a Nebius-style region.

No Nebius provider binary and no Nebius API exist here: Terraform never runs on these roots
(tests/terraform/test_nebius_modules.py checks them statically).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import contexts
from helpers.cli import CliRunner, files_under, usage_line, write_yaml
from helpers.emulators import AwsEmulator
from helpers.hcl import labelled, parse_file
from helpers.nebius_api import PROJECT, SUBNET, TOKEN, LoopbackNebiusApi
from helpers.paths import REPO
from rlinfra.clouds.nebius import cloud as nebius
from rlinfra.clouds.planning import make_plan
from rlinfra.clouds.registry import cloud_for
from rlinfra.errors import ProfileError, UsageError
from rlinfra.plan import Plan
from rlinfra.profile import Overrides, apply_overrides, load_profile, profile_from_data
from rlinfra.render import render

ROOTS = REPO / "terraform" / "roots" / "nebius"
KEY_ID = "NEBIUSCANARYKEYID0001"
SECRET = "nebius-canary-secret-of-the-bucket-key"
IAM_CANARY = "v1.nebius-canary-iam-token-never-rendered"


def nebius_data(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "cloud": "nebius",
        "region": "eu-north1",
        "resources": {"accelerators": "H100:1", "num_nodes": 1},
        "network": {"allowed_cidrs": ["198.51.100.7/32"]},
        "storage": [{"bucket": "team-ckpt-nebius-7f3a", "mount_path": "/checkpoints"}],
        "nebius": {"project_id": PROJECT},
    }
    data.update(changes)
    return data


def plan_of(data: dict[str, Any], cluster: str = "neb") -> Plan:
    return make_plan(profile_from_data(data, "n.yaml", cluster), "n.yaml", cluster)


def root_variables(root: str) -> tuple[set[str], set[str]]:
    """A root's variables, and those without a default (required)."""
    parsed = parse_file(ROOTS / root / "variables.tf")
    names: set[str] = set()
    required: set[str] = set()
    for labels, body in labelled(parsed, "variable"):
        names.add(labels[0])
        if "default" not in body:
            required.add(labels[0])
    return names, required


# --- planning -----------------------------------------------------------------------------------


def test_the_recipes_single_node_profile_plans_nebius_first_on_price_and_aws_still_works() -> None:
    profile, source = load_profile("h100x1-ppo")
    plan = make_plan(profile, source)
    assert plan.cloud == "nebius"
    assert plan.instance_type == "gpu-h100-sxm/1gpu-16vcpu-200gb"
    by_cloud = {option.cloud: option for option in reversed(plan.clouds)}
    assert {"nebius", "aws"} <= set(by_cloud)
    cheapest = plan.clouds[0]
    assert cheapest.cloud == "nebius"
    assert all(cheapest.candidate.hourly <= o.candidate.hourly for o in plan.clouds)  # type: ignore[operator]
    on_aws, changes = apply_overrides(profile, Overrides(cloud="aws"), source)
    aws_plan = make_plan(on_aws, source, overrides=tuple(changes))
    assert aws_plan.cloud == "aws" and aws_plan.instance_type.startswith("p5.")


def test_plan_on_the_command_line_lists_nebius_first_and_says_why(
    cli: CliRunner, home: Path
) -> None:
    done = cli("plan", "-p", "h100x1-ppo", "--allow-cidr", "198.51.100.7/32")
    assert done.code == 0, done.err
    lines = done.out.splitlines()
    assert lines[0].startswith("cluster h100x1-ppo on nebius")
    rows = [line for line in lines if "H100:1" in line]
    assert rows[0].lstrip().startswith("* nebius"), rows
    assert any("the cheapest is chosen" in line for line in lines)
    assert files_under(home) == []


def test_an_8_gpu_preset_on_several_nodes_gets_the_catalogs_fabric_and_one_node_none() -> None:
    two = plan_of(nebius_data(resources={"accelerators": "H200:8", "num_nodes": 2}))
    cluster = nebius.CLOUD.tfvars(two, contexts.fixed_context("neb"))["cluster"]
    assert (cluster["platform"], cluster["preset"]) == ("gpu-h200-sxm", "8gpu-128vcpu-1600gb")
    assert cluster["infiniband_fabric"] == "fabric-7"
    one = plan_of(nebius_data(resources={"accelerators": "H200:8", "num_nodes": 1}))
    assert (
        nebius.CLOUD.tfvars(one, contexts.fixed_context("neb"))["cluster"]["infiniband_fabric"]
        is None
    )


def test_a_fabric_the_catalog_lacks_is_refused_naming_the_field() -> None:
    data = nebius_data(
        resources={"accelerators": "H200:8", "num_nodes": 2},
        nebius={"project_id": PROJECT, "fabric": "fabric-99"},
    )
    with pytest.raises(UsageError, match=r"^n.yaml: nebius.fabric: fabric-99 is not a fabric"):
        plan_of(data)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"nebius": {"project_id": "proj-1"}}, "nebius.project_id"),
        ({"nebius": {"subnet_id": "subnet-1"}}, "nebius.subnet_id"),
        ({"nebius": {"projectid": PROJECT}}, "nebius.projectid"),
        ({"cloud": "aws", "region": "us-east-1"}, "nebius is for cloud nebius only"),
    ],
)
def test_the_nebius_key_is_checked_where_the_profile_loads(
    changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(ProfileError, match=message):
        profile_from_data(nebius_data(**changes), "n.yaml", "neb")


def test_what_nebius_cannot_do_is_refused_naming_the_field() -> None:
    with pytest.raises(UsageError, match=r"resources.max_price"):
        plan_of(nebius_data(resources={"accelerators": "H100:1", "max_price": 1.0}))
    with pytest.raises(UsageError, match=r"zone: Nebius places VMs by region only"):
        plan_of(nebius_data(zone="eu-north1-a"))
    with pytest.raises(UsageError, match=r"region: 'mars-1' is not in rlinfra's Nebius catalog"):
        plan_of(nebius_data(region="mars-1"))


# --- rendering ----------------------------------------------------------------------------------


def test_tfvars_are_the_roots_variables_and_role_settings_mount_over_s3(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(nebius.S3_ENDPOINT_ENV, raising=False)
    plan = plan_of(nebius_data(nebius={"project_id": PROJECT, "subnet_id": SUBNET}))
    ctx = contexts.fixed_context("neb")
    tfvars = nebius.CLOUD.tfvars(plan, ctx)
    for root in ("cluster", "storage"):
        names, required = root_variables(root)
        assert set(tfvars[root]) <= names, set(tfvars[root]) - names
        assert required <= set(tfvars[root]), required - set(tfvars[root])
        assert tfvars[root]["parent_id"] == PROJECT and tfvars[root]["region"] == "eu-north1"
    assert tfvars["cluster"]["existing_subnet_id"] == SUBNET
    assert tfvars["storage"]["buckets"] == ["team-ckpt-nebius-7f3a"]
    role = nebius.CLOUD.ansible_vars(plan, ctx)
    assert role["storage_backend"] == "s3"
    assert role["storage_s3_endpoint"] == "https://storage.eu-north1.nebius.cloud"
    assert role["storage_s3_region"] == "eu-north1"
    assert role["storage_s3_credentials_file"] == "/opt/rlinfra/secrets/buckets.env"
    files = render(plan, ctx)
    assert "terraform/cluster/modules/nebius_cluster/main.tf" in files
    assert "terraform/storage/modules/nebius_bucket/main.tf" in files
    # Nebius gives no preemption notice rlinfra could read: no watcher on spot nodes.
    spot = plan_of(nebius_data(resources={"accelerators": "H100:1", "spot": True}))
    assert "spot_watch_enabled" not in yaml.safe_load(render(spot, ctx)["ansible/vars.yml"])


def test_render_holds_no_canary_credential(
    cli: CliRunner, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NEBIUS_IAM_TOKEN", IAM_CANARY)
    monkeypatch.setenv("NEBIUS_S3_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("NEBIUS_S3_SECRET_ACCESS_KEY", SECRET)
    out = tmp_path / "review"
    done = cli("render", "-p", str(write_yaml(tmp_path, nebius_data())), "--out", str(out))
    assert done.code == 0, done.err
    assert (out / "terraform" / "cluster" / "terraform.tfvars.json").is_file()
    for path in out.rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            assert IAM_CANARY not in text and KEY_ID not in text and SECRET not in text, path
    for text in (done.out, done.err):
        assert IAM_CANARY not in text and SECRET not in text


# --- up's refusals, before anything is made ------------------------------------------------------


def test_up_without_a_project_or_the_bucket_key_is_one_line_and_makes_nothing(
    cli: CliRunner, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(nebius.PROJECT_ENV, raising=False)
    for name in ("NEBIUS_S3_ACCESS_KEY_ID", "NEBIUS_S3_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    no_project = write_yaml(tmp_path, nebius_data(nebius={}), "a.yaml")
    line = usage_line(cli("up", "-p", str(no_project), "--yes"))
    assert "nebius.project_id: not set" in line
    no_key = write_yaml(tmp_path, nebius_data(), "b.yaml")
    line = usage_line(cli("up", "-p", str(no_key), "--yes"))
    assert "NEBIUS_S3_ACCESS_KEY_ID and NEBIUS_S3_SECRET_ACCESS_KEY not set" in line
    assert not (home / "clusters").exists() or files_under(home / "clusters") == []


@pytest.fixture
def nebius_api(monkeypatch: pytest.MonkeyPatch) -> Any:
    for name in ("http_proxy", "https_proxy", "grpc_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    api = LoopbackNebiusApi()
    yield api
    api.close()


def test_up_runs_the_preflight_and_a_refusal_there_makes_nothing(
    cli: CliRunner,
    home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    nebius_api: LoopbackNebiusApi,
) -> None:
    """Loopback gRPC server standing in for Nebius's API: the preset is not offered there."""
    from rlinfra.clouds.nebius import preflight

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv(preflight.API_ENDPOINT_ENV, nebius_api.address)
    monkeypatch.setenv(preflight.TOKEN_ENV, TOKEN)
    monkeypatch.setenv("NEBIUS_S3_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("NEBIUS_S3_SECRET_ACCESS_KEY", SECRET)
    nebius_api.state.platforms.pop("gpu-h100-sxm")
    profile = write_yaml(tmp_path, nebius_data())
    line = usage_line(cli("up", "-p", str(profile), "--yes"))
    assert "gpu-h100-sxm" in line
    assert any(method.endswith("PlatformService/List") for method, _ in nebius_api.state.calls)
    assert not list((home / "clusters").glob("*/terraform/*/terraform.tfstate"))


# --- the bucket store -------------------------------------------------------------------------------


def test_the_store_counts_and_empties_buckets_at_the_regions_s3_endpoint(
    aws_api: AwsEmulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """moto stands in for Nebius Object Storage: the endpoint is the emulator's (the override
    tests use), the region and the key's variables Nebius's."""
    monkeypatch.setenv(nebius.S3_ENDPOINT_ENV, aws_api.url)
    monkeypatch.setenv("NEBIUS_S3_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("NEBIUS_S3_SECRET_ACCESS_KEY", "testing")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    bucket = "rlinfra-nebius-store-test"
    s3 = aws_api.client("s3")
    s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": "eu-north-1"})
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    for body in (b"one", b"two"):
        s3.put_object(Bucket=bucket, Key="global_step_1/actor.pt", Body=body)
    folder = tmp_path / "deployment"
    (folder / "terraform" / "storage").mkdir(parents=True)
    (folder / "terraform" / "storage" / "terraform.tfvars.json").write_text(
        json.dumps({"parent_id": PROJECT, "region": "eu-north1", "buckets": [bucket]})
    )
    (folder / "record.json").write_text(json.dumps({"resolved_profile": nebius_data()}))
    store = cloud_for("nebius").store(folder)
    assert store is not None
    assert store.bucket_versions(folder, bucket) == 2
    assert store.empty_bucket(folder, bucket) == 2
    assert store.bucket_versions(folder, bucket) == 0
    s3.delete_bucket(Bucket=bucket)
