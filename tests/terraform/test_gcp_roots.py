"""The GCP roots as rlinfra renders them (terraform/roots/gcp + the modules copied in), statically.

No Google provider binary exists on these machines (see test_gcp_modules.py), so the rendered
deployment folder is checked the ways that need none, each test named "static":

- `terraform fmt -check` on the rendered roots;
- every root's own files, and every module copy in it, against the Google provider 6.50.0 schema
  (test_gcp_modules.py's check: resources, attributes, blocks, the provider block, reads);
- each rendered root evaluated by the real Terraform CLI with the rendered terraform.tfvars.json:
  the root's variables.tf, main.tf (its locals and module calls) and outputs.tf as rendered, the
  provider block left out, and each module replaced by a provider-free stand-in that keeps the
  module's real variables.tf (every validation) and provider-free locals and answers its
  outputs with placeholders of the real shape. So Terraform itself proves that every argument
  the root passes exists, that the rendered values pass the roots' and the modules' validations,
  and that the root's outputs read outputs the modules have.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers.hcl import labelled, parse_file, parse_hcl, pure_locals, unquote
from helpers.paths import MODULES
from helpers.provider_schema import schema_errors
from helpers.terraform import needs_terraform, run
from helpers.terraform import terraform_in as terraform
from rlinfra.clouds.planning import make_plan
from rlinfra.context import Context, Controller
from rlinfra.profile import profile_from_data
from rlinfra.render import render

REPO = Path(__file__).resolve().parents[2]
PROJECT = "rl-test-project"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHRlc3RrZXl0ZXN0a2V5dGVzdGtleXRlc3RrZXl0ZXN0 test"

# What each stand-in module answers for its outputs (HCL expressions over its own variables and
# locals); the keys must be the module's real output names.
STAND_IN_OUTPUTS: dict[str, dict[str, str]] = {
    "gcp_network": {
        "network": """{
    network    = "https://www.googleapis.com/compute/v1/projects/${var.project}/global/networks/${var.name}"
    subnetwork = "https://www.googleapis.com/compute/v1/projects/${var.project}/regions/${var.region}/subnetworks/${var.name}"
    region     = var.region
    node_tag   = local.node_tag
  }""",
        "firewall_rules": """concat(["${var.name}-internal"], length(var.allowed_cidrs) > 0 ? ["${var.name}-ssh-and-services"] : [], [for port in keys(local.client_ranges) : "${var.name}-clients-${port}"])""",
    },
    "gcp_cluster": {
        "inventory": """{
    cluster_name = var.cluster_name
    ssh_user     = var.ssh_user
    nodes = [for rank in range(var.node_count) : {
      name          = "${var.cluster_name}-${rank}"
      rank          = rank
      ssh_host      = "203.0.113.${10 + rank}"
      private_ip    = "10.42.0.${2 + rank}"
      public_ip     = "203.0.113.${10 + rank}"
      interface     = ""
      instance_id   = tostring(1000 + rank)
      instance_type = var.machine_type
      zone          = var.zone
    }]
  }""",
        "service_account": """{
    email = "${local.account_id}@${var.project}.iam.gserviceaccount.com"
    name  = "projects/${var.project}/serviceAccounts/${local.account_id}@${var.project}.iam.gserviceaccount.com"
  }""",
        "placement_policy": """local.make_placement_policy ? "projects/${var.project}/regions/${local.region}/resourcePolicies/${var.cluster_name}-compact" : null""",
        "scheduling": "local.scheduling",
    },
    "gcp_bucket": {
        "bucket": """{
    name      = var.name
    url       = "gs://${var.name}"
    self_link = "https://www.googleapis.com/storage/v1/b/${var.name}"
    location  = upper(var.location)
  }""",
    },
}


def profile_data(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((REPO / "profiles" / "h100x8-gcp.yaml").read_text())
    data["project"] = PROJECT
    data["network"]["allowed_cidrs"] = ["198.51.100.7/32"]
    data["ports"] = [9090]
    data.update(changes)
    return data


def rendered(folder: Path, data: dict[str, Any] | None = None) -> Path:
    """The deployment folder's files, as `rlinfra render` writes them."""
    profile = profile_from_data(data or profile_data(), "g.yaml", "h100x8-gcp")
    plan = make_plan(profile, "g.yaml")
    ctx = Context(
        deployment_dir=folder,
        home=folder.parent,
        cache=folder.parent / "cache",
        ssh_public_key=KEY,
        task_id="h100x8-gcp-0123456789ab",
        controller=Controller(
            uv_binary="/usr/bin/uv", system_python="/usr/bin/python3", wheelhouse=None
        ),
    )
    for rel, text in render(plan, ctx).items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return folder


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return rendered(tmp_path_factory.mktemp("gcp-render") / "h100x8-gcp")


