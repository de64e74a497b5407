"""The GCP modules (gcp_network, gcp_cluster, gcp_bucket) and the GCP catalog, statically.

No Google provider binary exists on these machines, so `terraform init/validate/plan` cannot run on
the modules as they are. What runs here instead, each test named "static":

- `terraform fmt -check`, and every .tf file parsed with python-hcl2;
- the modules' own variables.tf (and the decisions in gcp_cluster's provider-free `locals`)
  evaluated by the real Terraform CLI in scratch roots that hold no resource, so no provider is
  needed: the variable validations really refuse what they must, and the locals decide what the
  nodes get;
- checkov, from the project's checkov venv (RLINFRA_CHECKOV, or .venv-checkov as the Makefile
  makes it), with every skip in place and carrying a reason;
- every resource type, attribute and nested block the modules write, every required one they must
  write, and every attribute their expressions read, checked against the Google provider 6.50.0
  schema as shipped in the npm package @cdktf/provider-google@16.12.1 (`package/.jsii`, generated
  from that provider's schema; camelCase names there, snake_case in HCL). The package is fetched
  once into RLINFRA_TEST_CACHE (default /var/tmp/rlinfra-test-cache) with `npm pack`, or from the
  registry's tarball URL when npm is missing, checked against its published sha512, and reduced to
  a small JSON schema kept next to it. Negative tests prove the check rejects what the provider
  would (a made-up attribute, a typo in a nested block, a missing required block, a bad read);
- driver/rlinfra/clouds/gcp/catalog.yaml: parses, and each machine type's GPU model and count agree
  with its name and with gcp_cluster's GPU decision.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers.hcl import is_block_list, labelled, parse_file, parse_hcl, pure_locals, unquote
from helpers.paths import MODULES, REPO
from helpers.provider_schema import PROVIDER_VERSION, schema_errors
from helpers.terraform import find_checkov, needs_terraform, run, terraform_in

GCP_MODULES = ("gcp_network", "gcp_cluster", "gcp_bucket")
CATALOG = REPO / "driver" / "rlinfra" / "clouds" / "gcp" / "catalog.yaml"

GPU_IMAGE = (
    "projects/ubuntu-os-accelerator-images/global/images/family/"
    "ubuntu-accelerator-2204-amd64-with-nvidia-570"
)
CPU_IMAGE = "projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts"
SUBNETWORK = "projects/rl-test-project/regions/us-central1/subnetworks/c1"
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHRlc3RrZXl0ZXN0a2V5dGVzdGtleXRlc3RrZXl0ZXN0 test"
NODE_SA = "c1-nodes@rl-test-project.iam.gserviceaccount.com"


def module_files(*, examples: bool = True) -> list[Path]:
    files = sorted(p for name in GCP_MODULES for p in (MODULES / name).rglob("*.tf"))
    return [p for p in files if examples or "examples" not in p.parts]


# --- fmt, parsing, layout ----------------------------------------------------------------------------


@needs_terraform
def test_static_fmt_check_of_gcp_modules() -> None:
    paths = [str(MODULES / name) for name in GCP_MODULES]
    result = run(["terraform", "fmt", "-check", "-recursive", "-diff", *paths])
    assert result.returncode == 0, f"terraform fmt -check found changes:\n{result.stdout}"


def test_static_hcl_of_gcp_modules_parses_with_block_markers() -> None:
    """Every .tf file parses with python-hcl2, in the shape the schema check reads (python-hcl2 7+
    marks blocks with __is_block__, which tells `scheduling { }` from `scheduling = { }`)."""
    files = module_files()
    assert len(files) >= 3 * 5, files
    for path in files:
        parsed = parse_file(path)
        assert parsed, path
    main = parse_file(MODULES / "gcp_cluster" / "main.tf")
    (_, instance), *_ = [
        b for b in labelled(main, "resource") if b[0][0] == "google_compute_instance"
    ]
    assert is_block_list(instance["scheduling"]), "python-hcl2 >= 7 is needed (block markers)"


@pytest.mark.parametrize("module", GCP_MODULES)
def test_static_module_layout_documented_variables_and_version_pin(module: str) -> None:
    folder = MODULES / module
    for name in ("main.tf", "variables.tf", "outputs.tf", "versions.tf", "README.md"):
        assert (folder / name).is_file(), f"{module}/{name} is missing"
    assert (folder / "examples" / "basic" / "main.tf").is_file()

    versions = (folder / "versions.tf").read_text()
    assert re.search(r'source\s*=\s*"hashicorp/google"', versions)
    assert re.search(r'version\s*=\s*"~> 6\.50"', versions), "pin hashicorp/google ~> 6.50"
    assert re.search(r'required_version\s*=\s*">= 1\.\d+"', versions)

    readme = (folder / "README.md").read_text()
    variables = list(labelled(parse_file(folder / "variables.tf"), "variable"))
    assert variables
    for (name,), body in variables:
        assert body.get("description"), f"{module}: variable {name} has no description"
        assert "type" in body, f"{module}: variable {name} has no type"
        for rule in body.get("validation", []):
            assert rule.get("error_message"), f"{module}: a validation of {name} has no message"
        assert f"`{name}`" in readme, f"{module}/README.md does not list variable {name}"
    for (name,), body in labelled(parse_file(folder / "outputs.tf"), "output"):
        assert body.get("description"), f"{module}: output {name} has no description"
        assert name in readme, f"{module}/README.md does not describe output {name}"


# --- variables and locals, evaluated by Terraform without any provider --------------------------------


def variables_module(target: Path, module: str) -> None:
    """A provider-free copy of a module: its variables.tf as is, its provider-free locals, and one
    output per local."""
    target.mkdir(parents=True)
    shutil.copy(MODULES / module / "variables.tf", target / "variables.tf")
    blocks = pure_locals((MODULES / module / "main.tf").read_text())
    names = [name for block in blocks for name in parse_hcl(block)["locals"][0] if name[0] != "_"]
    outputs = "".join(f'output "{n}" {{\n  value = local.{n}\n}}\n' for n in names)
    (target / "main.tf").write_text("\n\n".join(blocks) + "\n\n" + outputs)


def hcl_value(value: Any) -> str:
    return json.dumps(value)  # JSON literals are HCL expressions too


def scratch_root(folder: Path, calls: dict[str, tuple[str, dict[str, Any]]]) -> Path:
    """A root that calls provider-free module copies: {call name: (module, arguments)}."""
    folder.mkdir(parents=True)
    for module in {module for module, _ in calls.values()}:
        variables_module(folder / "m" / module, module)
    text = "".join(
        f'module "{call}" {{\n  source = "./m/{module}"\n'
        + "".join(f"  {k} = {hcl_value(v)}\n" for k, v in args.items())
        + f'}}\n\noutput "{call}" {{\n  value = module.{call}\n}}\n\n'
        for call, (module, args) in calls.items()
    )
    (folder / "main.tf").write_text('terraform {\n  required_version = ">= 1.9"\n}\n\n' + text)
    return folder


def apply_outputs(folder: Path) -> dict[str, Any]:
    for args in (("init", "-input=false"), ("apply", "-auto-approve", "-input=false")):
        result = terraform_in(folder, *args)
        assert result.returncode == 0, f"terraform {args[0]}:\n{result.stdout}\n{result.stderr}"
    raw = json.loads(terraform_in(folder, "output", "-json").stdout)
    return {name: value["value"] for name, value in raw.items()}


def plan(folder: Path) -> tuple[int, str]:
    """Exit status and diagnostics of a plan, whitespace folded (Terraform may wrap messages)."""
    init = terraform_in(folder, "init", "-input=false")
    assert init.returncode == 0, init.stderr
    result = terraform_in(folder, "plan", "-input=false")
    return result.returncode, " ".join((result.stdout + result.stderr).split())


def catalog() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(CATALOG.read_text())
    return data


CLUSTER = {
    "cluster_name": "c1",
    "zone": "us-central1-a",
    "subnetwork": SUBNETWORK,
    "ssh_public_key": SSH_KEY,
}
NETWORK = {"name": "c1", "region": "us-central1"}
BUCKET = {"name": "rl-test-checkpoints", "location": "us-central1"}


def good_calls() -> dict[str, tuple[str, dict[str, Any]]]:
    calls: dict[str, tuple[str, dict[str, Any]]] = {
        "net_by_tag": ("gcp_network", {**NETWORK, "allowed_cidrs": ["203.0.113.7/32"]}),
        "net_world_allowed": (
            "gcp_network",
            {
                **NETWORK,
                "allowed_cidrs": ["0.0.0.0/0"],
                "allow_public": True,
                "service_ports": [8000, 22],
                "service_clients": [{"port": 9000, "cidrs": ["0.0.0.0/0"]}],
                "node_service_account": NODE_SA,
            },
        ),
        "net_with_clients": (
            "gcp_network",
            {
                **NETWORK,
                "allowed_cidrs": ["203.0.113.7/32"],
                "service_clients": [
                    {"port": 8000, "cidrs": ["198.51.100.0/24", "10.9.0.0/16"]},
                    {"port": 10000, "cidrs": ["192.0.2.7/32"]},
                    {"port": 8000, "cidrs": ["10.9.0.0/16", "192.0.2.8/32"]},
                ],
            },
        ),
        "h100_on_demand": (
            "gcp_cluster",
            {**CLUSTER, "machine_type": "a3-highgpu-8g", "node_count": 2},
        ),
        "t4_spot_stop": (
            "gcp_cluster",
            {
                **CLUSTER,
                "machine_type": "n1-standard-8",
                "guest_accelerator": {"type": "nvidia-tesla-t4", "count": 1},
                "spot": True,
                "spot_termination_action": "STOP",
                "node_count": 1,
            },
        ),
        "l4_spot_default": (
            "gcp_cluster",
            {**CLUSTER, "machine_type": "g2-standard-8", "spot": True, "node_count": 3},
        ),
        "cpu_one_node": (
            "gcp_cluster",
            {
                **CLUSTER,
                "cluster_name": "rl-training-cluster-ab-west1",
                "machine_type": "n2-standard-8",
                "zone": "europe-west4-b",
            },
        ),
        "cpu_two_nodes_in_policy": (
            "gcp_cluster",
            {**CLUSTER, "machine_type": "n2-standard-8", "node_count": 2},
        ),
        "cpu_two_nodes_no_policy": (
            "gcp_cluster",
            {
                **CLUSTER,
                "machine_type": "n2-standard-8",
                "node_count": 2,
                "placement_policy": False,
            },
        ),
        "h200_reserved": (
            "gcp_cluster",
            {
                **CLUSTER,
                "machine_type": "a3-ultragpu-8g",
                "zone": "us-east4-b",
                "reservation_name": "h200-block",
                "node_count": 2,
            },
        ),
        "bucket": ("gcp_bucket", {**BUCKET, "object_admins": {"cluster": NODE_SA}}),
    }
    for key, entry in catalog()["machine_types"].items():
        args: dict[str, Any] = {**CLUSTER, "machine_type": entry["machine_type"]}
        if entry.get("guest_accelerator"):
            args["guest_accelerator"] = entry["guest_accelerator"]
        calls["catalog_" + re.sub(r"[^a-z0-9_]", "_", key)] = ("gcp_cluster", args)
    return calls


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every good call above, in one scratch root, applied (no resources: only outputs)."""
    if shutil.which("terraform") is None:
        pytest.skip("terraform is not on PATH")
    folder = scratch_root(tmp_path_factory.mktemp("gcp-locals") / "root", good_calls())
    return apply_outputs(folder)


