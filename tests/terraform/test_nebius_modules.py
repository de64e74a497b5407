"""The Nebius modules (nebius_network, nebius_cluster, nebius_bucket) and roots, statically.

No Nebius provider binary (and no registry) exists on these machines, so `terraform
init/validate/plan` cannot run on the modules as they are. What runs here instead, each test
named "static":

- `terraform fmt -check`, and every .tf file parsed with python-hcl2;
- the modules' own variables.tf (and the decisions in their provider-free `locals`) evaluated by
  the real Terraform CLI in scratch roots that hold no resource, so no provider is needed: the
  variable validations really refuse what they must (an InfiniBand fabric with a one-GPU preset,
  a /0 range without allow_public, ...), and the locals decide what the nodes get. nebius_cluster's
  real `inventory` output is evaluated there too, on instances shaped like the provider's state,
  and read by the driver's `hosts_from_outputs`;
- the roots evaluated the same way with their modules replaced by provider-free stand-ins that
  keep each module's real variables.tf: every argument a root passes exists and passes the
  modules' validations, and the root's outputs read outputs the modules have;
- checkov, from the project's checkov venv, with every skip carrying a reason; checkov has no
  Nebius checks of its own, so rlinfra's Nebius policies (versioning on, no bucket policy, no
  ingress from 0.0.0.0/0 written in a module) are given to it, and a broken copy proves they fail;
- every resource type, attribute and nested attribute the modules and roots write, every required
  one they must write, and every attribute their expressions read, checked against the Nebius
  provider 0.6.32 schema as its documentation states it (terraform/schemas/nebius-0.6.32.json,
  written by tools/nebius_schema.py from the docs of that release; its source commit is in the
  file). Nebius's nested settings are attributes (`boot_disk = { ... }`), not blocks; read-only
  attributes cannot be written. Negative tests prove the check rejects what the provider would;
- tools/nebius_schema.py itself, on a small tfplugindocs page written here (the provider's own
  docs are not on these machines: `tools/nebius_schema.py DOCS --check` compares the file with
  them where they are).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import pytest
import yaml

from helpers.hcl import is_block_list, labelled, parse_file, parse_hcl, pure_locals, unquote
from helpers.paths import MODULES, REPO
from helpers.provider_schema import (
    NEBIUS_PROVIDER_VERSION,
    REPO_SCHEMAS,
    nebius_schema,
    nested_schema_errors,
)
from helpers.terraform import find_checkov, needs_terraform, run, terraform_in

NEBIUS_MODULES = ("nebius_network", "nebius_cluster", "nebius_bucket")
# The driver's Nebius catalog: every preset it may choose must pass nebius_cluster's validations.
CATALOG = REPO / "driver" / "rlinfra" / "clouds" / "nebius" / "catalog.yaml"
ROOTS = REPO / "terraform" / "roots" / "nebius"
SCHEMA_FILE = REPO_SCHEMAS / f"nebius-{NEBIUS_PROVIDER_VERSION}.json"
GENERATOR = REPO / "tools" / "nebius_schema.py"

PROJECT = "project-e00test0000000000"
SUBNET = "vpcsubnet-e00test0000000000"
GROUP = "vpcsecuritygroup-e00test0000000000"
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHRlc3RrZXl0ZXN0a2V5dGVzdGtleXRlc3RrZXl0ZXN0 test"

# The cluster root's variables, as the driver writes them (the contract in its variables.tf).
CONTRACT = {
    "cluster_name",
    "parent_id",
    "region",
    "node_count",
    "platform",
    "preset",
    "infiniband_fabric",
    "image_family",
    "boot_disk_size_gb",
    "existing_subnet_id",
    "subnet_cidr",
    "public_ip",
    "ssh_user",
    "ssh_public_key",
    "allowed_cidrs",
    "allow_public",
    "service_ports",
    "service_clients",
    "spot",
    "bucket_name",
    "labels",
}
INVENTORY_NODE_KEYS = {"name", "rank", "ssh_host", "private_ip", "interface"}


def module_files(*, examples: bool = True) -> list[Path]:
    files = sorted(p for name in NEBIUS_MODULES for p in (MODULES / name).rglob("*.tf"))
    return [p for p in files if examples or "examples" not in p.parts]


def root_files() -> list[Path]:
    return sorted(ROOTS.rglob("*.tf"))


def texts(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(folder.glob("*.tf"))}


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return nebius_schema()


# --- fmt, parsing, layout ----------------------------------------------------------------------------


@needs_terraform
def test_static_fmt_check_of_nebius_modules_and_roots() -> None:
    paths = [str(MODULES / name) for name in NEBIUS_MODULES] + [str(ROOTS)]
    result = run(["terraform", "fmt", "-check", "-recursive", "-diff", *paths])
    assert result.returncode == 0, f"terraform fmt -check found changes:\n{result.stdout}"


def test_static_hcl_of_nebius_files_parses_nested_attributes_as_objects() -> None:
    """Every .tf file parses; Nebius's nested settings are written as attributes, which
    python-hcl2 (7+) reads as plain objects, and blocks carry __is_block__."""
    files = module_files() + root_files()
    assert len(files) >= 3 * 5 + 2 * 4, files
    for path in files:
        assert parse_file(path), path
    main = parse_file(MODULES / "nebius_cluster" / "main.tf")
    ((_, instance),) = [
        b for b in labelled(main, "resource") if b[0][0] == "nebius_compute_v1_instance"
    ]
    assert isinstance(instance["boot_disk"], dict) and not is_block_list(instance["boot_disk"])
    assert isinstance(instance["network_interfaces"], list)
    assert is_block_list(instance["lifecycle"]), "python-hcl2 >= 7 is needed (block markers)"


@pytest.mark.parametrize("module", NEBIUS_MODULES)
def test_static_module_layout_documented_variables_and_version_pin(module: str) -> None:
    folder = MODULES / module
    for name in ("main.tf", "variables.tf", "outputs.tf", "versions.tf", "README.md"):
        assert (folder / name).is_file(), f"{module}/{name} is missing"
    example = folder / "examples" / "basic" / "main.tf"
    assert example.is_file()
    pin = re.escape(NEBIUS_PROVIDER_VERSION)
    for versions in ((folder / "versions.tf").read_text(), example.read_text()):
        assert re.search(r'source\s*=\s*"nebius/nebius"', versions)
        assert re.search(rf'version\s*=\s*"~> {pin}"', versions), f"pin ~> {pin}"
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


CREDENTIAL = re.compile(r"token|secret|password|credential|private_key|access_key|key_id")


@pytest.mark.parametrize("root", ["cluster", "storage"])
def test_static_root_layout_pin_and_no_credentials(root: str) -> None:
    """Each root: its four files, the exact provider pin, modules copied in by the driver
    (./modules/nebius_*, each one that exists), and no credential anywhere in Terraform: no
    variable for one, and a provider block that configures none (the provider reads
    NEBIUS_IAM_TOKEN from the environment)."""
    folder = ROOTS / root
    assert sorted(p.name for p in folder.glob("*.tf")) == [
        "main.tf",
        "outputs.tf",
        "variables.tf",
        "versions.tf",
    ]
    versions = (folder / "versions.tf").read_text()
    assert re.search(rf'version\s*=\s*"= {re.escape(NEBIUS_PROVIDER_VERSION)}"', versions)
    main = parse_file(folder / "main.tf")
    sources = [unquote(body["source"]) for (_,), body in labelled(main, "module")]
    assert sources, root
    for source in sources:
        assert re.fullmatch(r"\./modules/nebius_[a-z]+", source), source
        assert (MODULES / source.split("/")[-1] / "main.tf").is_file(), source
    ((provider,), body) = next(iter(labelled(main, "provider")))
    assert provider == "nebius"
    assert not [k for k in body if not k.startswith("__")], f"provider block sets {body}"
    names = [name for (name,), _ in labelled(parse_file(folder / "variables.tf"), "variable")]
    for name in names:
        if name != "ssh_public_key":
            assert not CREDENTIAL.search(name), f"{root}: variable {name} looks like a credential"
    everything = "".join(p.read_text() for p in folder.glob("*.tf"))
    assert "nebius_iam_v2_access_key" not in everything and "access_key" not in everything


def test_static_cluster_root_contract() -> None:
    """The cluster root takes exactly the contract's variables, lists them all at the top of its
    variables.tf, and outputs `inventory` from nebius_cluster."""
    text = (ROOTS / "cluster" / "variables.tf").read_text()
    declared = {name for (name,), _ in labelled(parse_hcl(text), "variable")}
    assert declared == CONTRACT, (declared - CONTRACT, CONTRACT - declared)
    header = text.split("\nvariable ", 1)[0]
    listed = set(re.findall(r"^#   ([a-z_]+) ", header, re.M))
    assert listed == CONTRACT, (listed ^ CONTRACT,)
    outputs = {
        name: body
        for (name,), body in labelled(parse_file(ROOTS / "cluster" / "outputs.tf"), "output")
    }
    assert outputs["inventory"]["value"] == "${module.cluster.inventory}"


def test_static_roots_pass_only_module_variables_and_every_required_one() -> None:
    for root in ("cluster", "storage"):
        main = parse_file(ROOTS / root / "main.tf")
        for (call,), body in labelled(main, "module"):
            module = unquote(body["source"]).split("/")[-1]
            variables = {
                name: spec
                for (name,), spec in labelled(
                    parse_file(MODULES / module / "variables.tf"), "variable"
                )
            }
            passed = {k for k in body if not k.startswith("__")} - {"source", "for_each", "count"}
            assert passed <= set(variables), (root, call, passed - set(variables))
            required = {name for name, spec in variables.items() if "default" not in spec}
            assert required <= passed, (root, call, required - passed)


# --- the schema file and its generator ----------------------------------------------------------------


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("nebius_schema_tool", GENERATOR)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_static_schema_file_says_where_it_comes_from(schema: dict[str, Any]) -> None:
    assert schema["provider_source"] == "nebius/nebius"
    assert schema["provider_version"] == NEBIUS_PROVIDER_VERSION
    source = schema["source"]
    assert source["repository"] == "https://github.com/nebius/terraform-provider-nebius"
    assert re.fullmatch(r"[0-9a-f]{40}", source["commit"])
    assert source["path"] == "docs" and source["generator"] == "tools/nebius_schema.py"
    # The file is the generator's own rendering (keys sorted), not a hand edit.
    generator = load_generator()
    assert SCHEMA_FILE.read_text() == generator.render(json.loads(SCHEMA_FILE.read_text()))
    assert set(generator.RESOURCES) == set(schema["resource"])
    assert set(generator.DATA_SOURCES) == set(schema["data"])
    assert set(schema["resource"]) <= set(schema["resource_types"])
    assert len(schema["resource_types"]) > 30 and len(schema["data_types"]) > 30


def test_static_schema_has_what_the_provider_docs_say(schema: dict[str, Any]) -> None:
    """A few facts read off the 0.6.32 pages by hand, against the generated file."""
    instance = schema["resource"]["nebius_compute_v1_instance"]["attributes"]
    for name in ("parent_id", "resources", "boot_disk", "network_interfaces"):
        assert instance[name]["mode"] == "required", name
    assert instance["name"]["mode"] == "optional" and instance["id"]["mode"] == "computed"
    assert instance["cloud_init_user_data"].get("sensitive") is True
    assert instance["network_interfaces"]["nesting"] == "list"
    interface = instance["network_interfaces"]["attributes"]
    assert {n for n, a in interface.items() if a["mode"] == "required"} == {
        "ip_address",
        "name",
        "subnet_id",
    }
    preemptible = instance["preemptible"]["attributes"]
    assert preemptible["on_preemption"]["mode"] == "required"
    assert preemptible["priority"].get("deprecated") is True
    assert instance["boot_disk"]["attributes"]["existing_disk"]["attributes"]["id"]["mode"] == (
        "required"
    )
    status = instance["status"]
    assert status["mode"] == "computed"
    address = status["attributes"]["network_interfaces"]["attributes"]["ip_address"]
    assert address["attributes"]["address"]["mode"] == "computed"
    gpu_cluster = schema["resource"]["nebius_compute_v1_gpu_cluster"]["attributes"]
    assert gpu_cluster["infiniband_fabric"]["mode"] == "required"
    bucket = schema["resource"]["nebius_storage_v1_bucket"]["attributes"]
    assert "force_destroy" not in bucket and bucket["versioning_policy"]["mode"] == "optional"
    rule = schema["resource"]["nebius_vpc_v1_security_rule"]["attributes"]
    assert {n for n, a in rule.items() if a["mode"] == "required"} == {
        "access",
        "parent_id",
        "protocol",
    }
    assert "token" in schema["provider"]["attributes"]


PAGE = """---
page_title: "nebius_thing Resource - nebius"
---

