"""Profile -> plan -> rendered files: decisions, determinism and golden files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from helpers import contexts
from rlinfra.clouds.local.cloud import local_subnet
from rlinfra.clouds.planning import make_plan
from rlinfra.context import Context
from rlinfra.errors import UsageError
from rlinfra.profile import Overrides, apply_overrides, load_profile, profile_from_data
from rlinfra.record import Host
from rlinfra.render import render, render_inventory
from rlinfra.secrets import resolve_secrets

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
UPDATE = os.environ.get("RLINFRA_UPDATE_GOLDEN") == "1"


def fixed_context() -> Context:
    return contexts.fixed_context(
        "local",
        system_python="/usr/bin/python3.11",
        wheelhouse="/srv/rlinfra/cache/wheelhouse/cpu-sandbox-000000000000",
        uv_on_hosts="/srv/rlinfra/cache/bin/uv-000000000000",
    )


def local_plan(nodes: int | None = None):  # type: ignore[no-untyped-def]
    profile, source = load_profile("local")
    profile, changes = apply_overrides(profile, Overrides(num_nodes=nodes), source)
    return make_plan(profile, "profiles/local.yaml", overrides=tuple(changes))


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.is_file(), f"missing golden file {path}; run with RLINFRA_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{name} differs from its golden file"


def test_plan_of_local_profile() -> None:
    plan = local_plan()
    assert plan.cluster == "local"
    assert [n.name for n in plan.nodes] == ["local-0", "local-1"]
    assert [n.role for n in plan.nodes] == ["head", "worker"]
    assert plan.gpus_per_node == 0
    assert plan.subnet == local_subnet("local")
    assert plan.pins.name == "cpu-sandbox"


def test_local_subnet_is_stable_and_in_range() -> None:
    subnets = {local_subnet(f"c{i}") for i in range(200)}
    assert local_subnet("local") == local_subnet("local")
    for subnet in subnets:
        third = int(subnet.split(".")[2])
        assert subnet.startswith("10.213.") and subnet.endswith(".0/24")
        assert 16 <= third < 240


def test_local_cloud_refuses_gpus() -> None:
    profile = profile_from_data({"resources": {"accelerators": "H100:1"}}, "g.yaml", "g")
    with pytest.raises(UsageError, match="the local cloud has no GPUs"):
        make_plan(profile, "g.yaml")


def test_unknown_pin_set() -> None:
    profile = profile_from_data({"software": {"pin_set": "nope"}}, "p.yaml", "p")
    with pytest.raises(UsageError, match=r"p.yaml: software.pin_set: unknown pin set 'nope'"):
        make_plan(profile, "p.yaml")


def test_required_secret_missing_is_an_error_before_anything() -> None:
    profile = profile_from_data({"secrets": {"WANDB_API_KEY": "required"}}, "s.yaml", "s")
    with pytest.raises(UsageError, match="secrets.WANDB_API_KEY: required secret is not set"):
        resolve_secrets(profile, {}, {}, "s.yaml")
    assert resolve_secrets(profile, {}, {"WANDB_API_KEY": "k"}, "s.yaml") == {"WANDB_API_KEY": "k"}
    flags = {"WANDB_API_KEY": "v"}
    assert resolve_secrets(profile, flags, {"WANDB_API_KEY": "k"}, "s.yaml") == {
        "WANDB_API_KEY": "v"
    }


def test_render_is_byte_identical() -> None:
    plan = local_plan()
    assert render(plan, fixed_context()) == render(local_plan(), fixed_context())


def test_render_contents_and_golden_files() -> None:
    files = render(local_plan(), fixed_context())
    for rel in (
        "terraform/cluster/main.tf",
        "terraform/cluster/modules/local_cluster/main.tf",
        "terraform/storage/modules/local_bucket/main.tf",
        "ansible/playbooks/site.yml",
        "ansible/ansible.cfg",
    ):
        assert rel in files, rel
    assert not any("examples/" in rel for rel in files)
    tfvars = json.loads(files["terraform/cluster/terraform.tfvars.json"])
    assert tfvars == {
        "cluster_name": "local",
        "node_count": 2,
        "ssh_authorized_key": fixed_context().ssh_public_key,
        "state_dir": "/srv/rlinfra/clusters/local/nodes",
        "subnet_cidr": local_subnet("local"),
    }
    ansible_vars = yaml.safe_load(files["ansible/vars.yml"])
    assert ansible_vars["python_env_no_index"] is True
    assert ansible_vars["python_env_python"] == "/usr/bin/python3.11"
    assert ansible_vars["ray_cluster_dashboard_host"] == "127.0.0.1"
    assert ansible_vars["base_manage_limits"] is False
    # Local hosts copy uv from the cache they see, not through SSH.
    assert ansible_vars["python_env_uv_binary_host_src"] == "/srv/rlinfra/cache/bin/uv-000000000000"
    check_golden("local/terraform.tfvars.json", files["terraform/cluster/terraform.tfvars.json"])
    check_golden("local/storage.tfvars.json", files["terraform/storage/terraform.tfvars.json"])
    check_golden("local/vars.yml", files["ansible/vars.yml"])
    check_golden("local/plan.json", files["plan.json"])
    check_golden("local/profile.yaml", files["profile.yaml"])


def test_render_scales_with_nodes() -> None:
    files = render(local_plan(nodes=64), fixed_context())
    assert json.loads(files["terraform/cluster/terraform.tfvars.json"])["node_count"] == 64
    assert json.loads(files["plan.json"])["overrides"] == [
        {"field": "resources.num_nodes", "old": "2", "new": "64"}
    ]


def test_no_bucket_no_storage_root() -> None:
    profile = profile_from_data({"software": {"python": "system"}}, "n.yaml", "nostore")
    files = render(make_plan(profile, "n.yaml"), fixed_context())
    assert "terraform/storage/terraform.tfvars.json" not in files
    assert "terraform/cluster/terraform.tfvars.json" in files


def test_inventory_head_first() -> None:
    plan = local_plan(nodes=3)
    hosts = [
        Host(f"local-{i}", i, f"10.0.0.{10 + i}", f"10.0.0.{10 + i}", "eth0", "root")
        for i in (2, 0, 1)
    ]
    inventory = yaml.safe_load(render_inventory(plan, hosts, fixed_context()))
    groups = inventory["all"]["children"]["rlinfra_nodes"]["children"]
    assert list(groups["rlinfra_head"]["hosts"]) == ["local-0"]
    assert list(groups["rlinfra_workers"]["hosts"]) == ["local-1", "local-2"]
    head = groups["rlinfra_head"]["hosts"]["local-0"]
    assert head["rlinfra_node_rank"] == 0
    assert head["ansible_ssh_private_key_file"] == "/srv/rlinfra/clusters/local/ssh/id_ed25519"
    with pytest.raises(ValueError, match="reported 2 hosts, the plan has 3"):
        render_inventory(plan, hosts[:2], fixed_context())


def test_ray_token_is_made_once_private_and_never_rendered(tmp_path: Path) -> None:
    from rlinfra.deploy import ensure_ray_token

    path = ensure_ray_token(tmp_path)
    token = path.read_text()
    assert len(token) == 64 and int(token, 16) >= 0
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
    assert ensure_ray_token(tmp_path) == path and path.read_text() == token  # kept on re-runs
    files = render(local_plan(), fixed_context())
    assert files["ansible/vars.yml"].count("ray_cluster_auth_token_src:") == 1
    assert not any(token in text for text in files.values())


def test_uv_is_staged_once_under_a_name_that_follows_the_binary(tmp_path: Path) -> None:
    from rlinfra.controller import stage_uv, staged_uv

    uv = tmp_path / "uv"
    uv.write_bytes(b"uv 1")
    cache = tmp_path / "cache"
    first = stage_uv(cache, str(uv))
    assert first == staged_uv(cache, str(uv))
    assert first.parent == cache / "bin"
    assert first.read_bytes() == b"uv 1"
    assert first.stat().st_mode & 0o777 == 0o755
    before = first.stat().st_mtime_ns
    assert stage_uv(cache, str(uv)) == first  # staged already: not copied again
    assert first.stat().st_mtime_ns == before
    # A new uv (new size or time) gets a new name, so no host ever reads a half-copied file.
    uv.write_bytes(b"uv 2.0")
    second = stage_uv(cache, str(uv))
    assert second != first
    assert second.read_bytes() == b"uv 2.0"
    assert first.read_bytes() == b"uv 1"
    assert sorted(p.name for p in (cache / "bin").iterdir()) == sorted([first.name, second.name])