@needs_terraform
def test_static_cluster_locals_schedule_gpu_and_spot_nodes(evaluated: dict[str, Any]) -> None:
    h100 = evaluated["h100_on_demand"]
    assert h100["gpu"] is True and h100["image"] == GPU_IMAGE
    assert h100["boot_disk_type"] == "pd-balanced"
    assert h100["make_placement_policy"] is True and h100["region"] == "us-central1"
    assert h100["scheduling"] == {
        "provisioning_model": "STANDARD",
        "preemptible": False,
        "automatic_restart": True,
        "on_host_maintenance": "TERMINATE",
        "instance_termination_action": None,
    }
    assert h100["ssh_keys"] == f"ubuntu:{SSH_KEY}"
    assert h100["account_id"] == "c1-nodes"

    t4 = evaluated["t4_spot_stop"]
    assert t4["gpu"] is True and t4["image"] == GPU_IMAGE
    assert t4["make_placement_policy"] is False  # one node
    assert t4["scheduling"] == {
        "provisioning_model": "SPOT",
        "preemptible": True,
        "automatic_restart": False,
        "on_host_maintenance": "TERMINATE",
        "instance_termination_action": "STOP",
    }
    # Spot's default: a preempted node is deleted (nothing billed; the next apply makes it again).
    assert evaluated["l4_spot_default"]["scheduling"]["instance_termination_action"] == "DELETE"

    cpu = evaluated["cpu_one_node"]
    assert cpu["gpu"] is False and cpu["image"] == CPU_IMAGE
    assert cpu["scheduling"]["on_host_maintenance"] == "MIGRATE"
    assert cpu["region"] == "europe-west4"
    # 6..30 characters, no trailing hyphen: the name's first 23 ("rl-training-cluster-ab-")
    # lose their "-" before "-nodes" is added.
    assert cpu["account_id"] == "rl-training-cluster-ab-nodes"
    assert 6 <= len(cpu["account_id"]) <= 30
    assert re.fullmatch(r"[a-z]([a-z0-9-]*[a-z0-9])", cpu["account_id"])
    # CPU nodes in a compact placement policy must terminate on maintenance too; without one they
    # live-migrate.
    in_policy = evaluated["cpu_two_nodes_in_policy"]
    assert in_policy["make_placement_policy"] is True
    assert in_policy["scheduling"]["on_host_maintenance"] == "TERMINATE"
    assert in_policy["scheduling"]["automatic_restart"] is True
    no_policy = evaluated["cpu_two_nodes_no_policy"]
    assert no_policy["make_placement_policy"] is False
    assert no_policy["scheduling"]["on_host_maintenance"] == "MIGRATE"

    h200 = evaluated["h200_reserved"]
    assert h200["boot_disk_type"] == "hyperdisk-balanced" and h200["region"] == "us-east4"