ROOTS = ("storage", "cluster")


@needs_terraform
def test_static_fmt_check_of_rendered_gcp_roots(deployment: Path) -> None:
    result = run(
        ["terraform", "fmt", "-check", "-recursive", "-diff", str(deployment / "terraform")]
    )
    assert result.returncode == 0, f"terraform fmt -check found changes:\n{result.stdout}"


@pytest.mark.parametrize("root", ROOTS)
def test_static_rendered_root_matches_google_provider_schema(
    root: str, deployment: Path, google_schema: dict[str, Any]
) -> None:
    folder = deployment / "terraform" / root
    own = {p.name: p.read_text() for p in sorted(folder.glob("*.tf"))}
    assert set(own) == {"main.tf", "variables.tf", "outputs.tf", "versions.tf"}
    errors = schema_errors(own, google_schema)
    modules = sorted(p for p in (folder / "modules").iterdir() if p.is_dir())
    assert [m.name for m in modules] == (
        ["gcp_bucket"] if root == "storage" else ["gcp_cluster", "gcp_network"]
    )
    for module in modules:
        texts = {
            f"modules/{module.name}/{p.name}": p.read_text() for p in sorted(module.glob("*.tf"))
        }
        errors += schema_errors(texts, google_schema)
    assert not errors, "\n".join(errors)
    # The provider block was checked (not skipped): google, with the root's project and labels.
    ((name,), provider), *_ = list(labelled(parse_hcl(own["main.tf"]), "provider"))
    assert name == "google" and provider["project"] == "${var.project}"
    assert provider["default_labels"] == "${local.labels}"
    versions = own["versions.tf"]
    assert re.search(r'version\s*=\s*"= 6\.50\.0"', versions), "the root pins the checked version"


def test_static_schema_check_of_the_rendered_provider_block_rejects_a_typo(
    deployment: Path, google_schema: dict[str, Any]
) -> None:
    """The control: one made-up provider argument in the rendered root is found."""
    main = (deployment / "terraform" / "cluster" / "main.tf").read_text()
    typo = main.replace("default_labels = local.labels", "default_label = local.labels")
    assert typo != main
    errors = schema_errors({"main.tf": typo}, google_schema)
    assert errors == [
        "main.tf: provider.google: no attribute 'default_label' (did you mean 'default_labels'?)"
    ], errors


def stand_in(module: str, target: Path) -> None:
    """A provider-free copy of a module: its variables.tf as is, its provider-free locals, and
    placeholder outputs (STAND_IN_OUTPUTS) under its real output names."""
    source = MODULES / module
    target.mkdir(parents=True)
    shutil.copy(source / "variables.tf", target / "variables.tf")
    real = [name for (name,), _ in labelled(parse_file(source / "outputs.tf"), "output")]
    answers = STAND_IN_OUTPUTS[module]
    assert sorted(answers) == sorted(real), f"{module}: stand-in outputs differ from {real}"
    outputs = "".join(f'output "{n}" {{\n  value = {answers[n]}\n}}\n\n' for n in real)
    blocks = pure_locals((source / "main.tf").read_text())
    (target / "main.tf").write_text("\n\n".join(blocks) + "\n\n" + outputs)


def provider_free_root(rendered_root: Path, target: Path) -> Path:
    """The rendered root without its provider block (and provider requirement), calling
    stand-ins of its modules, with its rendered terraform.tfvars.json."""
    target.mkdir(parents=True)
    main = (rendered_root / "main.tf").read_text()
    without, count = re.subn(r'\nprovider "google" \{\n.*?\n\}\n', "\n", main, flags=re.S)
    assert count == 1, "the root configures the google provider once"
    (target / "main.tf").write_text(without)
    for name in ("variables.tf", "outputs.tf", "terraform.tfvars.json"):
        shutil.copy(rendered_root / name, target / name)
    (target / "versions.tf").write_text('terraform {\n  required_version = ">= 1.9"\n}\n')
    calls = list(labelled(parse_hcl(without), "module"))
    assert calls
    for _, body in calls:
        module = unquote(body["source"]).removeprefix("./modules/")
        assert (rendered_root / "modules" / module / "main.tf").is_file(), module
        stand_in(module, target / "modules" / module)
    return target


