"""One profile, several clouds (`cloud: [aws, gcp]`): every cloud's machines in the plan,
cheapest first, the cheapest chosen; `--cloud` picks one; the resolved profile is one cloud's."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlinfra.clouds.planning import make_plan
from rlinfra.errors import UsageError
from rlinfra.ops.prepare import Request, prepare
from rlinfra.profile import Overrides, profile_from_data

REPO = Path(__file__).resolve().parents[2]
RLINFRA = str(Path(sys.executable).parent / "rlinfra")
GPU_PROFILES = (
    "h100x1",
    "h100x1-ppo",
    "h100x1-grpo",
    "h100x2",
    "search-grpo",
    "search-grpo-external",
    "search-infer-google",
    "search-infer-local",
)


def two_clouds(**changes: object) -> dict[str, object]:
    data = yaml.safe_load((REPO / "profiles" / "h100x2.yaml").read_text())
    data.update(changes)
    return data


def plan_of(data: dict[str, object], cloud: str | None = None):
    profile = profile_from_data(data, "t.yaml", "t")
    if cloud is None:
        return make_plan(profile, "t.yaml")
    from rlinfra.profile import apply_overrides

    profile, changes = apply_overrides(profile, Overrides(cloud=cloud), "t.yaml")
    return make_plan(profile, "t.yaml", overrides=tuple(changes))


# The recipe's single-node workflows ran on Nebius: their profiles list it first.
NEBIUS_PROFILES = ("h100x1-ppo", "h100x1-grpo")


def test_every_builtin_gpu_profile_lists_both_clouds() -> None:
    for name in GPU_PROFILES:
        data = yaml.safe_load((REPO / "profiles" / f"{name}.yaml").read_text())
        expected = ["nebius", "aws", "gcp"] if name in NEBIUS_PROFILES else ["aws", "gcp"]
        assert data["cloud"] == expected, name


def test_plan_lists_both_clouds_cheapest_first_and_chooses_the_cheapest() -> None:
    plan = plan_of(two_clouds())
    clouds = {o.cloud for o in plan.clouds}
    assert clouds == {"aws", "gcp"}
    prices = [o.candidate.hourly for o in plan.clouds if not math.isnan(o.candidate.hourly)]
    assert prices == sorted(prices) and len(prices) >= 5
    first = plan.clouds[0]
    assert (first.cloud, first.candidate.instance_type) == ("aws", "p4d.24xlarge")
    assert plan.cloud == "aws" and plan.profile.region == "us-east-1"
    assert plan.instance_type == "p4d.24xlarge"
    # Failover at `up` stays on the chosen cloud.
    assert all(c.instance_type.startswith("p") for c in plan.choices)
    assert {o.region for o in plan.clouds if o.cloud == "gcp"} == {"us-central1"}


def test_the_cheaper_cloud_wins_and_a_cloud_without_the_machine_is_left_out_with_why() -> None:
    plan = plan_of(two_clouds(resources={"accelerators": "A100:1", "num_nodes": 1}))
    assert plan.cloud == "gcp" and plan.instance_type == "a2-highgpu-1g"
    assert plan.profile.zone == "us-central1-a" and plan.profile.clouds == []
    (note,) = plan.clouds_left_out
    assert note.startswith("aws: ") and "A100:1" in note


def test_cloud_flag_picks_one_candidate() -> None:
    plan = plan_of(two_clouds(), cloud="gcp")
    assert plan.cloud == "gcp" and plan.clouds == ()
    assert plan.instance_type == "a2-highgpu-8g"
    assert [(o.field, o.old, o.new) for o in plan.overrides] == [("cloud", "aws,gcp", "gcp")]
    with pytest.raises(UsageError, match=r"--cloud aws: t.yaml runs on gcp only"):
        plan_of(yaml.safe_load((REPO / "profiles" / "h100x8-gcp.yaml").read_text()), cloud="aws")


def test_no_candidate_cloud_names_each_reason() -> None:
    with pytest.raises(UsageError) as caught:
        plan_of(two_clouds(resources={"accelerators": "H100:3"}))
    message = caught.value.message
    assert message.startswith("t.yaml: cloud: no candidate cloud can run this profile (aws: ")
    assert "; gcp: " in message


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"cloud": ["aws", "local"], "regions": {"aws": "us-east-1"}, "zones": {}},
            r"t.yaml: cloud: local cannot be one of several candidates \(only aws, gcp, nebius can\)",
        ),
        (
            {"cloud": ["aws", "nowhere"], "regions": {"aws": "us-east-1"}, "zones": {}},
            r"t.yaml: cloud: 'nowhere' is not supported",
        ),
        ({"cloud": ["aws", "aws"]}, "a cloud is listed twice"),
        ({"region": "us-east-1"}, "with several clouds give each cloud's under regions/zones"),
        ({"regions": {"aws": "us-east-1", "ssh": "x"}}, "regions.ssh: ssh is not a cloud"),
        ({"cloud": "aws", "regions": {"aws": "us-east-1"}, "zones": {}}, "only with several"),
    ],
)
def test_bad_cloud_lists_are_refused(changes: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        plan_of(two_clouds(**changes))


def test_the_resolved_profile_is_the_chosen_clouds_and_plans_the_same() -> None:
    plan = plan_of(two_clouds(resources={"accelerators": "A100:1", "num_nodes": 1}))
    dumped = plan.profile.model_dump(mode="json")
    assert dumped["cloud"] == "gcp" and "clouds" not in dumped and "regions" not in dumped
    request = Request(profile="t.yaml", cluster="t", resolved=dumped)
    again, _ = prepare(request, {}, need_secrets=False)
    assert (again.cloud, again.instance_type) == ("gcp", "a2-highgpu-1g")


def test_single_cloud_profiles_dump_as_before() -> None:
    plan = plan_of(yaml.safe_load((REPO / "profiles" / "local.yaml").read_text()))
    dumped = plan.profile.model_dump(mode="json")
    assert not {"clouds", "regions", "zones", "project"} & set(dumped)


def test_cli_plan_json_and_a_missing_gcp_credential_is_exit_2(tmp_path: Path) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GOOGLE_", "CLOUDSDK_", "AWS_", "RLINFRA_"))
    }
    env.update(HOME=str(tmp_path), RLINFRA_HOME=str(tmp_path / "home"), RLINFRA_QUIET="1")
    shown = subprocess.run(
        [RLINFRA, "plan", "-p", "h100x2", "--json"], env=env, capture_output=True, text=True
    )
    assert shown.returncode == 0, shown.stderr
    summary = json.loads(shown.stdout)
    assert summary["cloud"] == "aws" and summary["clouds"][0]["chosen"] is True
    assert {row["cloud"] for row in summary["clouds"]} == {"aws", "gcp"}
    data = yaml.safe_load((REPO / "profiles" / "h100x2.yaml").read_text())
    data["project"] = "my-project-123"
    profile = tmp_path / "h100x2-mine.yaml"
    profile.write_text(yaml.safe_dump(data))
    argv = [RLINFRA, "up", "-p", str(profile), "--cloud", "gcp", "--yes"]
    refused = subprocess.run(
        [*argv, "--allow-cidr", "203.0.113.7/32"],
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.startswith("Error: ") and "credentials" in refused.stderr.lower()
    assert len(refused.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "home" / "clusters").exists()


def test_prepare_plans_once_and_adds_the_account_after(monkeypatch: pytest.MonkeyPatch) -> None:
    """The account id is a fact asked after the plan's own checks: the profile is planned once,
    and the account only renames the default buckets."""
    import rlinfra.clouds.planning
    from rlinfra.clouds.aws.cloud import AwsCloud
    from rlinfra.plan import account_suffix

    calls: list[str] = []
    real = rlinfra.clouds.planning.decide

    def counted(*args: object, **kwargs: object) -> object:
        calls.append("decide")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(rlinfra.clouds.planning, "decide", counted)
    monkeypatch.setattr(AwsCloud, "account_id", lambda self, environ, required: "123456789012")
    request = Request(
        profile="h100x2", overrides=Overrides(cloud="aws", allowed_cidrs=["10.0.0.0/8"])
    )
    plan, _ = prepare(request, {}, need_secrets=False, account="lookup")
    assert calls == ["decide"]
    assert plan.cloud == "aws"
    assert plan.storage_buckets and all(
        b.endswith("-" + account_suffix("123456789012")) for b in plan.storage_buckets
    )