@needs_terraform
def test_static_every_catalog_machine_type_is_a_gpu_node_for_gcp_cluster(
    evaluated: dict[str, Any],
) -> None:
    for key, entry in catalog()["machine_types"].items():
        node = evaluated["catalog_" + re.sub(r"[^a-z0-9_]", "_", key)]
        assert node["gpu"] is True, key
        assert node["image"] == GPU_IMAGE, key
        assert node["scheduling"]["on_host_maintenance"] == "TERMINATE", key
        hyperdisk = entry["machine_type"].startswith("a3-ultragpu")
        assert node["boot_disk_type"] == ("hyperdisk-balanced" if hyperdisk else "pd-balanced"), key


@needs_terraform
def test_static_network_locals_select_nodes_by_tag_or_service_account(
    evaluated: dict[str, Any],
) -> None:
    by_tag = evaluated["net_by_tag"]
    assert by_tag["node_tag"] == "c1-node" and by_tag["by_tag"] is True
    assert by_tag["ports"] == [22] and by_tag["create"] is True
    assert by_tag["client_ranges"] == {}  # no service_clients: no client rule
    by_sa = evaluated["net_world_allowed"]
    assert by_sa["by_tag"] is False
    assert by_sa["ports"] == [22, 8000]  # SSH first, each port once


