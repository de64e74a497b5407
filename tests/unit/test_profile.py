"""Profiles: validation, errors that name the file and field, overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlinfra.accelerators import parse_accelerator
from rlinfra.errors import ProfileError, UsageError
from rlinfra.profile import (
    Overrides,
    apply_overrides,
    check_cluster_name,
    load_profile,
    parse_env_pairs,
    parse_secret_flags,
    profile_from_data,
)


def write(tmp_path: Path, text: str, name: str = "p.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_builtin_local_profile_loads() -> None:
    profile, source = load_profile("local")
    assert source.endswith("profiles/local.yaml")
    assert profile.cloud == "local"
    assert profile.resources.num_nodes == 2
    assert profile.gpus_per_node == 0
    assert profile.storage[0].bucket == "rlinfra-local-checkpoints"


def test_unknown_key_names_file_field_and_close_match(tmp_path: Path) -> None:
    path = write(tmp_path, "resources:\n  num_node: 2\n")
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    assert err.value.message == f"{path}: resources.num_node: unknown key"
    assert err.value.hint == "Did you mean 'num_nodes'?"


def test_unknown_top_level_key(tmp_path: Path) -> None:
    path = write(tmp_path, "acelerators: H100:8\n")
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    assert err.value.field == "acelerators"
    assert err.value.hint is not None and "Known keys" in err.value.hint


def test_wrong_type_reports_value(tmp_path: Path) -> None:
    path = write(tmp_path, "resources:\n  num_nodes: two\n")
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    assert err.value.field == "resources.num_nodes"
    assert "'two'" in err.value.problem


@pytest.mark.parametrize("nodes", [0, -1, 65])
def test_node_count_range(nodes: int) -> None:
    with pytest.raises(ProfileError, match="resources.num_nodes: must be between 1 and 64"):
        profile_from_data({"resources": {"num_nodes": nodes}}, "x.yaml", "x")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("H100:eight", "count 'eight' is not a whole number"),
        ("H100:8:2", "expected NAME:COUNT"),
        ("H10:8", "Did you mean 'H100'?"),
        ("H100:0", "count must be between 1 and 16"),
    ],
)
def test_bad_accelerators(spec: str, message: str) -> None:
    with pytest.raises(ProfileError) as err:
        profile_from_data({"cloud": "aws", "resources": {"accelerators": spec}}, "x.yaml", "x")
    assert err.value.field == "resources.accelerators"
    assert message in err.value.problem


def test_accelerator_candidates_and_case() -> None:
    profile = profile_from_data(
        {"cloud": "aws", "resources": {"accelerators": ["a100:8", "A100-80GB:8", "H100:8"]}},
        "x.yaml",
        "x",
    )
    assert profile.resources.accelerators == ["A100:8", "A100-80GB:8", "H100:8"]
    assert parse_accelerator("L4") == parse_accelerator("L4:1")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"ports": [8265, 8265]}, "port 8265 is listed twice"),
        ({"ports": [70000]}, "port 70000 is out of range"),
        ({"network": {"ray": {"head_port": 0}}}, "network.ray.head_port 0 is out of range"),
        (
            {"network": {"ray": {"head_port": 8265}}},
            "network.ray.dashboard_port 8265 is also network.ray.head_port",
        ),
        ({"ports": [6379]}, "ports: 6379 is also network.ray.head_port"),
    ],
)
def test_bad_ports(data: dict[str, object], message: str) -> None:
    with pytest.raises(ProfileError) as err:
        profile_from_data(data, "x.yaml", "x")
    assert message in err.value.message


def test_public_exposure_needs_explicit_flag() -> None:
    with pytest.raises(ProfileError, match="whole internet"):
        profile_from_data({"network": {"allowed_cidrs": ["0.0.0.0/0"]}}, "x.yaml", "x")
    with pytest.raises(ProfileError, match="job API \\(token-protected\\) to every network"):
        profile_from_data({"network": {"ray": {"dashboard_host": "0.0.0.0"}}}, "x.yaml", "x")
    ok = profile_from_data(
        {"network": {"allow_public": True, "allowed_cidrs": ["0.0.0.0/0"]}}, "x.yaml", "x"
    )
    assert ok.network.allowed_cidrs == ["0.0.0.0/0"]


def test_bucket_name_rules() -> None:
    with pytest.raises(ProfileError, match=r"storage\[0\]\.bucket: 'Bad_Name' is not a valid"):
        profile_from_data({"storage": [{"bucket": "Bad_Name"}]}, "x.yaml", "x")


def test_check_sizes_default_per_backend_and_refusals() -> None:
    # Unset: the check script picks the sizes by backend (gloo 1, 4, 16; NCCL 64, 256, 1024),
    # so a GPU profile that gives none is not measured with CPU-sized messages.
    for name in ("local", "h100x1"):
        profile, _ = load_profile(name)
        assert profile.check.sizes_mib is None, name
    given = profile_from_data({"check": {"sizes_mib": [2, 8]}}, "x.yaml", "x")
    assert given.check.sizes_mib == [2, 8]
    for bad in ([], [0], [8193]):
        with pytest.raises(ProfileError, match=r"check\.sizes_mib: .*between 1 and 8192 MiB"):
            profile_from_data({"check": {"sizes_mib": bad}}, "x.yaml", "x")


def test_invalid_yaml_and_non_mapping(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="not valid YAML at line 2"):
        load_profile(write(tmp_path, "a: 1\n b: [\n"))
    with pytest.raises(ProfileError, match="must be a mapping"):
        load_profile(write(tmp_path, "- 1\n- 2\n", "list.yaml"))


def test_unknown_profile_lists_known() -> None:
    with pytest.raises(UsageError) as err:
        load_profile("locl")
    assert err.value.message == "unknown profile 'locl'"
    assert err.value.hint is not None
    assert err.value.hint.startswith("Did you mean 'local'?")
    assert "Known profiles: " in err.value.hint


def test_overrides_are_reported_against_file_values() -> None:
    profile, source = load_profile("local")
    new, changes = apply_overrides(
        profile, Overrides(num_nodes=3, env={"TOTAL_EPOCHS": "10", "MODEL_NAME": "m"}), source
    )
    assert new.resources.num_nodes == 3
    assert new.env["TOTAL_EPOCHS"] == "10"
    assert [(c.field, c.old, c.new) for c in changes] == [
        ("resources.num_nodes", "2", "3"),
        ("env.TOTAL_EPOCHS", "1", "10"),
        ("env.MODEL_NAME", "unset", "m"),
    ]


def test_override_validation_names_command_line() -> None:
    profile, source = load_profile("local")
    with pytest.raises(ProfileError) as err:
        apply_overrides(profile, Overrides(num_nodes=0), source)
    assert "(with command-line overrides)" in err.value.message
    assert "resources.num_nodes" in err.value.message


def test_env_and_secret_flag_parsing() -> None:
    assert parse_env_pairs(["A=1", "B=x=y"]) == {"A": "1", "B": "x=y"}
    with pytest.raises(UsageError, match="expected NAME=VALUE"):
        parse_env_pairs(["NOEQUALS"])
    assert parse_secret_flags(["HF_TOKEN", "WANDB_API_KEY=abc"]) == {
        "HF_TOKEN": None,
        "WANDB_API_KEY": "abc",
    }
    with pytest.raises(UsageError):
        parse_secret_flags(["bad-name"])


@pytest.mark.parametrize("name", ["Local", "1abc", "a_b", "x" * 32, ""])
def test_bad_cluster_names(name: str) -> None:
    with pytest.raises(UsageError, match="bad cluster name"):
        check_cluster_name(name)
