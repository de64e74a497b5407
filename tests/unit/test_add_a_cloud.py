"""Adding a cloud, as a dry run: a stub cloud that lives in a folder of its own (its Cloud class
and its Terraform) and one line in the registry is validated, planned and rendered by rlinfra,
and its rendered Terraform root applies for real (``terraform_data`` nodes, no provider).

Nothing else is touched: the test adds the registry line (``rlinfra.clouds.REGISTRY``) and puts
the stub's folder on ``sys.path``; rlinfra's own files stay as they are.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

import rlinfra.clouds
import rlinfra.clouds.planning
import rlinfra.clouds.registry
from helpers.cli import CliRunner, write_yaml
from helpers.contexts import fixed_context
from helpers.terraform import needs_terraform, provider_free_env, run
from rlinfra.profile import load_profile
from rlinfra.render import render

STUB_CLOUD = '''
"""A stub cloud: nodes are terraform_data resources; nothing is created anywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlinfra.clouds.base import Cloud
from rlinfra.plan import Site
from rlinfra.record import Host


class StubCloud(Cloud):
    name = "stub"
    roots = {"cluster": ("stub_nodes",)}

    def terraform_dir(self) -> Path:
        return Path(__file__).parent / "terraform"

    def site(self, profile, source, cluster, offered):
        return Site(accelerator=None, subnet="10.99.0.0/24")

    def tfvars(self, plan, ctx) -> dict[str, dict[str, Any]]:
        return {"cluster": {"cluster_name": plan.cluster, "node_count": plan.num_nodes}}

    def ansible_vars(self, plan, ctx) -> dict[str, Any]:
        return {"stub_cluster_marker": plan.cluster}

    def check_inputs(self, plan) -> None:
        return None

    def account_id(self, environ, required):
        return None

    def preflight(self, plan) -> None:
        return None

    def hosts_from_outputs(self, outputs):
        return [
            Host(
                name=node["name"],
                rank=int(node["rank"]),
                ssh_host=node["address"],
                private_ip=node["address"],
                interface="eth0",
                ssh_user="root",
            )
            for node in outputs["nodes"]["value"]
        ]


CLOUD = StubCloud()
'''

ROOT_TF = """
terraform {
  required_version = ">= 1.5"
}

variable "cluster_name" {
  description = "Name of the cluster."
  type        = string
}

variable "node_count" {
  description = "How many nodes."
  type        = number
}

module "nodes" {
  source       = "./modules/stub_nodes"
  cluster_name = var.cluster_name
  node_count   = var.node_count
}

output "nodes" {
  description = "Every node: name, rank, address."
  value       = module.nodes.nodes
}
"""

MODULE_TF = """
variable "cluster_name" {
  type = string
}

variable "node_count" {
  type = number
}

resource "terraform_data" "node" {
  count = var.node_count
  input = {
    name    = "${var.cluster_name}-${count.index}"
    rank    = count.index
    address = "10.99.0.${count.index + 10}"
  }
}

output "nodes" {
  value = [for node in terraform_data.node : node.output]
}
"""


@pytest.fixture()
def stub_cloud(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stub's own folder, and its line in the registry."""
    folder = tmp_path / "plugins" / "stubcloud"
    (folder / "terraform" / "roots" / "stub" / "cluster").mkdir(parents=True)
    (folder / "terraform" / "modules" / "stub_nodes").mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    (folder / "cloud.py").write_text(textwrap.dedent(STUB_CLOUD))
    (folder / "terraform" / "roots" / "stub" / "cluster" / "main.tf").write_text(ROOT_TF)
    (folder / "terraform" / "modules" / "stub_nodes" / "main.tf").write_text(MODULE_TF)
    monkeypatch.syspath_prepend(str(folder.parent))
    monkeypatch.setitem(rlinfra.clouds.REGISTRY, "stub", "stubcloud.cloud")
    return folder


def _profile(tmp_path: Path) -> Path:
    return write_yaml(
        tmp_path,
        {
            "description": "two stub nodes",
            "cloud": "stub",
            "resources": {"num_nodes": 2},
            "software": {"pin_set": "cpu-sandbox"},
        },
        name="stubby.yaml",
    )


def test_an_unregistered_cloud_is_refused_naming_the_file_and_field(
    tmp_path: Path, home: Path, cli: CliRunner
) -> None:
    result = cli("validate", "-p", str(_profile(tmp_path)))
    assert result.code == 2
    assert result.err.strip().startswith(
        f"Error: {tmp_path / 'stubby.yaml'}: cloud: 'stub' is not supported by this version"
    )


def test_a_registered_stub_cloud_is_planned_and_rendered(
    stub_cloud: Path, tmp_path: Path, home: Path, cli: CliRunner
) -> None:
    profile = _profile(tmp_path)
    validated = cli("validate", "-p", str(profile))
    assert validated.code == 0, validated.err
    assert "ok (2 node(s), cloud stub)" in validated.out

    planned = cli("plan", "-p", str(profile), "--json")
    assert planned.code == 0, planned.err
    summary = json.loads(planned.out)
    assert summary["cloud"] == "stub"
    assert [n["name"] for n in summary["nodes"]] == ["stubby-0", "stubby-1"]
    assert summary["subnet"] == "10.99.0.0/24"

    # The same plan rendered in process: the cluster root and module come from the stub's folder.
    loaded, _ = load_profile(str(profile))
    plan = rlinfra.clouds.planning.make_plan(loaded, str(profile))
    files = render(plan, fixed_context("stubby"))
    assert files["terraform/cluster/main.tf"] == ROOT_TF
    assert files["terraform/cluster/modules/stub_nodes/main.tf"] == MODULE_TF
    assert json.loads(files["terraform/cluster/terraform.tfvars.json"]) == {
        "cluster_name": "stubby",
        "node_count": 2,
    }
    assert "stub_cluster_marker: stubby" in files["ansible/vars.yml"]
    assert json.loads(files["plan.json"])["cloud"] == "stub"


@needs_terraform
def test_the_stub_clouds_rendered_root_applies_and_gives_the_inventory(
    stub_cloud: Path, tmp_path: Path, home: Path, cli: CliRunner
) -> None:
    out = tmp_path / "review"
    rendered = cli("render", "-p", str(_profile(tmp_path)), "-o", str(out))
    assert rendered.code == 0, rendered.err
    root = out / "terraform" / "cluster"
    env = provider_free_env(tmp_path)
    for argv in (["init", "-input=false"], ["apply", "-auto-approve", "-input=false"]):
        done = run(["terraform", *argv, "-no-color"], cwd=root, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
    outputs = json.loads(
        run(["terraform", "output", "-json"], cwd=root, env=env, check=True).stdout
    )
    hosts = rlinfra.clouds.registry.cloud_for("stub").hosts_from_outputs(outputs)
    assert [(h.name, h.rank, h.private_ip) for h in hosts] == [
        ("stubby-0", 0, "10.99.0.10"),
        ("stubby-1", 1, "10.99.0.11"),
    ]