@needs_terraform
def test_static_network_opens_each_client_port_to_its_ranges_only(
    evaluated: dict[str, Any],
) -> None:
    """service_clients: one rule per port (the for_each key, so a plan keeps the others' rules
    when one port comes or goes), its ranges merged across entries naming the same port; the
    ranges never join allowed_cidrs' rule and the ports never join `ports` (SSH's rule)."""
    net = evaluated["net_with_clients"]
    assert net["client_ranges"] == {
        "8000": ["10.9.0.0/16", "192.0.2.8/32", "198.51.100.0/24"],
        "10000": ["192.0.2.7/32"],
    }
    assert net["ports"] == [22]
    main = parse_file(MODULES / "gcp_network" / "main.tf")
    rules = {
        name: body
        for (rtype, name), body in labelled(main, "resource")
        if rtype == "google_compute_firewall"
    }
    clients = rules["clients"]
    assert clients["for_each"] == "${local.client_ranges}"
    assert clients["source_ranges"] == "${each.value}"
    (allow,) = clients["allow"]
    assert unquote(allow["protocol"]) == "tcp" and allow["ports"] == ["${each.key}"]
    # The same nodes as the other rules select, by tag or by service account.
    for key in ("target_tags", "target_service_accounts"):
        assert clients[key] == rules["external"][key], key


def test_static_nodes_take_only_the_deployment_key() -> None:
    """The instance's metadata: the deployment's key, project-wide keys blocked, and OS Login off
    on these nodes only (OS Login would ignore the ssh-keys entry)."""
    main = parse_file(MODULES / "gcp_cluster" / "main.tf")
    ((_, body),) = [b for b in labelled(main, "resource") if b[0][0] == "google_compute_instance"]
    metadata = {key: unquote(value) for key, value in body["metadata"].items()}
    assert metadata == {
        "ssh-keys": "${local.ssh_keys}",
        "block-project-ssh-keys": "true",
        "enable-oslogin": "FALSE",
    }