# nebius_thing Resource

<!-- schema generated by tfplugindocs -->
## Schema

### Required

- `parent_id` (String) Identifier of the parent.
- `spec` (Attributes) :

   What the thing is (see [below for nested schema](#nestedatt--spec))

### Optional

- `labels` (Map of String) Labels.
- `secret` (String, Sensitive, [Write-only](https://example.invalid/write-only)) A secret.

### Read-Only

- `id` (String) Identifier.
- `status` (Attributes) (see [below for nested schema](#nestedatt--status))

<a id="nestedatt--spec"></a>
### Nested Schema for `spec`

Required:

- `size` (Number)

Optional:

- `parts` (Attributes List) :

   #### Inner value description

   - `A` one
   - `B` two (see [below for nested schema](#nestedatt--spec--parts))

<a id="nestedatt--spec--parts"></a>
### Nested Schema for `spec.parts`

Optional:

- `kind` (String, Deprecated)



<a id="nestedatt--status"></a>
### Nested Schema for `status`

Read-Only:

- `state` (String)
"""


def test_static_generator_reads_a_tfplugindocs_page(tmp_path: Path) -> None:
    generator = load_generator()
    page = generator.parse_page(PAGE, "resource.nebius_thing")
    assert page == {
        "attributes": {
            "parent_id": {"mode": "required", "type": "String"},
            "spec": {
                "mode": "required",
                "type": "Attributes",
                "nesting": "single",
                "attributes": {
                    "size": {"mode": "required", "type": "Number"},
                    "parts": {
                        "mode": "optional",
                        "type": "Attributes List",
                        "nesting": "list",
                        "attributes": {
                            "kind": {"mode": "optional", "type": "String", "deprecated": True}
                        },
                    },
                },
            },
            "labels": {"mode": "optional", "type": "Map of String"},
            "secret": {
                "mode": "optional",
                "type": "String",
                "sensitive": True,
                "write_only": True,
            },
            "id": {"mode": "computed", "type": "String"},
            "status": {
                "mode": "computed",
                "type": "Attributes",
                "nesting": "single",
                "attributes": {"state": {"mode": "computed", "type": "String"}},
            },
        }
    }
    # A page it cannot read whole fails, rather than giving a schema with holes.
    broken = PAGE.replace('<a id="nestedatt--status"></a>\n', "")
    with pytest.raises(generator.DocsError, match="no section nestedatt--status"):
        generator.parse_page(broken, "resource.nebius_thing")
    orphan = PAGE.replace(" (see [below for nested schema](#nestedatt--status))", "")
    with pytest.raises(generator.DocsError, match="Attributes entry without its nested schema"):
        generator.parse_page(orphan, "resource.nebius_thing")

    # The whole run on a docs folder of one page, provenance included.
    docs = tmp_path / "docs"
    (docs / "resources").mkdir(parents=True)
    (docs / "data-sources").mkdir()
    (docs / "index.md").write_text(PAGE.replace("nebius_thing Resource", "Nebius Provider"))
    (docs / "resources" / "thing.md").write_text(PAGE)
    (tmp_path / "CHANGELOG.md").write_text("# Changelog\n\n## 9.8.7 (July 1, 2026)\n")
    out = tmp_path / "schema.json"
    commit = "0123456789abcdef0123456789abcdef01234567"
    argv = [str(docs), "--version", "9.8.7", "--commit", commit, "--out", str(out)]
    assert generator.main(argv) == 1 and not out.exists()  # RESOURCES are not in this folder
    written = generator.schema_from_docs(docs, "9.8.7", commit, ("nebius_thing",), ())
    assert written["resource"]["nebius_thing"] == page
    assert written["source"]["commit"] == commit and written["provider_version"] == "9.8.7"
    assert written["resource_types"] == ["nebius_thing"] and written["data_types"] == []
    with pytest.raises(SystemExit):  # CHANGELOG.md says another release
        generator.main([str(docs), "--version", "9.8.6", "--commit", commit, "--out", str(out)])


# --- the modules and roots against the schema ----------------------------------------------------------

CHECKED = (
    [f"modules/{m}" for m in NEBIUS_MODULES]
    + [f"modules/{m}/examples/basic" for m in NEBIUS_MODULES]
    + ["roots/nebius/cluster", "roots/nebius/storage"]
)


@pytest.mark.parametrize("folder", CHECKED)
def test_static_files_match_nebius_provider_schema(folder: str, schema: dict[str, Any]) -> None:
    files = texts(REPO / "terraform" / folder)
    assert files
    errors = nested_schema_errors(files, schema)
    assert not errors, "\n".join(errors)


def test_static_schema_check_saw_every_resource_the_modules_make(schema: dict[str, Any]) -> None:
    """Not an empty parse: the check above went through each of these resources."""
    made = {
        (tf_type, name)
        for module in NEBIUS_MODULES
        for tree in map(parse_hcl, texts(MODULES / module).values())
        for (tf_type, name), _ in labelled(tree, "resource")
    }
    assert made == {
        ("nebius_vpc_v1_network", "this"),
        ("nebius_vpc_v1_subnet", "this"),
        ("nebius_vpc_v1_security_group", "this"),
        ("nebius_vpc_v1_security_rule", "internal"),
        ("nebius_vpc_v1_security_rule", "egress"),
        ("nebius_vpc_v1_security_rule", "external"),
        ("nebius_vpc_v1_security_rule", "clients"),
        ("nebius_compute_v1_gpu_cluster", "this"),
        ("nebius_compute_v1_disk", "boot"),
        ("nebius_compute_v1_instance", "this"),
        ("nebius_storage_v1_bucket", "this"),
    }
    assert {t for t, _ in made} <= set(schema["resource"])


INSTANCE = """
resource "nebius_compute_v1_instance" "x" {
  parent_id = "project-e00x"
  name      = "x"
  %s
  resources = {
    %s
  }
  boot_disk = {
    attach_mode   = "READ_WRITE"
    existing_disk = { id = "computedisk-e00x" }
  }
  network_interfaces = [{
    name       = "eth0"
    subnet_id  = "vpcsubnet-e00x"
    ip_address = {}
  }]
  preemptible = var.spot ? { %s } : null
}

variable "spot" {
  type = bool
}

output "ip" {
  value = nebius_compute_v1_instance.x.status.network_interfaces[0].ip_address.%s
}
"""
RESOURCES = 'platform = "gpu-h100-sxm"\n    preset   = "1gpu-16vcpu-200gb"'


def instance(
    extra: str = "",
    resources: str = RESOURCES,
    preemptible: str = 'on_preemption = "STOP"',
    read: str = "address",
) -> dict[str, str]:
    return {"main.tf": INSTANCE % (extra, resources, preemptible, read)}


def test_static_schema_check_accepts_a_valid_instance(schema: dict[str, Any]) -> None:
    """The control for the negative tests below: only the one change makes them fail."""
    assert nested_schema_errors(instance(), schema) == []


def test_static_schema_check_rejects_a_made_up_attribute(schema: dict[str, Any]) -> None:
    errors = nested_schema_errors(instance(extra="made_up_attribute = true"), schema)
    assert errors == ["main.tf: nebius_compute_v1_instance.x: no attribute 'made_up_attribute'"], (
        errors
    )


def test_static_schema_check_rejects_a_typo_in_a_nested_attribute(schema: dict[str, Any]) -> None:
    typo = RESOURCES.replace("platform =", "platfrom =")
    errors = nested_schema_errors(instance(resources=typo), schema)
    assert errors == [
        "main.tf: nebius_compute_v1_instance.x.resources: no attribute 'platfrom'"
        " (did you mean 'platform'?)",
        "main.tf: nebius_compute_v1_instance.x.resources: required attribute 'platform' is missing",
    ], errors
    # Inside a conditional's object too (the preemptible = cond ? { ... } : null form).
    errors = nested_schema_errors(instance(preemptible='on_preemtion = "STOP"'), schema)
    assert errors == [
        "main.tf: nebius_compute_v1_instance.x.preemptible: no attribute 'on_preemtion'"
        " (did you mean 'on_preemption'?)",
        "main.tf: nebius_compute_v1_instance.x.preemptible: required attribute 'on_preemption'"
        " is missing",
    ], errors


def test_static_schema_check_rejects_a_missing_required_attribute(schema: dict[str, Any]) -> None:
    text = instance()["main.tf"].replace('  parent_id = "project-e00x"\n', "")
    errors = nested_schema_errors({"main.tf": text}, schema)
    assert errors == [
        "main.tf: nebius_compute_v1_instance.x: required attribute 'parent_id' is missing"
    ], errors
    text = instance()["main.tf"].replace('    subnet_id  = "vpcsubnet-e00x"\n', "")
    errors = nested_schema_errors({"main.tf": text}, schema)
    assert errors == [
        "main.tf: nebius_compute_v1_instance.x.network_interfaces[0]: required attribute"
        " 'subnet_id' is missing"
    ], errors


def test_static_schema_check_rejects_a_nested_attribute_written_as_a_block(
    schema: dict[str, Any],
) -> None:
    text = instance()["main.tf"].replace("  resources = {\n", "  resources {\n")
    errors = nested_schema_errors({"main.tf": text}, schema)
    assert errors == [
        "main.tf: nebius_compute_v1_instance.x: 'resources' is an attribute, not a block:"
        " write resources = { ... }"
    ], errors


def test_static_schema_check_rejects_read_only_opaque_and_dynamic(schema: dict[str, Any]) -> None:
    errors = nested_schema_errors(instance(extra='id = "computeinstance-e00x"'), schema)
    assert errors == [
        "main.tf: nebius_compute_v1_instance.x: 'id' is read-only (the provider sets it)"
    ], errors
    errors = nested_schema_errors(instance(extra="gpu_cluster = var.gpu_cluster"), schema)
    assert len(errors) == 1 and "set by an expression this check cannot read" in errors[0]
    dynamic = (
        'dynamic "gpu_cluster" {\n    for_each = []\n    content {\n      id = "x"\n    }\n  }'
    )
    errors = nested_schema_errors(instance(extra=dynamic), schema)
    assert len(errors) == 1 and "'gpu_cluster' is an attribute: a dynamic block" in errors[0]


def test_static_schema_check_rejects_a_bad_read_and_an_unknown_type(
    schema: dict[str, Any],
) -> None:
    errors = nested_schema_errors(instance(read="adress"), schema)
    assert errors == [
        "main.tf: nebius_compute_v1_instance.x: cannot read 'adress' (did you mean 'address'?)"
    ], errors
    typo = instance()["main.tf"].replace("nebius_compute_v1_instance", "nebius_compute_v1_instanse")
    errors = nested_schema_errors({"main.tf": typo}, schema)
    assert any(
        "no resource type 'nebius_compute_v1_instanse' (did you mean 'nebius_compute_v1_instance'?)"
        in e
        for e in errors
    ), errors
    # Documented by the provider, but not in the schema file: regenerate with --resource.
    other = 'resource "nebius_iam_v1_group" "g" {\n  parent_id = "tenant-e00x"\n}\n'
    errors = nested_schema_errors({"main.tf": other}, schema)
    assert errors and "is documented but not in the schema file" in errors[0], errors


def test_static_schema_check_rejects_a_made_up_attribute_in_the_real_module(
    schema: dict[str, Any],
) -> None:
    """The same check on nebius_cluster's own files with one line changed: it fails there too."""
    files = texts(MODULES / "nebius_cluster")
    anchor = "  resources = {\n    platform = var.platform\n"
    assert anchor in files["main.tf"]
    files["main.tf"] = files["main.tf"].replace(
        anchor, "  resources = {\n    platfrom = var.platform\n"
    )
    errors = nested_schema_errors(files, schema)
    assert errors == [
        "main.tf: nebius_compute_v1_instance.this.resources: no attribute 'platfrom'"
        " (did you mean 'platform'?)",
        "main.tf: nebius_compute_v1_instance.this.resources: required attribute 'platform' is"
        " missing",
    ], errors


# --- variables, locals and outputs, evaluated by Terraform without any provider ------------------------

# nebius_cluster's outputs read its instances and GPU cluster; here they read objects shaped like
# the provider's state of them instead (every path they use is checked against the schema above).
FAKE_CLUSTER_STATE = """
locals {
  fake_instances = [for rank in range(var.node_count) : {
    id        = "computeinstance-e00fake${rank}"
    name      = local.names[rank]
    resources = { platform = var.platform, preset = var.preset }
    status = {
      network_interfaces = [{
        ip_address        = { address = "10.0.0.${10 + rank}/32" }
        public_ip_address = var.public_ip ? { address = "203.0.113.${10 + rank}/32" } : null
      }]
    }
  }]
  fake_gpu_clusters = local.make_gpu_cluster ? [{
    id                = "computegpucluster-e00fake"
    infiniband_fabric = var.infiniband_fabric
  }] : []
}
"""

# Provider-free stand-ins for the other modules' outputs (their keys: the real output names).
STAND_IN_OUTPUTS: dict[str, dict[str, str]] = {
    "nebius_network": {
        "network": """{
    network_id        = "vpcnetwork-e00standin"
    subnet_id         = var.existing_subnet_id == null ? "vpcsubnet-e00standin" : var.existing_subnet_id
    security_group_id = "vpcsecuritygroup-e00standin"
  }""",
        "security_rules": """concat(["${var.name}-internal", "${var.name}-egress"], [for rule in values(local.external_rules) : rule.name], [for rule in values(local.client_rules) : rule.name])""",
    },
    "nebius_bucket": {
        "bucket": """{
    name        = var.name
    id          = "storagebucket-e00standin"
    endpoint    = "https://storage.eu-north1.nebius.cloud"
    region      = "eu-north1"
    domain_name = "${var.name}.storage.eu-north1.nebius.cloud"
  }""",
    },
}


def variables_module(target: Path, module: str) -> None:
    """A provider-free copy of a module: its variables.tf as is, its provider-free locals, one
    output per local, and its real outputs: nebius_cluster's over FAKE_CLUSTER_STATE, the others'
    as STAND_IN_OUTPUTS."""
    target.mkdir(parents=True)
    shutil.copy(MODULES / module / "variables.tf", target / "variables.tf")
    blocks = pure_locals((MODULES / module / "main.tf").read_text(), provider="nebius")
    names = [name for block in blocks for name in parse_hcl(block)["locals"][0] if name[0] != "_"]
    outputs = "".join(f'output "local_{n}" {{\n  value = local.{n}\n}}\n' for n in names)
    real = {name for (name,), _ in labelled(parse_file(MODULES / module / "outputs.tf"), "output")}
    if module == "nebius_cluster":
        text = (MODULES / module / "outputs.tf").read_text()
        text = text.replace("nebius_compute_v1_instance.this", "local.fake_instances")
        text = text.replace("nebius_compute_v1_gpu_cluster.this", "local.fake_gpu_clusters")
        assert "nebius_" not in text, "nebius_cluster's outputs read another resource"
        outputs += text + FAKE_CLUSTER_STATE
    else:
        stand_in = STAND_IN_OUTPUTS.get(module, {})
        assert set(stand_in) == real, (module, real)
        outputs += "".join(f'output "{n}" {{\n  value = {v}\n}}\n' for n, v in stand_in.items())
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


def apply_outputs(folder: Path, *var_args: str) -> dict[str, Any]:
    for args in (("init", "-input=false"), ("apply", "-auto-approve", "-input=false", *var_args)):
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


CLUSTER = {
    "cluster_name": "c1",
    "parent_id": PROJECT,
    "region": "eu-north1",
    "subnet_id": SUBNET,
    "security_group_id": GROUP,
    "ssh_public_key": SSH_KEY,
}
H100X8 = {"platform": "gpu-h100-sxm", "preset": "8gpu-128vcpu-1600gb"}
H100X1 = {"platform": "gpu-h100-sxm", "preset": "1gpu-16vcpu-200gb"}
NETWORK = {"name": "c1", "parent_id": PROJECT}
BUCKET = {"name": "rl-test-checkpoints", "parent_id": PROJECT}
TEN_PORTS = [8265, 22, 9090, 8000, 8001, 8002, 8003, 8004, 8005, 8006, 8007]


def catalog_calls() -> dict[str, tuple[str, dict[str, Any]]]:
    """One nebius_cluster call per preset of the driver's catalog, as the driver would make it:
    the catalog's image family, a region it is sold in, and that region's first fabric for
    8-GPU presets."""
    if not CATALOG.is_file():
        return {}
    data = yaml.safe_load(CATALOG.read_text())
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    for key, entry in data["presets"].items():
        region = next(iter(entry["prices"]))
        fabrics = entry.get("fabrics", {}).get(region) or [None]
        args = {
            **CLUSTER,
            "platform": entry["platform"],
            "preset": entry["preset"],
            "region": region,
            "image_family": data["image_families"]["gpu" if entry["gpus"] else "cpu"],
            "infiniband_fabric": fabrics[0],
        }
        calls["catalog_" + re.sub(r"[^a-z0-9_]", "_", key)] = ("nebius_cluster", args)
    return calls


def good_calls() -> dict[str, tuple[str, dict[str, Any]]]:
    return {
        **catalog_calls(),
        "net_new": (
            "nebius_network",
            {
                **NETWORK,
                "allowed_cidrs": ["203.0.113.7/32", "198.51.100.0/24", "203.0.113.7/32"],
                "service_ports": TEN_PORTS,
            },
        ),
        "net_none_open": ("nebius_network", {**NETWORK, "existing_subnet_id": SUBNET}),
        "net_world_allowed": (
            "nebius_network",
            {
                **NETWORK,
                "allowed_cidrs": ["0.0.0.0/0"],
                "allow_public": True,
                "service_clients": [{"port": 9000, "cidrs": ["0.0.0.0/0"]}],
                "subnet_cidr": "10.42.0.0/24",
            },
        ),
        "net_with_clients": (
            "nebius_network",
            {
                **NETWORK,
                "service_clients": [
                    {"port": 8000, "cidrs": ["198.51.100.0/24", "10.9.0.0/16"]},
                    {"port": 10000, "cidrs": ["192.0.2.7/32"]},
                    {"port": 8000, "cidrs": ["10.9.0.0/16"]},
                ],
            },
        ),
        "h100x8_infiniband": (
            "nebius_cluster",
            {**CLUSTER, **H100X8, "node_count": 2, "infiniband_fabric": "fabric-3"},
        ),
        "h100x1_spot_private": (
            "nebius_cluster",
            {**CLUSTER, **H100X1, "spot": True, "public_ip": False, "bucket_name": "rl-ckpt"},
        ),
        "cpu_one_node": (
            "nebius_cluster",
            {**CLUSTER, "platform": "cpu-d3", "preset": "8vcpu-32gb", "ssh_user": "rl"},
        ),
        "bucket": ("nebius_bucket", BUCKET),
    }


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every good call above, in one scratch root, applied (no resources: only outputs)."""
    if shutil.which("terraform") is None:
        pytest.skip("terraform is not on PATH")
    folder = scratch_root(tmp_path_factory.mktemp("nebius-locals") / "root", good_calls())
    return apply_outputs(folder)


@needs_terraform
def test_static_cluster_locals_decide_gpus_infiniband_and_cloud_init(
    evaluated: dict[str, Any],
) -> None:
    ib = evaluated["h100x8_infiniband"]
    assert ib["local_gpu"] is True and ib["local_gpus_per_node"] == 8
    assert ib["local_make_gpu_cluster"] is True
    assert ib["local_names"] == ["c1-0", "c1-1"]
    assert ib["gpu_cluster"] == {"id": "computegpucluster-e00fake", "infiniband_fabric": "fabric-3"}
    assert ib["scheduling"] == {"preemptible": False, "on_preemption": None}

    spot = evaluated["h100x1_spot_private"]
    assert spot["local_gpus_per_node"] == 1 and spot["local_make_gpu_cluster"] is False
    assert spot["gpu_cluster"] is None
    assert spot["scheduling"] == {"preemptible": True, "on_preemption": "STOP"}
    assert spot["storage"] == {
        "bucket_name": "rl-ckpt",
        "endpoint": "https://storage.eu-north1.nebius.cloud",
        "region": "eu-north1",
    }

    cpu = evaluated["cpu_one_node"]
    assert cpu["local_gpu"] is False and cpu["local_gpus_per_node"] == 0
    assert cpu["storage"]["bucket_name"] is None

    # cloud-init: the deployment's key is the only key of ssh_user, who may sudo; no passwords.
    text = cpu["local_cloud_init"]
    assert text.startswith("#cloud-config\n")
    config = yaml.safe_load(text)
    assert config["ssh_pwauth"] is False and config["disable_root"] is True
    (user,) = config["users"]
    assert user["name"] == "rl" and user["ssh_authorized_keys"] == [SSH_KEY]
    assert user["sudo"] == "ALL=(ALL) NOPASSWD:ALL" and user["lock_passwd"] is True


@needs_terraform
def test_static_every_catalog_preset_is_accepted_by_nebius_cluster(
    evaluated: dict[str, Any],
) -> None:
    """The evaluated root applied, so each catalog preset passed the validations; its GPU count
    and GPU cluster are what the catalog says (8-GPU presets with a fabric join one)."""
    if not CATALOG.is_file():
        pytest.skip(f"{CATALOG.relative_to(REPO)} is not there")
    presets = yaml.safe_load(CATALOG.read_text())["presets"]
    calls = catalog_calls()
    assert presets and len(calls) == len(presets)
    for key, entry in presets.items():
        name = "catalog_" + re.sub(r"[^a-z0-9_]", "_", key)
        node, fabric = evaluated[name], calls[name][1]["infiniband_fabric"]
        assert node["local_gpus_per_node"] == entry["gpus"], key
        assert node["local_gpu"] is (entry["gpus"] > 0), key
        assert (fabric is not None) is (entry["gpus"] == 8), key
        assert node["local_make_gpu_cluster"] is (fabric is not None), key
        assert node["inventory"]["nodes"][0]["gpus"] == entry["gpus"], key


@needs_terraform
def test_static_cluster_inventory_is_the_driver_contract(evaluated: dict[str, Any]) -> None:
    """nebius_cluster's real inventory output, over instances shaped like the provider's state,
    read by the driver's hosts_from_outputs: ssh_host is the public address without its prefix
    length, or the private one when the node has none."""
    from rlinfra.clouds.base import Cloud

    ib = evaluated["h100x8_infiniband"]["inventory"]
    assert ib["ssh_user"] == "ubuntu" and ib["cluster_name"] == "c1"
    for node in ib["nodes"]:
        assert set(node) >= INVENTORY_NODE_KEYS, node
    assert [(n["name"], n["rank"], n["ssh_host"], n["private_ip"]) for n in ib["nodes"]] == [
        ("c1-0", 0, "203.0.113.10", "10.0.0.10"),
        ("c1-1", 1, "203.0.113.11", "10.0.0.11"),
    ]
    assert ib["nodes"][0]["instance_type"] == "gpu-h100-sxm:8gpu-128vcpu-1600gb"
    assert ib["nodes"][0]["gpus"] == 8 and ib["nodes"][0]["interface"] == ""

    private = evaluated["h100x1_spot_private"]["inventory"]
    (node,) = private["nodes"]
    assert node["ssh_host"] == node["private_ip"] == "10.0.0.10" and node["public_ip"] is None

    hosts = Cloud.hosts_from_outputs(cast(Any, None), {"inventory": {"value": ib}})
    assert [(h.name, h.rank, h.ssh_host, h.private_ip, h.ssh_user) for h in hosts] == [
        ("c1-0", 0, "203.0.113.10", "10.0.0.10", "ubuntu"),
        ("c1-1", 1, "203.0.113.11", "10.0.0.11", "ubuntu"),
    ]


@needs_terraform
def test_static_network_rules_open_ssh_and_ports_to_allowed_ranges_only(
    evaluated: dict[str, Any],
) -> None:
    """SSH first, each port once, at most 8 ports and one range per rule (Nebius's limits are 8
    ports and 8 CIDRs), one rule per range and chunk; client ports never join SSH's rules."""
    net = evaluated["net_new"]
    assert net["local_ports"][0] == 22 and sorted(net["local_ports"]) == sorted(set(TEN_PORTS))
    rules = net["local_external_rules"]
    assert set(rules) == {
        "198.51.100.0/24 0",
        "198.51.100.0/24 1",
        "203.0.113.7/32 0",
        "203.0.113.7/32 1",
    }
    assert rules["203.0.113.7/32 0"]["name"] == "c1-ssh-203-0-113-7-32-0"
    for rule in rules.values():
        assert 1 <= len(rule["ports"]) <= 8
    for cidr in ("203.0.113.7/32", "198.51.100.0/24"):
        ports = [p for key, r in rules.items() if key.startswith(cidr + " ") for p in r["ports"]]
        assert sorted(ports) == sorted(set(TEN_PORTS)), cidr
    assert net["local_client_rules"] == {}

    assert evaluated["net_none_open"]["local_external_rules"] == {}
    assert evaluated["net_none_open"]["local_create"] is False
    assert evaluated["net_none_open"]["security_rules"] == ["c1-internal", "c1-egress"]

    clients = evaluated["net_with_clients"]["local_client_rules"]
    assert clients == {
        "8000 198.51.100.0/24": {
            "port": 8000,
            "cidr": "198.51.100.0/24",
            "name": "c1-clients-8000-198-51-100-0-24",
        },
        "8000 10.9.0.0/16": {
            "port": 8000,
            "cidr": "10.9.0.0/16",
            "name": "c1-clients-8000-10-9-0-0-16",
        },
        "10000 192.0.2.7/32": {
            "port": 10000,
            "cidr": "192.0.2.7/32",
            "name": "c1-clients-10000-192-0-2-7-32",
        },
    }
    assert evaluated["net_with_clients"]["local_external_rules"] == {}


def test_static_security_rules_take_sources_from_variables_only() -> None:
    """No rule writes a range of its own: ingress sources are the allowed ranges, the clients'
    ranges, or the group itself; only the egress rule names 0.0.0.0/0."""
    main = parse_file(MODULES / "nebius_network" / "main.tf")
    rules = {
        name: body
        for (rtype, name), body in labelled(main, "resource")
        if rtype == "nebius_vpc_v1_security_rule"
    }
    assert set(rules) == {"internal", "egress", "external", "clients"}
    assert rules["internal"]["ingress"] == {
        "source_security_group_id": "${nebius_vpc_v1_security_group.this.id}"
    }
    assert rules["egress"]["egress"] == {"destination_cidrs": ['"0.0.0.0/0"']}
    for name in ("external", "clients"):
        assert rules[name]["ingress"]["source_cidrs"] == ["${each.value.cidr}"], name
        assert (
            unquote(rules[name]["protocol"]) == "TCP" and unquote(rules[name]["access"]) == "ALLOW"
        )
    assert rules["external"]["for_each"] == "${local.external_rules}"
    assert rules["clients"]["for_each"] == "${local.client_rules}"
    assert "0.0.0.0/0" not in json.dumps({k: v for k, v in rules.items() if k != "egress"})


# Each bad case: (module, arguments, fragments that must all appear, fragments that must not).
ALLOW_PUBLIC_MSG = "is refused unless allow_public = true"
BAD_CASES: dict[str, tuple[str, dict[str, Any], list[str], list[str]]] = {
    "infiniband_with_a_one_gpu_preset_refused": (
        "nebius_cluster",
        {**CLUSTER, **H100X1, "infiniband_fabric": "fabric-3"},
        ["infiniband_fabric needs an 8-GPU preset"],
        ["infiniband_fabric must be null or a fabric name", "preset must"],
    ),
    "infiniband_on_a_cpu_platform_refused": (
        "nebius_cluster",
        {**CLUSTER, "platform": "cpu-d3", "preset": "8vcpu-32gb", "infiniband_fabric": "fabric-3"},
        ["infiniband_fabric needs an 8-GPU preset"],
        ["preset must"],
    ),
    "gpu_preset_on_a_cpu_platform_refused": (
        "nebius_cluster",
        {**CLUSTER, "platform": "cpu-d3", "preset": "1gpu-16vcpu-200gb"},
        ["preset must name GPUs"],
        ["preset must look like", "infiniband_fabric"],
    ),
    "cpu_preset_on_a_gpu_platform_refused": (
        "nebius_cluster",
        {**CLUSTER, "platform": "gpu-h200-sxm", "preset": "16vcpu-64gb"},
        ["preset must name GPUs"],
        ["preset must look like"],
    ),
    "other_bad_cluster_inputs": (
        "nebius_cluster",
        {
            **CLUSTER,
            "cluster_name": "Cluster_1",
            "parent_id": "my-project",
            "region": "europe",
            "node_count": 65,
            "platform": "h100",
            "preset": "1gpu-16vcpu-200gb",
            "image_family": "Ubuntu 22.04",
            "boot_disk_size_gb": 20,
            "subnet_id": "subnet-1",
            "security_group_id": "sg-1",
            "ssh_user": "root",
            "ssh_public_key": "not a key",
            "bucket_name": "B",
            "labels": {"rlinfra:cluster": "c1"},
        },
        [
            "cluster_name must match",
            "parent_id must be a Nebius project id",
            "region must be a Nebius region",
            "node_count must be a whole number from 1 to 64",
            "platform must be a Nebius platform",
            "image_family must be an image family name",
            "boot_disk_size_gb must be a whole number of GiB",
            "subnet_id must be a Nebius subnet id",
            "security_group_id must be a Nebius security group id",
            "ssh_user must be a Linux user name",
            "ssh_public_key must be a single OpenSSH public key",
            "bucket_name must be null or an Object Storage bucket name",
            "labels must have keys",
        ],
        [],
    ),
    # Apart: Terraform skips the validations of a variable that refers to an invalid one.
    "bad_preset_name": (
        "nebius_cluster",
        {**CLUSTER, **H100X8, "preset": "big"},
        ["preset must look like"],
        [],
    ),
    "bad_fabric_name": (
        "nebius_cluster",
        {**CLUSTER, **H100X8, "infiniband_fabric": "Fabric 3"},
        ["infiniband_fabric must be null or a fabric name"],
        ["infiniband_fabric needs an 8-GPU preset"],
    ),
    "world_open_refused_without_allow_public": (
        "nebius_network",
        {**NETWORK, "allowed_cidrs": ["203.0.113.7/32", "0.0.0.0/0"], "service_ports": [8265]},
        [ALLOW_PUBLIC_MSG],
        ["CIDR notation"],
    ),
    "world_open_client_refused_without_allow_public": (
        "nebius_network",
        {**NETWORK, "service_clients": [{"port": 8000, "cidrs": ["198.51.100.0/24", "0.0.0.0/0"]}]},
        ["service_clients opens a service port to the whole internet", ALLOW_PUBLIC_MSG],
        ["Each service_clients entry needs", "service_clients CIDRs must be IPv4"],
    ),
    "other_bad_network_inputs": (
        "nebius_network",
        {
            "name": "c1-",
            "parent_id": "project_1",
            "existing_subnet_id": "subnet-1",
            "subnet_cidr": "10.42.0.1/24",
            "allowed_cidrs": ["203.0.113.7"],
            "service_ports": [70000],
            "service_clients": [{"port": 0, "cidrs": []}],
            "labels": {"Team": "RL"},
        },
        [
            "name must match",
            "parent_id must be a Nebius project id",
            "existing_subnet_id must be null or a Nebius subnet id",
            "subnet_cidr must be null or an IPv4 network address",
            "CIDR notation",
            "service_ports must hold whole port numbers",
            "Each service_clients entry needs",
            "labels must have keys",
        ],
        [ALLOW_PUBLIC_MSG],
    ),
    "bad_bucket_inputs": (
        "nebius_bucket",
        {
            "name": "my..checkpoints",
            "parent_id": "p",
            "storage_class": "COLD",
            "max_size_bytes": -1,
            "noncurrent_version_days": -1,
            "labels": {"Team": "RL"},
        },
        [
            "name must be 3 to 63 characters",
            "parent_id must be a Nebius project id",
            "storage_class must be one of: STANDARD, ENHANCED_THROUGHPUT",
            "max_size_bytes must be null or a whole number of bytes",
            "noncurrent_version_days must be a whole number",
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
    base = tmp_path_factory.mktemp("nebius-refused")
    roots = {
        case: scratch_root(base / case, {"case": (module, args)})
        for case, (module, args, _, _) in BAD_CASES.items()
    }
    with ThreadPoolExecutor(max_workers=2) as pool:
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


# --- the roots, with provider-free stand-ins for their modules -----------------------------------------


def stand_in_root(folder: Path, root: str) -> Path:
    """The root's variables.tf, outputs.tf and main.tf (its provider block left out), with each
    module it calls copied in as variables_module makes it."""
    folder.mkdir(parents=True)
    source = ROOTS / root
    shutil.copy(source / "variables.tf", folder / "variables.tf")
    shutil.copy(source / "outputs.tf", folder / "outputs.tf")
    main = (source / "main.tf").read_text()
    without_provider = re.sub(r'(?m)^provider "nebius" \{\}\n', "", main)
    assert without_provider != main, "the root's provider block moved"
    (folder / "main.tf").write_text(without_provider)
    for (_,), body in labelled(parse_hcl(main), "module"):
        module = unquote(body["source"]).split("/")[-1]
        variables_module(folder / "modules" / module, module)
    return folder


ROOT_VARS: dict[str, dict[str, Any]] = {
    "cluster": {
        "cluster_name": "h100x16",
        "parent_id": PROJECT,
        "region": "eu-north1",
        "node_count": 2,
        "platform": "gpu-h100-sxm",
        "preset": "8gpu-128vcpu-1600gb",
        "infiniband_fabric": "fabric-3",
        "image_family": "ubuntu22.04-cuda12",
        "boot_disk_size_gb": 500,
        "existing_subnet_id": None,
        "subnet_cidr": None,
        "public_ip": True,
        "ssh_user": "ubuntu",
        "ssh_public_key": SSH_KEY,
        "allowed_cidrs": ["198.51.100.7/32"],
        "allow_public": False,
        "service_ports": [9090],
        "service_clients": [{"port": 8000, "cidrs": ["192.0.2.0/24"]}],
        "spot": False,
        "bucket_name": "rl-test-checkpoints",
        "labels": {"rlinfra-profile": "h100x16"},
    },
    "storage": {
        "parent_id": PROJECT,
        "region": "eu-north1",
        "buckets": ["rl-test-checkpoints"],
        "labels": {"rlinfra-profile": "h100x16"},
    },
}


@needs_terraform
@pytest.mark.parametrize("root", ["cluster", "storage"])
def test_static_root_evaluates_with_the_contract(root: str, tmp_path: Path) -> None:
    """Terraform itself: every argument the root passes exists in its modules and passes their
    validations with the contract's values, and the root's outputs read outputs they have."""
    folder = stand_in_root(tmp_path / root, root)
    assert set(ROOT_VARS[root]) <= {
        name for (name,), _ in labelled(parse_file(folder / "variables.tf"), "variable")
    }
    (folder / "terraform.tfvars.json").write_text(json.dumps(ROOT_VARS[root]))
    outputs = apply_outputs(folder)
    if root == "storage":
        assert set(outputs["buckets"]) == {"rl-test-checkpoints"}
        assert outputs["endpoint"] == "https://storage.eu-north1.nebius.cloud"
        return
    inventory = outputs["inventory"]
    assert [n["name"] for n in inventory["nodes"]] == ["h100x16-0", "h100x16-1"]
    assert outputs["gpu_cluster"]["infiniband_fabric"] == "fabric-3"
    assert outputs["storage"]["bucket_name"] == "rl-test-checkpoints"
    assert outputs["security_rules"] == [
        "h100x16-internal",
        "h100x16-egress",
        "h100x16-ssh-198-51-100-7-32-0",
        "h100x16-clients-8000-192-0-2-0-24",
    ]
    # The root labels everything with the cluster and managed-by on top of the driver's labels.
    main = (ROOTS / "cluster" / "main.tf").read_text()
    assert (
        '"rlinfra-cluster" = var.cluster_name' in main and '"managed-by"      = "rlinfra"' in main
    )


@needs_terraform
def test_static_root_refuses_a_one_gpu_preset_with_infiniband(tmp_path: Path) -> None:
    """The pair of the test above: the same root and values, one change, and the module's
    validation stops the plan."""
    folder = stand_in_root(tmp_path / "cluster", "cluster")
    bad = {**ROOT_VARS["cluster"], "preset": "1gpu-16vcpu-200gb"}
    (folder / "terraform.tfvars.json").write_text(json.dumps(bad))
    returncode, output = plan(folder)
    assert returncode != 0 and "infiniband_fabric needs an 8-GPU preset" in output, output[-3000:]


# --- checkov -------------------------------------------------------------------------------------------

# checkov ships no Nebius checks; these are rlinfra's, as checkov's YAML policies.
CHECKOV_POLICIES = {
    "CKV2_RLINFRA_NEBIUS_1": {
        "name": "Nebius buckets keep object versions",
        "category": "BACKUP_AND_RECOVERY",
        "definition": {
            "cond_type": "attribute",
            "resource_types": ["nebius_storage_v1_bucket"],
            "attribute": "versioning_policy",
            "operator": "equals",
            "value": "ENABLED",
        },
    },
    "CKV2_RLINFRA_NEBIUS_2": {
        "name": "Nebius buckets have no bucket policy (no anonymous or group access)",
        "category": "GENERAL_SECURITY",
        "definition": {
            "cond_type": "attribute",
            "resource_types": ["nebius_storage_v1_bucket"],
            "attribute": "bucket_policy",
            "operator": "not_exists",
        },
    },
    "CKV2_RLINFRA_NEBIUS_3": {
        "name": "Nebius security rules written in a module open no ingress to 0.0.0.0/0",
        "category": "NETWORKING",
        "definition": {
            "cond_type": "attribute",
            "resource_types": ["nebius_vpc_v1_security_rule"],
            "attribute": "ingress.source_cidrs",
            "operator": "not_contains",
            "value": "0.0.0.0/0",
        },
    },
}


def checkov_scan(checkov: str, folder: Path, policies: Path) -> dict[str, Any]:
    # --skip-download: no guideline downloads (no internet here); the checks are local.
    argv = [checkov, "-d", str(folder), "--framework", "terraform", "--skip-download"]
    argv += ["--external-checks-dir", str(policies), "-o", "json"]
    result = run(argv, env={**os.environ, "BC_SKIP_MAPPING": "TRUE"}, timeout=600)
    assert result.returncode in (0, 1), result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert isinstance(report, dict), report
    return cast(dict[str, Any], report)


def test_static_checkov_scan_of_nebius_modules(tmp_path: Path) -> None:
    checkov = find_checkov()
    if checkov is None:
        pytest.skip("checkov not found (make venv makes .venv-checkov; or set RLINFRA_CHECKOV)")
    policies = tmp_path / "policies"
    policies.mkdir()
    for check_id, policy in CHECKOV_POLICIES.items():
        metadata = {"id": check_id, "name": policy["name"], "category": policy["category"]}
        text = yaml.safe_dump({"metadata": metadata, "definition": policy["definition"]})
        (policies / f"{check_id}.yaml").write_text(text)
    # The three modules side by side (the examples call each other's modules as ../../../nebius_*).
    scanned = tmp_path / "modules"
    for name in NEBIUS_MODULES:
        shutil.copytree(
            MODULES / name, scanned / name, ignore=shutil.ignore_patterns(".terraform*")
        )
    report = checkov_scan(checkov, scanned, policies)
    summary, results = report["summary"], report["results"]
    assert summary["failed"] == 0 and summary["parsing_errors"] == 0, results["failed_checks"]
    passed = {(c["check_id"], c["resource"].split(".", 2)[-1]) for c in results["passed_checks"]}
    assert {
        ("CKV2_RLINFRA_NEBIUS_1", "nebius_storage_v1_bucket.this"),
        ("CKV2_RLINFRA_NEBIUS_2", "nebius_storage_v1_bucket.this"),
        ("CKV2_RLINFRA_NEBIUS_3", "nebius_vpc_v1_security_rule.external"),
        ("CKV2_RLINFRA_NEBIUS_3", "nebius_vpc_v1_security_rule.clients"),
    } <= passed, passed
    # Every skip sits in the resource it concerns and says why; checkov honoured each of them.
    skipped_here = set()
    for tf_file in module_files() + root_files():
        for line in tf_file.read_text().splitlines():
            if "checkov:skip" in line:
                found = re.search(r"#checkov:skip=(CKV2?_[A-Z_]+_\d+):\S.{20,}", line)
                assert found, (tf_file, line)
                skipped_here.add(found.group(1))
    assert {check["check_id"] for check in results["skipped_checks"]} == skipped_here

    # The policies can fail: a copy with versioning off, a public bucket policy and SSH open to
    # the world fails each of them.
    bucket = scanned / "nebius_bucket" / "main.tf"
    text = bucket.read_text().replace(
        '"ENABLED"\n  default_storage_class', '"DISABLED"\n  default_storage_class'
    )
    text = text.replace(
        "  max_size_bytes        = var.max_size_bytes\n",
        "  max_size_bytes        = var.max_size_bytes\n"
        '  bucket_policy         = { rules = [{ anonymous = {}, paths = ["*"], roles = ["storage.viewer"] }] }\n',
    )
    bucket.write_text(text)
    network = scanned / "nebius_network" / "main.tf"
    network.write_text(network.read_text().replace("[each.value.cidr]", '["0.0.0.0/0"]'))
    broken = checkov_scan(checkov, scanned, policies)["results"]["failed_checks"]
    assert {c["check_id"] for c in broken} == set(CHECKOV_POLICIES), broken
