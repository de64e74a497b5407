"""Every cloud is a complete implementation of the declared interface (clouds/base.py)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from rlinfra.clouds import REGISTRY
from rlinfra.clouds.base import Cloud
from rlinfra.clouds.registry import cloud_for
from rlinfra.errors import UsageError
from rlinfra.storage.s3 import S3

MODULES = Path(__file__).resolve().parents[2] / "terraform" / "modules"


@pytest.mark.parametrize("name", list(REGISTRY))
def test_each_cloud_implements_every_required_operation(name: str) -> None:
    cloud = cloud_for(name)
    assert isinstance(cloud, Cloud) and cloud.name == name
    assert not inspect.isabstract(type(cloud))
    # The ssh cloud's machines exist already: no cluster root.
    assert list(cloud.roots) == (["storage"] if name == "ssh" else ["storage", "cluster"])
    for modules in cloud.roots.values():
        for module in modules:
            assert (MODULES / module / "main.tf").is_file(), module
    # Buckets are a store's (rlinfra.storage): clouds of cloud buckets pick one.
    assert (type(cloud).store is not Cloud.store) == (name in ("aws", "gcp", "ssh", "nebius"))
    # So do the operations of clouds whose machines outlive `down`.
    keeps = {
        op: getattr(type(cloud), op) is not getattr(Cloud, op)
        for op in ("release_lines", "release_hosts", "hosts_from_plan")
    }
    assert len(set(keeps.values())) == 1, keeps
    assert cloud.keeps_machines == keeps["release_hosts"] == (name == "ssh")


def test_optional_operations_default_to_nothing(tmp_path: Path) -> None:
    local = cloud_for("local")
    assert local.store(tmp_path) is None  # local buckets are folders: nothing to empty first
    assert cloud_for("aws").store(tmp_path) is S3
    # The ssh cloud's buckets are S3 only where its storage root is the S3 one.
    assert cloud_for("ssh").store(tmp_path) is None
    root = tmp_path / "terraform" / "storage"
    root.mkdir(parents=True)
    (root / "terraform.tfvars.json").write_text('{"region": "eu-west-1", "buckets": ["b"]}')
    assert cloud_for("ssh").store(tmp_path) is S3
    assert cloud_for("aws").gone_resources("cluster", tmp_path, {"values": {}}) == []
    # Only a cloud that looks for lost resources has its state read for them.
    assert cloud_for("aws").finds_gone is False
    assert cloud_for("gcp").finds_gone is False
    assert local.finds_gone is True


def test_an_unsupported_cloud_is_refused() -> None:
    with pytest.raises(UsageError) as caught:
        cloud_for("azure")
    assert "Supported clouds: local, aws, gcp, ssh, nebius." in str(caught.value.hint)