# Each bad case: (module, arguments, fragments that must all appear, fragments that must not).
ALLOW_PUBLIC_MSG = "is refused unless allow_public = true"
BAD_CASES: dict[str, tuple[str, dict[str, Any], list[str], list[str]]] = {
    "world_open_refused_without_allow_public": (
        "gcp_network",
        {**NETWORK, "allowed_cidrs": ["203.0.113.7/32", "0.0.0.0/0"], "service_ports": [8265]},
        [ALLOW_PUBLIC_MSG],
        ["CIDR notation"],
    ),
    "world_open_client_refused_without_allow_public": (
        "gcp_network",
        {**NETWORK, "service_clients": [{"port": 8000, "cidrs": ["198.51.100.0/24", "0.0.0.0/0"]}]},
        ["service_clients opens a service port to the whole internet", ALLOW_PUBLIC_MSG],
        ["Each service_clients entry needs", "service_clients CIDRs must be IPv4"],
    ),
    "bad_service_clients": (
        "gcp_network",
        {
            **NETWORK,
            "service_clients": [
                {"port": 0, "cidrs": ["198.51.100.0/24"]},
                {"port": 8000, "cidrs": []},
                {"port": 8001, "cidrs": ["198.51.100.7", "2001:db8::/32"]},
            ],
        },
        [
            "Each service_clients entry needs a whole port number from 1 to 65535 and at least "
            "one CIDR",
            "service_clients CIDRs must be IPv4 ranges in CIDR notation",
        ],
        [ALLOW_PUBLIC_MSG],
    ),
    "other_bad_network_inputs": (
        "gcp_network",
        {
            "name": "c1-",
            "region": "us-central1-a",
            "allowed_cidrs": ["203.0.113.7"],
            "service_ports": [70000],
            "mtu": 9000,
            "subnet_cidr": "10.42.0.1/24",
            "node_service_account": "serviceAccount:" + NODE_SA,
            "existing_subnetwork": "c1",
        },
        [
            "name must match",
            "region must be a Compute Engine region",
            "CIDR notation",
            "service_ports must hold whole port numbers",
            "mtu must be a whole number from 1300 to 8896",
            "subnet_cidr must be an IPv4 network address",
            "node_service_account must be null or a service account email",
            "existing_subnetwork must be null",
        ],
        [],
    ),
    "guest_accelerator_on_a_builtin_gpu_type_refused": (
        "gcp_cluster",
        {
            **CLUSTER,
            "machine_type": "a2-highgpu-1g",
            "guest_accelerator": {"type": "nvidia-tesla-t4", "count": 1},
        },
        ["guest_accelerator can only be set with an N1 machine type"],
        ["guest_accelerator.type must be", "guest_accelerator.count must be"],
    ),
    "reservation_with_spot_refused": (
        "gcp_cluster",
        {**CLUSTER, "machine_type": "a3-ultragpu-8g", "spot": True, "reservation_name": "r1"},
        ["reservation_name cannot be combined with spot = true"],
        [],
    ),
    "other_bad_cluster_inputs": (
        "gcp_cluster",
        {
            **CLUSTER,
            "cluster_name": "Cluster_1",
            "zone": "us-central1",
            "node_count": 65,
            "machine_type": "n1-standard-8",
            "guest_accelerator": {"type": "nvidia-h100-80gb", "count": 3},
            "spot_termination_action": "TERMINATE",
            "boot_disk": {"size_gb": 20, "type": "hyperdisk-extreme"},
            "labels": {"rlinfra:cluster": "c1"},
            "ssh_public_key": "not a key",
            "ssh_user": "root",
            "subnetwork": "c1",
            "network_tags": ["Bad_Tag"],
            "bucket_name": "B",
        },
        [
            "cluster_name must match",
            "zone must be a Compute Engine zone",
            "node_count must be a whole number from 1 to 64",
            "guest_accelerator.type must be one of",
            "guest_accelerator.count must be one of",
            "spot_termination_action must be one of: DELETE, STOP",
            "boot_disk.size_gb must be a whole number",
            "boot_disk.type must be null or one of",
            "labels must have keys",
            "ssh_public_key must be a single OpenSSH public key",
            "ssh_user must be a Linux user name",
            "subnetwork must be a subnetwork self link",
            "network_tags must hold tags",
            "bucket_name must be null or a Cloud Storage bucket name",
        ],
        [],
    ),
    "bad_bucket_inputs": (
        "gcp_bucket",
        {
            "name": "google-checkpoints",
            "location": "us central",
            "noncurrent_version_days": -1,
            "kms_key_name": "my-key",
            "object_admins": {"Cluster": "serviceAccount:" + NODE_SA},
            "labels": {"Team": "RL"},
        },
        [
            "name must be 3 to 63 characters",
            "location must be a Cloud Storage location",
            "noncurrent_version_days must be a whole number",
            "kms_key_name must be null",
            "object_admins keys must be",
            "object_admins values must be service account emails",
            "labels must have keys",
        ],
        [],
    ),
}


@pytest.fixture(scope="module")
def refused(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str]]:
    """Each bad case planned in a scratch root of its own, side by side."""
    if shutil.which("terraform") is None:
        pytest.skip("terraform is not on PATH")
    base = tmp_path_factory.mktemp("gcp-refused")
    roots = {
        case: scratch_root(base / case, {"case": (module, args)})
        for case, (module, args, _, _) in BAD_CASES.items()
    }
    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(zip(roots, pool.map(plan, roots.values()), strict=True))


@needs_terraform
@pytest.mark.parametrize("case", BAD_CASES)
def test_static_variable_validation_refuses(case: str, refused: dict[str, tuple[int, str]]) -> None:
    _, _, expected, unexpected = BAD_CASES[case]
    returncode, output = refused[case]
    assert returncode != 0, f"{case}: the plan should have failed:\n{output[-4000:]}"
    for fragment in expected:
        assert fragment in output, f"{case}: no {fragment!r} in:\n{output[-4000:]}"
    for fragment in unexpected:
        assert fragment not in output, f"{case}: unexpected {fragment!r}"