def evaluate(folder: Path) -> tuple[int, str, dict[str, Any]]:
    init = terraform(folder, "init", "-input=false")
    assert init.returncode == 0, init.stdout + init.stderr
    applied = terraform(folder, "apply", "-auto-approve", "-input=false")
    text = " ".join((applied.stdout + applied.stderr).split())
    if applied.returncode != 0:
        return applied.returncode, text, {}
    raw = json.loads(terraform(folder, "output", "-json").stdout)
    return 0, text, {name: value["value"] for name, value in raw.items()}


@needs_terraform
def test_static_rendered_cluster_root_evaluates_with_its_tfvars(
    deployment: Path, tmp_path: Path
) -> None:
    folder = provider_free_root(deployment / "terraform" / "cluster", tmp_path / "cluster")
    code, text, outputs = evaluate(folder)
    assert code == 0, text[-4000:]
    inventory = outputs["inventory"]
    assert inventory["cluster_name"] == "h100x8-gcp" and inventory["ssh_user"] == "ubuntu"
    assert [n["name"] for n in inventory["nodes"]] == ["h100x8-gcp-0", "h100x8-gcp-1"]
    assert {n["instance_type"] for n in inventory["nodes"]} == {"a3-highgpu-8g"}
    assert {n["zone"] for n in inventory["nodes"]} == {"us-central1-a"}
    # The modules' own decisions, from the values the root passed them.
    assert outputs["scheduling"]["on_host_maintenance"] == "TERMINATE"
    assert outputs["scheduling"]["provisioning_model"] == "STANDARD"
    assert outputs["placement_policy"].endswith("/resourcePolicies/h100x8-gcp-compact")
    assert (
        outputs["service_account"]["email"] == f"h100x8-gcp-nodes@{PROJECT}.iam.gserviceaccount.com"
    )
    assert outputs["firewall_rules"] == ["h100x8-gcp-internal", "h100x8-gcp-ssh-and-services"]
    # The driver reads the root's inventory output as it is.
    from rlinfra.clouds.registry import cloud_for

    hosts = cloud_for("gcp").hosts_from_outputs({"inventory": {"value": inventory}})
    assert [(h.rank, h.ssh_user) for h in hosts] == [(0, "ubuntu"), (1, "ubuntu")]


@needs_terraform
def test_static_rendered_retrieval_clients_reach_the_network_module(tmp_path: Path) -> None:
    """serving.retrieval.clients, rendered into the cluster root's tfvars, passes the root's and
    gcp_network's validations and names one client rule for the service's port."""
    data = profile_data(serving={"retrieval": {"clients": ["203.0.113.0/28"]}})
    deployment = rendered(tmp_path / "render" / "h100x8-gcp", data)
    folder = provider_free_root(deployment / "terraform" / "cluster", tmp_path / "cluster")
    tfvars = json.loads((folder / "terraform.tfvars.json").read_text())
    assert tfvars["service_clients"] == [{"port": 8000, "cidrs": ["203.0.113.0/28"]}]
    code, text, outputs = evaluate(folder)
    assert code == 0, text[-4000:]
    assert outputs["firewall_rules"] == [
        "h100x8-gcp-internal",
        "h100x8-gcp-ssh-and-services",
        "h100x8-gcp-clients-8000",
    ]


@needs_terraform
def test_static_rendered_storage_root_evaluates_with_its_tfvars(
    deployment: Path, tmp_path: Path
) -> None:
    folder = provider_free_root(deployment / "terraform" / "storage", tmp_path / "storage")
    code, text, outputs = evaluate(folder)
    assert code == 0, text[-4000:]
    tfvars = json.loads((folder / "terraform.tfvars.json").read_text())
    (bucket,) = tfvars["buckets"]
    assert outputs["buckets"] == {
        bucket: {
            "name": bucket,
            "url": f"gs://{bucket}",
            "self_link": f"https://www.googleapis.com/storage/v1/b/{bucket}",
            "location": "US-CENTRAL1",
        }
    }


@needs_terraform
def test_static_module_validations_refuse_a_bad_rendered_value(
    deployment: Path, tmp_path: Path
) -> None:
    """The control for the evaluations above: a label key Google refuses (rlinfra's AWS tag
    style), written into the rendered tfvars, is refused by gcp_cluster's validation through
    the root."""
    folder = provider_free_root(deployment / "terraform" / "cluster", tmp_path / "bad")
    tfvars_path = folder / "terraform.tfvars.json"
    tfvars = json.loads(tfvars_path.read_text())
    tfvars["labels"] = {"rlinfra:profile": "h100x8-gcp"}
    tfvars_path.write_text(json.dumps(tfvars))
    code, text, _ = evaluate(folder)
    assert code != 0 and "labels must have keys" in text, text[-4000:]