@needs_terraform
def test_static_world_open_ray_ports_need_allow_public(evaluated: dict[str, Any]) -> None:
    """The pair of the refusals above: the same /0 ranges, in allowed_cidrs and in
    service_clients, are accepted with allow_public = true (the good root applied), and nothing
    but allowed_cidrs or a client port's own ranges (local.client_ranges, made of service_clients
    only; both variables validated for /0) ever becomes a source range."""
    world = evaluated["net_world_allowed"]
    assert world["client_ranges"] == {"9000": ["0.0.0.0/0"]}
    main = parse_file(MODULES / "gcp_network" / "main.tf")
    for (rtype, name), body in labelled(main, "resource"):
        if rtype != "google_compute_firewall":
            continue
        assert unquote(body.get("direction", "")) == "INGRESS", name
        ranges = body.get("source_ranges")
        assert ranges in (None, "${var.allowed_cidrs}", "${each.value}"), (
            f"{name}: source_ranges = {ranges!r}"
        )
        if ranges == "${each.value}":
            assert body["for_each"] == "${local.client_ranges}", name
        assert "0.0.0.0/0" not in json.dumps(body), name
    (client_ranges,) = [
        block["client_ranges"] for block in main["locals"] if "client_ranges" in block
    ]
    assert "var.service_clients" in client_ranges and "var.allowed_cidrs" not in client_ranges


# --- checkov ---------------------------------------------------------------------------------------------


# Checks that must run (and pass) on these modules: the security properties they exist for.
CHECKOV_MUST_PASS = {
    "CKV_GCP_2",  # no SSH from 0.0.0.0/0
    "CKV2_GCP_12",  # no rule opens every port to the world
    "CKV2_GCP_18",  # the network has firewall rules of its own
    "CKV_GCP_30",  # not the default service account
    "CKV_GCP_32",  # project-wide SSH keys blocked
    "CKV_GCP_39",  # Shielded VM
    "CKV_GCP_29",  # uniform bucket-level access
    "CKV_GCP_114",  # public access prevention enforced
    "CKV_GCP_78",  # versioning
}


def test_static_checkov_scan_of_gcp_modules_passes(tmp_path: Path) -> None:
    checkov = find_checkov()
    if checkov is None:
        pytest.skip("checkov not found (make venv makes .venv-checkov; or set RLINFRA_CHECKOV)")
    # One scan of the three modules side by side (the examples call each other's modules as
    # ../../../gcp_*); checkov 3 reports several -d folders as one running total.
    for name in GCP_MODULES:
        shutil.copytree(
            MODULES / name, tmp_path / name, ignore=shutil.ignore_patterns(".terraform*")
        )
    # --skip-download: no guideline downloads (no internet here); the checks are local.
    argv = [
        checkov,
        "-d",
        str(tmp_path),
        "--framework",
        "terraform",
        "--skip-download",
        "-o",
        "json",
    ]
    result = run(argv, env={**os.environ, "BC_SKIP_MAPPING": "TRUE"}, timeout=600)
    assert result.returncode == 0, (
        f"checkov found problems:\n{result.stdout[-6000:]}{result.stderr[-2000:]}"
    )
    report = json.loads(result.stdout)
    summary, results = report["summary"], report["results"]
    assert summary["failed"] == 0 and summary["parsing_errors"] == 0, summary
    passed = {check["check_id"] for check in results["passed_checks"]}
    assert passed >= CHECKOV_MUST_PASS, CHECKOV_MUST_PASS - passed
    # Every skip sits in the resource it concerns and says why; checkov honoured each of them.
    skipped_here = set()
    for tf_file in module_files():
        for line in tf_file.read_text().splitlines():
            if "checkov:skip" in line:
                found = re.search(r"#checkov:skip=(CKV2?_GCP_\d+):\S.{20,}", line)
                assert found, (tf_file, line)
                skipped_here.add(found.group(1))
    assert {check["check_id"] for check in results["skipped_checks"]} == skipped_here


# --- the Google provider's schema ---------------------------------------------------------------------


def module_texts(module: str) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((MODULES / module).glob("*.tf"))}


def test_static_schema_is_google_provider_6_50(google_schema: dict[str, Any]) -> None:
    assert google_schema["provider_version"] == PROVIDER_VERSION
    assert len(google_schema["resource"]) > 500 and google_schema["provider"]
    instance = google_schema["resource"]["google_compute_instance"]
    assert instance["attrs"]["machine_type"] is True  # required
    assert "on_host_maintenance" in instance["blocks"]["scheduling"]["schema"]["attrs"]
    assert "nat_ip" in instance["reads"]["network_interface"]["access_config"]


@pytest.mark.parametrize("module", GCP_MODULES)
def test_static_module_matches_google_provider_schema(
    module: str, google_schema: dict[str, Any]
) -> None:
    files = module_texts(module)
    errors = schema_errors(files, google_schema)
    assert not errors, "\n".join(errors)
    # The check saw the module's resources (not an empty parse).
    resources = [r for tree in map(parse_hcl, files.values()) for r in labelled(tree, "resource")]
    assert resources
    if module == "gcp_network":  # every firewall rule, the service_clients one included
        rules = {name for (rtype, name), _ in resources if rtype == "google_compute_firewall"}
        assert rules == {"internal", "external", "clients"}, rules


@pytest.mark.parametrize("module", GCP_MODULES)
def test_static_example_provider_block_matches_google_provider_schema(
    module: str, google_schema: dict[str, Any]
) -> None:
    example = MODULES / module / "examples" / "basic" / "main.tf"
    errors = schema_errors({"examples/basic/main.tf": example.read_text()}, google_schema)
    assert not errors, "\n".join(errors)
    assert any(labelled(parse_file(example), "provider")), "the example configures google"


INSTANCE = """
resource "google_compute_instance" "x" {
  name         = "x"
  machine_type = "g2-standard-8"
  zone         = "us-central1-a"
  %s
  boot_disk {
    initialize_params {
      image = "debian-cloud/debian-12"
    }
  }
  network_interface {
    subnetwork = "s"
    access_config {}
  }
  scheduling {
    %s
  }
}

output "ip" {
  value = google_compute_instance.x.network_interface[0].%s
}
"""


def instance(
    extra: str = "", scheduling: str = "preemptible = true", read: str = "network_ip"
) -> dict[str, str]:
    return {"main.tf": INSTANCE % (extra, scheduling, read)}


def test_static_schema_check_accepts_a_valid_instance(google_schema: dict[str, Any]) -> None:
    """The control for the negative tests below: only the one change makes them fail."""
    assert schema_errors(instance(), google_schema) == []


def test_static_schema_check_rejects_a_made_up_attribute(google_schema: dict[str, Any]) -> None:
    errors = schema_errors(instance(extra="made_up_attribute = true"), google_schema)
    assert len(errors) == 1 and "no attribute 'made_up_attribute'" in errors[0], errors


def test_static_schema_check_rejects_a_typo_in_a_nested_block(
    google_schema: dict[str, Any],
) -> None:
    errors = schema_errors(instance(scheduling="preemptable = true"), google_schema)
    assert len(errors) == 1, errors
    assert "scheduling: no attribute 'preemptable' (did you mean 'preemptible'?)" in errors[0]


def test_static_schema_check_rejects_a_block_written_as_an_attribute(
    google_schema: dict[str, Any],
) -> None:
    errors = schema_errors(instance(extra="shielded_instance_config = {}"), google_schema)
    assert len(errors) == 1 and "'shielded_instance_config' is a block" in errors[0], errors


def test_static_schema_check_rejects_a_missing_required_block(
    google_schema: dict[str, Any],
) -> None:
    text = INSTANCE % ("", "preemptible = true", "network_ip")
    text = re.sub(r"  boot_disk \{.*?\n  \}\n", "", text, flags=re.S)
    errors = schema_errors({"main.tf": text}, google_schema)
    assert errors == ["main.tf: google_compute_instance.x: required block 'boot_disk' is missing"]


def test_static_schema_check_rejects_a_bad_read_and_an_unknown_type(
    google_schema: dict[str, Any],
) -> None:
    errors = schema_errors(instance(read="access_config[0].nat_ipp"), google_schema)
    assert len(errors) == 1 and "cannot read 'nat_ipp' (did you mean 'nat_ip'?)" in errors[0], (
        errors
    )
    typo = {
        "main.tf": INSTANCE.replace("google_compute_instance", "google_compute_instanse")
        % ("", "preemptible = true", "network_ip")
    }
    errors = schema_errors(typo, google_schema)
    assert any("no resource type 'google_compute_instanse'" in e for e in errors), errors


def test_static_schema_check_rejects_a_made_up_attribute_in_the_real_module(
    google_schema: dict[str, Any],
) -> None:
    """The same check on gcp_cluster's own main.tf with one line added: it fails there too."""
    files = module_texts("gcp_cluster")
    anchor = 'resource "google_compute_instance" "this" {\n'
    assert anchor in files["main.tf"]
    files["main.tf"] = files["main.tf"].replace(anchor, anchor + "  made_up_attribute = true\n")
    errors = schema_errors(files, google_schema)
    assert len(errors) == 1, errors
    assert errors[0].startswith(
        "main.tf: google_compute_instance.this: no attribute 'made_up_attribute'"
    ), errors


# --- the catalog ------------------------------------------------------------------------------------------

# Google's G2 table: L4 GPUs per machine type (the name gives vCPUs, not GPUs).
G2_GPUS = {4: 1, 8: 1, 12: 1, 16: 1, 24: 2, 32: 1, 48: 4, 96: 8}
NAMED = [
    (re.compile(r"a2-highgpu-(\d+)g"), "A100", "NVIDIA A100 40GB", 40),
    (re.compile(r"a2-ultragpu-(\d+)g"), "A100-80GB", "NVIDIA A100 80GB", 80),
    (re.compile(r"a3-(?:high|mega)gpu-(\d+)g"), "H100", "NVIDIA H100 80GB", 80),
    (re.compile(r"a3-ultragpu-(\d+)g"), "H200", "NVIDIA H200 141GB", 141),
]


def expected_gpus(key: str, entry: dict[str, Any]) -> tuple[str, int, int]:
    """(accelerator name, count, GPU memory) that the entry's name implies."""
    for pattern, accel, model, memory in NAMED:
        found = pattern.fullmatch(key)
        if found:
            assert entry["gpu"].startswith(model), (key, entry["gpu"])
            return accel, int(found.group(1)), memory
    g2 = re.fullmatch(r"g2-standard-(\d+)", key)
    if g2:
        vcpus = int(g2.group(1))
        assert entry["vcpus"] == vcpus and entry["memory_gib"] == 4 * vcpus, key
        assert entry["gpu"] == "NVIDIA L4", key
        return "L4", G2_GPUS[vcpus], 24
    n1 = re.fullmatch(r"(n1-standard-(\d+))\+t4x(\d+)", key)
    assert n1, f"catalog key {key!r} matches no known naming scheme"
    assert entry["machine_type"] == n1.group(1), key
    assert entry["guest_accelerator"] == {"type": "nvidia-tesla-t4", "count": int(n1.group(3))}
    vcpus = int(n1.group(2))
    assert entry["vcpus"] == vcpus and entry["memory_gib"] == int(vcpus * 3.75), key
    assert entry["gpu"] == "NVIDIA T4", key
    return "T4", int(n1.group(3)), 16


def test_static_gcp_catalog_parses_and_names_agree_with_gpus() -> None:
    from rlinfra.accelerators import KNOWN_ACCELERATORS, parse_accelerator

    data = catalog()
    assert data["as_of"] == "2026-12-05" and data["currency"] == "USD"
    assert all(s["url"].startswith("https://") for s in data["sources"])
    assert any(s["url"].startswith("https://cloud.google.com/compute/") for s in data["sources"])
    regions = data["regions"]
    assert {"us-central1", "us-east4", "us-east5", "europe-west4", "asia-southeast1"} <= set(
        regions
    )

    types = data["machine_types"]
    required = {
        "machine_type",
        "accelerator",
        "gpu",
        "gpus",
        "gpu_memory_gib",
        "vcpus",
        "memory_gib",
        "zones",
        "prices",
    }
    for wanted in [
        *(f"a2-highgpu-{n}g" for n in (1, 2, 4, 8)),
        "a2-ultragpu-1g",
        "a2-ultragpu-8g",
        "a3-highgpu-8g",
        "a3-megagpu-8g",
        "a3-ultragpu-8g",
        *(f"g2-standard-{n}" for n in G2_GPUS),
    ]:
        assert wanted in types, wanted
    assert any(key.startswith("n1-") for key in types)

    for key, entry in types.items():
        assert required <= set(entry), (key, required - set(entry))
        accel, count, memory = expected_gpus(key, entry)
        spec = parse_accelerator(entry["accelerator"])
        assert (spec.name, spec.count) == (accel, count), key
        assert entry["gpus"] == count and entry["gpu_memory_gib"] == memory, key
        assert spec.name in KNOWN_ACCELERATORS and KNOWN_ACCELERATORS[spec.name] == memory, key
        if not key.startswith("n1-"):
            assert entry["machine_type"] == key and "guest_accelerator" not in entry, key

        assert entry["zones"] and set(entry["zones"]) <= set(regions), key
        for region, zones in entry["zones"].items():
            assert zones and all(re.fullmatch(rf"{region}-[a-z]", z) for z in zones), (key, region)
        for region, price in entry["prices"].items():
            assert region in entry["zones"], f"{key}: priced in {region} but not offered there"
            on_demand, spot = price["on_demand"], price["spot"]
            assert on_demand is None or on_demand > 0, key
            assert spot is None or (on_demand is not None and 0 < spot < on_demand), key
            if on_demand is None:
                assert "not known with confidence" in entry.get("notes", ""), key
    # Spot prices move daily: none is recorded, and the catalog says so.
    assert all(p["spot"] is None for e in types.values() for p in e["prices"].values())
    assert any("Spot prices are variable" in note for note in data["notes"])


def test_static_gcp_catalog_a2_prices_scale_with_gpu_count() -> None:
    """A transcription check: A2 machine types are one shape times the GPU count."""
    types = catalog()["machine_types"]
    for family in ("a2-highgpu", "a2-ultragpu"):
        one = types[f"{family}-1g"]["prices"]["us-central1"]["on_demand"]
        for key, entry in types.items():
            if key.startswith(family + "-"):
                price = entry["prices"]["us-central1"]["on_demand"]
                assert price == pytest.approx(one * entry["gpus"], rel=1e-3), key
                assert entry["vcpus"] == 12 * entry["gpus"], key
