"""The gcp cloud: machine choice and prices from the catalog, Terraform variables, the rendered
deployment (golden files), refusals before anything is spent, the inventory, the preflight, and
the bucket operations.

No Compute Engine emulator exists, so the preflight runs against a local HTTP server of this
test's own (``LocalGoogleApi``) that answers in the documented JSON shapes of the OAuth token
endpoint, Compute Engine's ``regions.get`` (with its ``quotas`` list), ``machineTypes.get`` and
``acceleratorTypes.get``, and Cloud Storage's ``buckets.get``; everything else is real:
google-auth loads a service account key (its ``token_uri`` on that server), signs and exchanges
its JWT for a token, and rlinfra's own requests carry that token. The CLI runs as a subprocess
(`rlinfra up`), with a stand-in ``terraform`` that records any call, to prove that a refused
preflight creates nothing. The bucket operations run against the real ``gcp-storage-emulator``
(a GCS JSON API emulator) when one is installed: its executable comes from
RLINFRA_GCS_EMULATOR, else PATH or this Python's bin folder.
"""

from __future__ import annotations

import base64
import json
import math
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
import yaml

from helpers import contexts
from helpers.emulators import free_port
from rlinfra.accelerators import Accelerator
from rlinfra.clouds.gcp.catalog import Choice, choose, load_catalog, parse_catalog
from rlinfra.clouds.planning import make_plan, needs_account
from rlinfra.clouds.registry import cloud_for
from rlinfra.context import Context
from rlinfra.errors import ProfileError, UsageError
from rlinfra.plan import Plan, account_suffix
from rlinfra.profile import Overrides, apply_overrides, load_profile, profile_from_data
from rlinfra.render import render

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden" / "gcp"
UPDATE = os.environ.get("RLINFRA_UPDATE_GOLDEN") == "1"
RLINFRA = str(Path(sys.executable).with_name("rlinfra"))
PROJECT = "rl-test-project"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGoldenKeyGoldenKeyGoldenKeyGoldenKey x"
CIDR = "198.51.100.7/32"
GCP = cloud_for("gcp")


def fixed_context() -> Context:
    return contexts.fixed_context(
        "h100x8-gcp", ssh_public_key=KEY, system_python="/usr/bin/python3.11"
    )


def builtin_data() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((REPO / "profiles" / "h100x8-gcp.yaml").read_text())
    return data


def gcp_profile(**changes: Any) -> dict[str, Any]:
    """The built-in profile's data with a project and an address that may SSH in."""
    data = builtin_data()
    data["project"] = PROJECT
    data["network"]["allowed_cidrs"] = [CIDR]
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return data


def plan_of(data: dict[str, Any], cluster: str | None = None) -> Plan:
    profile = profile_from_data(data, "g.yaml", "h100x8-gcp")
    return make_plan(profile, "g.yaml", cluster)


def choice(plan: Plan, index: int = 0) -> Choice:
    item = plan.choices[index]
    assert isinstance(item, Choice)
    return item


# --- machines and prices (pure) -----------------------------------------------------------------------


def test_builtin_profile_picks_a3_highgpu_and_lists_the_unpriced_mega_last() -> None:
    profile, source = load_profile("h100x8-gcp")
    plan = make_plan(profile, source)
    assert plan.cloud == "gcp" and plan.num_nodes == 2 and plan.gpus_per_node == 8
    assert plan.accelerator == Accelerator("H100", 8)
    assert [c.instance_type for c in plan.choices] == ["a3-highgpu-8g", "a3-megagpu-8g"]
    chosen, mega = choice(plan, 0), choice(plan, 1)
    assert (chosen.region, chosen.zone) == ("us-central1", "us-central1-a")
    assert chosen.hourly == pytest.approx(88.49) and chosen.price_text == "88.490"
    # The catalog does not know A3 Mega's price: ranked last, shown as unknown, not invented.
    assert mega.price is None and math.isnan(mega.hourly) and mega.price_text == "unknown"
    # No project in the built-in profile: the bucket's suffix waits for one.
    assert plan.storage_buckets == ["rlinfra-h100x8-gcp-account"]


def test_candidates_are_ranked_cheapest_first_with_unknown_prices_last() -> None:
    found = choose(
        [Accelerator("A100", 8), Accelerator("A100-80GB", 8), Accelerator("H100", 8)],
        "us-central1",
    )
    assert [c.instance_type for c in found] == [
        "a2-highgpu-8g",
        "a2-ultragpu-8g",
        "a3-highgpu-8g",
        "a3-megagpu-8g",
    ]
    assert [c.price for c in found] == [29.38708, 40.5504, 88.49, None]
    assert found[1].zone == "us-central1-a"  # a2-ultragpu's first zone in the region


def test_a_region_without_prices_ranks_by_name_and_shows_unknown() -> None:
    found = choose([Accelerator("H100", 8)], "us-east4")
    assert [c.instance_type for c in found] == ["a3-highgpu-8g", "a3-megagpu-8g"]
    assert all(c.price is None and c.price_text == "unknown" for c in found)
    assert all(math.isnan(c.hourly) for c in found)
    assert found[0].zone == "us-east4-a"


def test_l4_sizes_by_cpus_and_memory_and_t4_attaches_to_n1() -> None:
    assert choose([Accelerator("L4", 1)], "us-central1")[0].instance_type == "g2-standard-4"
    sized = choose([Accelerator("L4", 1)], "us-central1", cpus=8, memory_gb=32)
    assert [c.instance_type for c in sized] == [
        "g2-standard-8",
        "g2-standard-12",
        "g2-standard-16",
        "g2-standard-32",
    ]
    t4 = choose([Accelerator("T4", 1)], "us-central1")[0]
    assert (t4.instance_type, t4.machine_type) == ("n1-standard-4+t4x1", "n1-standard-4")
    assert t4.guest_accelerator is not None
    assert (t4.guest_accelerator.type, t4.guest_accelerator.count) == ("nvidia-tesla-t4", 1)


def test_spot_ranks_by_on_demand_where_spot_is_unknown_and_says_so() -> None:
    spot = choose([Accelerator("L4", 1)], "us-central1", spot=True)[0]
    assert spot.spot_hourly is None and spot.hourly == pytest.approx(0.7068)
    assert spot.price_text == "0.707 (on-demand; spot unknown)"
    data = parse_catalog(
        {
            "as_of": "x",
            "regions": ["r1-a1"],
            "machine_types": {
                "g2-standard-4": {
                    "machine_type": "g2-standard-4",
                    "accelerator": "L4:1",
                    "gpus": 1,
                    "vcpus": 4,
                    "memory_gib": 16,
                    "zones": {"r1-a1": ["r1-a1-a"]},
                    "prices": {"r1-a1": {"on_demand": 1.0, "spot": 0.3}},
                },
            },
        }
    )
    known = choose([Accelerator("L4", 1)], "r1-a1", spot=True, catalog=data)[0]
    assert known.hourly == 0.3 and known.price_text == "0.300"


def test_zone_and_offered_filters() -> None:
    # a2-ultragpu-8g is in us-central1-a and -c only.
    in_c = choose([Accelerator("A100-80GB", 8)], "us-central1", zone="us-central1-c")
    assert [(c.instance_type, c.zone) for c in in_c] == [("a2-ultragpu-8g", "us-central1-c")]
    with pytest.raises(ValueError, match="is offered in zone us-central1-f"):
        choose([Accelerator("A100-80GB", 8)], "us-central1", zone="us-central1-f")
    offered = choose([Accelerator("H100", 8)], "us-central1", offered={"a3-megagpu-8g"})
    assert [c.instance_type for c in offered] == ["a3-megagpu-8g"]
    with pytest.raises(ValueError, match="is offered in the zone"):
        choose([Accelerator("H100", 8)], "us-central1", offered={"n2-standard-8"})


def test_what_the_catalog_cannot_serve_is_refused_clearly() -> None:
    with pytest.raises(ValueError, match="lists GPU machine types only"):
        choose(None, "us-central1", cpus=8)
    with pytest.raises(
        ValueError, match=r"no GCP machine type in the catalog has accelerators B200:8"
    ):
        choose([Accelerator("B200", 8)], "us-central1")
    with pytest.raises(ValueError, match="not in rlinfra's GCP catalog"):
        choose([Accelerator("H100", 8)], "mars-north1")
    with pytest.raises(ValueError, match=r"is offered in us-east5 \(g2-standard-4"):
        choose([Accelerator("L4", 1)], "us-east5")
    with pytest.raises(ValueError, match="has at least 999 vCPUs"):
        choose([Accelerator("H100", 8)], "us-central1", cpus=999)


def test_catalog_parser_refuses_a_price_without_zones() -> None:
    with pytest.raises(ValueError, match="priced in 'r2-b1', which lists no zone"):
        parse_catalog(
            {
                "as_of": "x",
                "regions": ["r1-a1", "r2-b1"],
                "machine_types": {
                    "g2-standard-4": {
                        "machine_type": "g2-standard-4",
                        "gpus": 0,
                        "vcpus": 4,
                        "memory_gib": 16,
                        "zones": {"r1-a1": ["r1-a1-a"]},
                        "prices": {"r2-b1": {"on_demand": 1.0, "spot": None}},
                    }
                },
            }
        )
    assert load_catalog().get("n1-standard-8").key == "n1-standard-8+t4x1"


def test_instance_type_is_taken_from_the_catalog() -> None:
    plan = plan_of(gcp_profile(resources={"instance_type": "a3-megagpu-8g"}))
    assert [c.instance_type for c in plan.choices] == ["a3-megagpu-8g"]
    with pytest.raises(UsageError, match="has H100:8, not one of L4:1"):
        plan_of(gcp_profile(resources={"instance_type": "a3-highgpu-8g", "accelerators": "L4:1"}))
    with pytest.raises(UsageError, match="'n2-standard-8' is not in rlinfra's GCP catalog"):
        plan_of(gcp_profile(resources={"instance_type": "n2-standard-8"}))


# --- the profile and what GCP refuses (pure) -------------------------------------------------------------


def test_project_is_validated_and_only_for_gcp() -> None:
    with pytest.raises(
        ProfileError, match="project: 'My_Project' is not a Google Cloud project id"
    ):
        profile_from_data({"cloud": "gcp", "project": "My_Project"}, "p.yaml", "p")
    with pytest.raises(ProfileError, match="project is for cloud gcp only"):
        profile_from_data({"cloud": "aws", "project": PROJECT}, "p.yaml", "p")
    # Unset, it stays out of dumps: other clouds' resolved profiles read as before.
    local = profile_from_data({}, "p.yaml", "p")
    assert "project" not in local.model_dump(mode="json")
    assert plan_of(gcp_profile()).profile.model_dump(mode="json")["project"] == PROJECT


@pytest.mark.parametrize(
    ("changes", "cluster", "fragment"),
    [
        ({"resources": {"max_price": 30.0}}, None, "resources.max_price: Spot VMs on Google Cloud"),
        ({"resources": {"disk_type": "gp2"}}, None, "resources.disk_type: 'gp2' is not a GCP"),
        ({"resources": {"disk_gb": 20}}, None, "resources.disk_gb: 20 is below 50 GB"),
        ({"network": {"efa": True}}, None, "network.efa: EFA is AWS's"),
        (
            {"state": {"backend": "s3", "bucket": "tf-state-1"}},
            None,
            "state.backend: s3 is not rendered for gcp",
        ),
        ({"region": "mars-north1"}, None, "region: 'mars-north1' is not in rlinfra's GCP catalog"),
        ({"zone": "us-east4-a"}, None, "zone: 'us-east4-a' is not in region us-central1"),
        ({"resources": {"accelerators": None}}, None, "lists GPU machine types only"),
        ({}, "trailing-", "cluster name 'trailing-' is not a Compute Engine name"),
    ],
)
def test_site_refuses_what_gcp_cannot_do(
    changes: dict[str, Any], cluster: str | None, fragment: str
) -> None:
    with pytest.raises(UsageError) as caught:
        plan_of(gcp_profile(**changes), cluster)
    assert caught.value.message.startswith("g.yaml: ") and fragment in caught.value.message


def test_check_inputs_refusals_before_any_call() -> None:
    no_project = gcp_profile()
    del no_project["project"]
    with pytest.raises(UsageError) as caught:
        GCP.check_inputs(plan_of(no_project))
    assert "project: not set" in caught.value.message
    assert "project: YOUR-PROJECT-ID" in str(caught.value.hint)

    with pytest.raises(UsageError) as caught:
        GCP.check_inputs(plan_of(gcp_profile(network={"allowed_cidrs": []})))
    assert "network.allowed_cidrs: empty" in caught.value.message
    assert "--allow-cidr" in str(caught.value.hint)

    with pytest.raises(UsageError, match="2001:db8::/32 is IPv6"):
        GCP.check_inputs(plan_of(gcp_profile(network={"allowed_cidrs": ["2001:db8::/32"]})))

    with pytest.raises(UsageError, match="must not contain 'google'"):
        GCP.check_inputs(plan_of(gcp_profile(storage=[{"bucket": "my-google-ckpt"}])))

    GCP.check_inputs(plan_of(gcp_profile()))  # the good profile passes


def test_bucket_names_derive_from_the_project_without_asking() -> None:
    plan = plan_of(gcp_profile())
    assert plan.storage_buckets == [f"rlinfra-h100x8-gcp-{account_suffix(PROJECT)}"]
    assert not needs_account(plan.profile)
    # The profile's project wins over an account found elsewhere.
    other = make_plan(plan.profile, "g.yaml", account="someone-else")
    assert other.storage_buckets == plan.storage_buckets
    assert needs_account(profile_from_data(builtin_data(), "g.yaml", "h100x8-gcp"))


# --- Terraform and Ansible variables, the rendered folder ---------------------------------------------------


def test_tfvars_of_a_two_node_h100_cluster() -> None:
    plan = plan_of(gcp_profile(ports=[9090]))
    tfvars = GCP.tfvars(plan, fixed_context())
    bucket = plan.storage_buckets[0]
    labels = {"rlinfra-profile": "h100x8-gcp"}
    common = {"project": PROJECT, "region": "us-central1", "labels": labels}
    assert tfvars == {
        "cluster": {
            **common,
            "zone": "us-central1-a",
            "cluster_name": "h100x8-gcp",
            "node_count": 2,
            "machine_type": "a3-highgpu-8g",
            "guest_accelerator": None,
            "image": None,
            "boot_disk": {"size_gb": 500, "type": None},
            "ssh_public_key": KEY,
            "allowed_cidrs": [CIDR],
            "allow_public": False,
            "service_ports": [9090],
            "service_clients": [],
            "placement_policy": True,
            "spot": False,
            "bucket_name": bucket,
        },
        "storage": {**common, "buckets": [bucket]},
    }


def test_tfvars_of_one_t4_spot_node_without_bucket() -> None:
    data = gcp_profile(
        name="T4 Test.Profile",
        storage=[],
        workload=None,
        resources={
            "accelerators": "T4:1",
            "num_nodes": 1,
            "cpus": None,
            "memory_gb": None,
            "spot": True,
            "disk_type": "pd-ssd",
        },
        network={"subnet": "10.50.0.0/24"},
    )
    plan = plan_of(data, "t4")
    tfvars = GCP.tfvars(plan, fixed_context())
    assert list(tfvars) == ["cluster"]  # no bucket: no storage root
    cluster = tfvars["cluster"]
    assert cluster["machine_type"] == "n1-standard-4"
    assert cluster["guest_accelerator"] == {"type": "nvidia-tesla-t4", "count": 1}
    assert cluster["placement_policy"] is False and cluster["spot"] is True
    assert cluster["boot_disk"] == {"size_gb": 500, "type": "pd-ssd"}
    assert cluster["bucket_name"] is None and cluster["subnet_cidr"] == "10.50.0.0/24"
    assert cluster["labels"] == {"rlinfra-profile": "t4-test-profile"}


def test_the_plan_summary_prices_the_vms_the_tfvars_ask_for() -> None:
    """Profile -> plan -> tfvars -> the VMs gcp_cluster would plan (it passes machine_type and
    guest_accelerator through unchanged) -> the summary auditors read, priced as
    `rlinfra plan --terraform` prices it. Only Terraform's own plan is not run (no Google
    provider here)."""
    from rlinfra.audit import prices_of, summarize

    for resources in (
        {},
        {"accelerators": "T4:1", "num_nodes": 1, "cpus": None, "memory_gb": None},
    ):
        plan = plan_of(gcp_profile(resources=resources))
        cluster = GCP.tfvars(plan, fixed_context())["cluster"]
        guest = cluster["guest_accelerator"]
        shown = {
            "resource_changes": [
                {
                    "address": f"module.cluster.google_compute_instance.this[{rank}]",
                    "type": "google_compute_instance",
                    "change": {
                        "actions": ["create"],
                        "after": {
                            "machine_type": cluster["machine_type"],
                            "guest_accelerator": [guest] if guest else [],
                        },
                    },
                }
                for rank in range(cluster["node_count"])
            ]
        }
        summary = summarize(shown, prices_of(plan.choices))
        chosen = choice(plan)
        assert summary.instances == {chosen.planned_as: cluster["node_count"]}
        assert summary.unpriced == ([] if chosen.price_known else [chosen.planned_as])
        if chosen.price_known:
            assert summary.hourly_usd == pytest.approx(chosen.hourly * cluster["node_count"])


def test_ansible_vars_mount_buckets_with_rclone_on_gcs() -> None:
    plan = plan_of(gcp_profile())
    extra = GCP.ansible_vars(plan, fixed_context())
    assert extra["storage_backend"] == "gcs"
    assert extra["base_extra_packages"] == ["rsync", "rclone", "fuse3"]
    assert extra["ansible_python_interpreter"] == "/usr/bin/python3"


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.is_file(), f"missing golden file {path}; run with RLINFRA_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{name} differs from its golden file"


def test_render_of_the_builtin_gcp_profile_and_golden_files() -> None:
    profile, source = load_profile("h100x8-gcp")
    profile, changes = apply_overrides(profile, Overrides(allowed_cidrs=[CIDR]), source)
    plan = make_plan(profile, "profiles/h100x8-gcp.yaml", overrides=tuple(changes))
    files = render(plan, fixed_context())
    assert files == render(plan, fixed_context())  # byte-identical
    for rel in (
        "terraform/storage/main.tf",
        "terraform/storage/modules/gcp_bucket/main.tf",
        "terraform/cluster/main.tf",
        "terraform/cluster/modules/gcp_network/main.tf",
        "terraform/cluster/modules/gcp_cluster/main.tf",
    ):
        assert rel in files, rel
    assert not any("examples/" in rel or "/aws_" in rel for rel in files)
    assert 'provider "google"' in files["terraform/cluster/main.tf"]
    assert not any(rel.endswith("backend.tf") for rel in files)
    check_golden("cluster.tfvars.json", files["terraform/cluster/terraform.tfvars.json"])
    check_golden("storage.tfvars.json", files["terraform/storage/terraform.tfvars.json"])
    check_golden("vars.yml", files["ansible/vars.yml"])
    check_golden("plan.json", files["plan.json"])
    check_golden("profile.yaml", files["profile.yaml"])


def test_capacity_errors_in_terraform_output_let_up_try_the_next_candidate() -> None:
    stockout = (
        "Error: Error waiting for instance to create: The zone "
        "'projects/p/zones/us-central1-a' does not have enough resources available to fulfill "
        "the request.  '(resource type:compute)'.\n  with module.cluster.google_compute_instance"
        ".this[0]"
    )
    assert GCP.capacity_error(stockout) == "ZONE_RESOURCE_POOL_EXHAUSTED"
    assert (
        GCP.capacity_error("Error code 8, message: ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS")
        == "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"
    )
    quota = (
        "Error: Error creating instance: googleapi: Error 403: Quota 'NVIDIA_H100_GPUS' "
        "exceeded.  Limit: 8.0 in region us-central1., quotaExceeded"
    )
    assert GCP.capacity_error(quota) == "QUOTA_EXCEEDED NVIDIA_H100_GPUS"
    assert GCP.capacity_error("Error 404: The resource 'machineTypes/x' was not found") is None


def test_retrieval_clients_open_only_the_service_port_on_gcp() -> None:
    """`serving.retrieval.clients` reaches gcp_network as one port with its ranges (normalized
    to network addresses), as on AWS; a profile without clients renders none."""
    data = gcp_profile(
        serving={"retrieval": {"port": 8100, "clients": ["10.9.3.4/16", "203.0.113.7/32"]}}
    )
    plan = plan_of(data)
    cluster = GCP.tfvars(plan, fixed_context())["cluster"]
    assert cluster["service_clients"] == [
        {"port": 8100, "cidrs": ["10.9.0.0/16", "203.0.113.7/32"]}
    ]
    # Only the clients' port: SSH and `ports` stay with allowed_cidrs.
    assert cluster["allowed_cidrs"] == [CIDR] and 8100 not in cluster["service_ports"]
    ansible = yaml.safe_load(render(plan, fixed_context())["ansible/vars.yml"])
    assert ansible["retrieval_service_host"] == "0.0.0.0"  # the service listens for them
    assert GCP.tfvars(plan_of(gcp_profile()), fixed_context())["cluster"]["service_clients"] == []


def test_a_bucket_operation_that_cannot_reach_storage_is_an_operation_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlinfra.errors import OperationError

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    with pytest.raises(OperationError) as caught:
        GCP.store(tmp_path).empty_bucket(tmp_path, "some-bucket")
    assert caught.value.exit_code == 1
    assert caught.value.message.startswith("Cloud Storage bucket some-bucket: cannot list bucket")


# --- the inventory --------------------------------------------------------------------------------------------


def test_hosts_from_the_cluster_roots_inventory_output() -> None:
    outputs = {
        "inventory": {
            "value": {
                "cluster_name": "c1",
                "ssh_user": "ubuntu",
                "nodes": [
                    {
                        "name": f"c1-{rank}",
                        "rank": rank,
                        "ssh_host": ip or private,
                        "private_ip": private,
                        "public_ip": ip,
                        "interface": "",
                        "instance_id": str(1000 + rank),
                        "instance_type": "https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-a/machineTypes/a3-highgpu-8g",
                        "zone": "us-central1-a",
                    }
                    for rank, (ip, private) in enumerate(
                        [("34.1.2.3", "10.42.0.2"), (None, "10.42.0.3")]
                    )
                ],
            }
        }
    }
    hosts = GCP.hosts_from_outputs(outputs)
    assert [(h.name, h.rank, h.ssh_host, h.private_ip, h.interface, h.ssh_user) for h in hosts] == [
        ("c1-0", 0, "34.1.2.3", "10.42.0.2", "", "ubuntu"),
        ("c1-1", 1, "10.42.0.3", "10.42.0.3", "", "ubuntu"),
    ]


def test_rlinfra_help_and_the_gcp_module_import_no_google_library() -> None:
    code = (
        "import sys\n"
        "import rlinfra.clouds.gcp.cloud, rlinfra.clouds.gcp.preflight, rlinfra.clouds.gcp.catalog\n"
        "from rlinfra import cli\n"
        "sys.argv = ['rlinfra', '--help']\n"
        "try:\n    cli.main()\nexcept SystemExit:\n    pass\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('google', 'requests')))\n"
        "print('LOADED', loaded, file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "LOADED []" in done.stderr, done.stderr


# --- the preflight, against a local server in the Google APIs' JSON shapes --------------------------------------


def service_account_key(token_uri: str) -> dict[str, str]:
    """A service account key file of a made-up account, with a fresh RSA key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    return {
        "type": "service_account",
        "project_id": "adc-project",
        "private_key_id": "0123456789abcdef",
        "private_key": pem,
        "client_email": "rlinfra-test@adc-project.iam.gserviceaccount.com",
        "client_id": "1234567890",
        "token_uri": token_uri,
    }


TOKEN = "ya29.local-test-token"


class LocalGoogleApi:
    """A local HTTP server that answers as Google's APIs do, in their documented JSON shapes:
    the OAuth token endpoint (JWT bearer grant), Compute Engine v1 regions.get (quotas),
    machineTypes.get and acceleratorTypes.get, and Cloud Storage buckets.get. What the project
    has is set per test; every request is recorded."""

    def __init__(self) -> None:
        self.quotas: dict[str, float | tuple[float, float]] = {
            "CPUS": 2400.0,
            "NVIDIA_H100_GPUS": 16.0,
            "PREEMPTIBLE_NVIDIA_H100_GPUS": 64.0,
            "NVIDIA_T4_GPUS": 4.0,
        }
        self.regions = {"us-central1"}
        self.machine_types = {
            ("us-central1-a", "a3-highgpu-8g"),
            ("us-central1-b", "a3-highgpu-8g"),
            ("us-central1-a", "n1-standard-4"),
        }
        self.accelerator_types = {("us-central1-a", "nvidia-tesla-t4")}
        self.buckets: dict[str, int] = {}  # name -> status of buckets.get
        self.requests: list[tuple[str, str, str]] = []  # method, path, Authorization
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                form = parse_qs(self.rfile.read(length).decode())
                api.requests.append(("POST", self.path, self.headers.get("Authorization", "")))
                if self.path == "/token" and form.get("grant_type") == [
                    "urn:ietf:params:oauth:grant-type:jwt-bearer"
                ]:
                    claims = json.loads(
                        base64.urlsafe_b64decode(form["assertion"][0].split(".")[1] + "==")
                    )
                    assert "cloud-platform" in claims["scope"], claims
                    self.answer(
                        200, {"access_token": TOKEN, "expires_in": 3599, "token_type": "Bearer"}
                    )
                else:
                    self.answer(400, {"error": "invalid_grant"})

            def do_GET(self) -> None:
                path = urlparse(self.path).path
                api.requests.append(("GET", path, self.headers.get("Authorization", "")))
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    self.answer(401, error(401, "Request had invalid authentication credentials."))
                    return
                parts = path.strip("/").split("/")
                if parts[:3] == ["compute", "v1", "projects"] and parts[3] != PROJECT:
                    self.answer(
                        404, error(404, f"The resource 'projects/{parts[3]}' was not found")
                    )
                elif parts[:3] == ["compute", "v1", "projects"] and parts[4] == "regions":
                    self.region(parts[5])
                elif parts[:3] == ["compute", "v1", "projects"] and parts[6] == "machineTypes":
                    self.zonal(parts[5], parts[7], api.machine_types, "machineTypes")
                elif parts[:3] == ["compute", "v1", "projects"] and parts[6] == "acceleratorTypes":
                    self.zonal(parts[5], parts[7], api.accelerator_types, "acceleratorTypes")
                elif parts[:3] == ["storage", "v1", "b"]:
                    status = api.buckets.get(parts[3], 404)
                    body = (
                        {"kind": "storage#bucket", "name": parts[3], "location": "US-CENTRAL1"}
                        if status == 200
                        else error(status, "The specified bucket does not exist.")
                    )
                    self.answer(status, body)
                else:
                    self.answer(404, error(404, "Not Found"))

            def region(self, name: str) -> None:
                if name not in api.regions:
                    self.answer(
                        404,
                        error(
                            404, f"The resource 'projects/{PROJECT}/regions/{name}' was not found"
                        ),
                    )
                    return
                quotas = []
                for metric, value in api.quotas.items():
                    limit, usage = value if isinstance(value, tuple) else (value, 0.0)
                    quotas.append({"metric": metric, "limit": limit, "usage": usage})
                self.answer(
                    200,
                    {
                        "kind": "compute#region",
                        "name": name,
                        "status": "UP",
                        "zones": [
                            f"https://www.googleapis.com/compute/v1/projects/{PROJECT}/zones/{name}-{z}"
                            for z in "abcf"
                        ],
                        "quotas": quotas,
                    },
                )

            def zonal(self, zone: str, name: str, offered: set[tuple[str, str]], kind: str) -> None:
                if (zone, name) not in offered:
                    self.answer(
                        404,
                        error(
                            404,
                            f"The resource 'projects/{PROJECT}/zones/{zone}/{kind}/{name}' was not found",
                        ),
                    )
                    return
                self.answer(
                    200,
                    {
                        "kind": f"compute#{kind[:-1]}",
                        "name": name,
                        "zone": zone,
                        "selfLink": f"https://www.googleapis.com/compute/v1/projects/{PROJECT}/zones/{zone}/{kind}/{name}",
                    },
                )

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)

    def api_calls(self) -> list[tuple[str, str]]:
        return [(m, p) for m, p, _ in self.requests if p != "/token"]


def error(code: int, message: str) -> dict[str, Any]:
    """A Google API error answer."""
    reason = {401: "authError", 403: "forbidden", 404: "notFound"}.get(code, "invalid")
    return {
        "error": {
            "code": code,
            "message": message,
            "errors": [{"message": message, "domain": "global", "reason": reason}],
        }
    }


@pytest.fixture
def google_api(tmp_path: Path) -> Iterator[LocalGoogleApi]:
    api = LocalGoogleApi()
    yield api
    api.close()


def isolated_env(tmp_path: Path, api: LocalGoogleApi, credentials: bool = True) -> dict[str, str]:
    """The environment of an rlinfra run: no Google or cloud settings of this machine, the
    APIs on the local server, a key file (or none), a HOME without gcloud files."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GOOGLE_", "CLOUDSDK_", "GCE_", "AWS_", "RLINFRA_"))
        and k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")
        and k != "STORAGE_EMULATOR_HOST"
    }
    home = tmp_path / "user-home"
    home.mkdir(exist_ok=True)
    env.update(
        HOME=str(home),
        NO_PROXY="127.0.0.1,localhost",
        RLINFRA_HOME=str(tmp_path / "rlinfra-home"),
        RLINFRA_GCP_API_ENDPOINT=api.url,
        AWS_EC2_METADATA_DISABLED="true",
    )
    if credentials:
        key = tmp_path / "key.json"
        key.write_text(json.dumps(service_account_key(f"{api.url}/token")))
        key.chmod(0o600)
        env["GOOGLE_APPLICATION_CREDENTIALS"] = str(key)
    return env


def use_env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    for name in list(os.environ):
        if name not in env:
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def test_local_api_preflight_passes_with_the_token_on_every_call(
    tmp_path: Path,
    google_api: LocalGoogleApi,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    use_env(monkeypatch, isolated_env(tmp_path, google_api))
    plan = plan_of(gcp_profile())
    GCP.preflight(plan)
    bucket = plan.storage_buckets[0]
    assert google_api.requests[0][:2] == ("POST", "/token")  # the key's JWT, exchanged
    assert google_api.api_calls() == [
        ("GET", f"/compute/v1/projects/{PROJECT}/regions/us-central1"),
        ("GET", f"/compute/v1/projects/{PROJECT}/zones/us-central1-a/machineTypes/a3-highgpu-8g"),
        ("GET", f"/storage/v1/b/{bucket}"),
    ]
    assert all(
        auth == f"Bearer {TOKEN}" for _, path, auth in google_api.requests if path != "/token"
    )
    assert "Warning" not in capsys.readouterr().err


def test_local_api_preflight_warnings_and_spot_and_n1(
    tmp_path: Path,
    google_api: LocalGoogleApi,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    use_env(monkeypatch, isolated_env(tmp_path, google_api))
    monkeypatch.delenv("RLINFRA_QUIET", raising=False)
    # 16 H100s allowed, 8 in use: maybe this cluster's own (a re-run), so a warning only.
    google_api.quotas["NVIDIA_H100_GPUS"] = (16.0, 8.0)
    GCP.preflight(plan_of(gcp_profile()))
    err = " ".join(capsys.readouterr().err.split())
    assert "GPU quota NVIDIA_H100_GPUS in us-central1: 8 of 16 in use, 16 needed" in err
    # Spot counts against the PREEMPTIBLE_ quota; a metric the region does not list warns.
    GCP.preflight(plan_of(gcp_profile(resources={"spot": True})))
    assert "Warning" not in capsys.readouterr().err
    del google_api.quotas["PREEMPTIBLE_NVIDIA_H100_GPUS"]
    GCP.preflight(plan_of(gcp_profile(resources={"spot": True})))
    err = " ".join(capsys.readouterr().err.split())
    assert "lists no quota PREEMPTIBLE_NVIDIA_H100_GPUS" in err
    # An N1 machine type: its attached GPU type is looked up in the zone too.
    google_api.requests.clear()
    t4 = gcp_profile(
        storage=[],
        workload=None,
        resources={"accelerators": "T4:1", "cpus": None, "memory_gb": None},
    )
    GCP.preflight(plan_of(t4, "t4"))
    assert google_api.api_calls()[-1] == (
        "GET",
        f"/compute/v1/projects/{PROJECT}/zones/us-central1-a/acceleratorTypes/nvidia-tesla-t4",
    )
    google_api.accelerator_types.clear()
    with pytest.raises(
        UsageError, match="zone us-central1-a does not offer GPU type nvidia-tesla-t4"
    ):
        GCP.preflight(plan_of(t4, "t4"))


@pytest.mark.parametrize(
    ("case", "fragment"),
    [
        ("project", "project 'rl-other-project' was not found"),
        ("region", "region 'us-central1' does not exist in Compute Engine"),
        ("bucket", "already exists and belongs to another project"),
        ("spot_quota", "GPU quota PREEMPTIBLE_NVIDIA_H100_GPUS in us-central1 is 8"),
    ],
)
def test_local_api_preflight_refusals(
    tmp_path: Path,
    google_api: LocalGoogleApi,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    fragment: str,
) -> None:
    use_env(monkeypatch, isolated_env(tmp_path, google_api))
    data = gcp_profile()
    if case == "project":
        data["project"] = "rl-other-project"
    elif case == "region":
        google_api.regions.clear()
    elif case == "bucket":
        data["storage"] = [{"bucket": "someone-elses-bucket"}]
        google_api.buckets["someone-elses-bucket"] = 403
    else:
        data["resources"]["spot"] = True
        google_api.quotas["PREEMPTIBLE_NVIDIA_H100_GPUS"] = 8.0
    with pytest.raises(UsageError) as caught:
        GCP.preflight(plan_of(data))
    assert fragment in caught.value.message


def test_local_api_account_id_is_the_credentials_project_only_when_configured(
    tmp_path: Path, google_api: LocalGoogleApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = isolated_env(tmp_path, google_api, credentials=False)
    use_env(monkeypatch, env)
    assert GCP.account_id(os.environ, required=False) is None
    with pytest.raises(UsageError, match="no Google Cloud credentials found"):
        GCP.account_id(os.environ, required=True)
    use_env(monkeypatch, isolated_env(tmp_path, google_api))
    assert GCP.account_id(os.environ, required=False) == "adc-project"
    assert google_api.requests == []  # read from the key file: no call


def sentinel_terraform(tmp_path: Path) -> tuple[Path, Path]:
    """A `terraform` that records that it ran (it must not, when the preflight refuses)."""
    marker = tmp_path / "terraform-ran"
    script = tmp_path / "terraform"
    script.write_text(f'#!/bin/sh\necho "$@" >> {marker}\nexit 97\n')
    script.chmod(0o755)
    return script, marker


@pytest.mark.parametrize(
    ("case", "fragments"),
    [
        (
            "zone",
            [
                "zone us-central1-a does not offer machine type a3-highgpu-8g",
                "Zones that offer it by rlinfra's catalog: us-central1-b, us-central1-c",
            ],
        ),
        (
            "quota",
            [
                "GPU quota NVIDIA_H100_GPUS in us-central1 is 8, but 2 x a3-highgpu-8g need 16 GPUs",
                "Request an increase to at least 16",
            ],
        ),
        (
            "credentials",
            ["no Google Cloud credentials found", "gcloud auth application-default login"],
        ),
    ],
)
def test_local_api_up_refuses_in_the_preflight_with_exit_2_and_creates_nothing(
    tmp_path: Path, google_api: LocalGoogleApi, case: str, fragments: list[str]
) -> None:
    env = isolated_env(tmp_path, google_api, credentials=case != "credentials")
    terraform, marker = sentinel_terraform(tmp_path)
    env["RLINFRA_TERRAFORM"] = str(terraform)
    if case == "zone":
        google_api.machine_types.discard(("us-central1-a", "a3-highgpu-8g"))
    elif case == "quota":
        google_api.quotas["NVIDIA_H100_GPUS"] = 8.0
    profile = tmp_path / "gcp-h100.yaml"
    data = gcp_profile()
    data["network"]["allowed_cidrs"] = []
    profile.write_text(yaml.safe_dump(data))
    argv = [RLINFRA, "up", "-p", str(profile), "--allow-cidr", CIDR, "--yes"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, done.stderr
    text = " ".join(done.stderr.split())
    for fragment in fragments:
        assert fragment in text, (fragment, done.stderr)
    assert "Traceback" not in done.stderr
    assert not marker.exists(), "terraform ran"
    home = tmp_path / "rlinfra-home"
    assert not home.exists() or not any(home.rglob("*")), sorted(home.rglob("*"))
    if case == "credentials":
        assert google_api.requests == []  # nothing asked of the network without credentials
    else:
        assert google_api.api_calls()[0] == (
            "GET",
            f"/compute/v1/projects/{PROJECT}/regions/us-central1",
        )


# --- bucket operations against gcp-storage-emulator -----------------------------------------------------------


def test_bucket_operations_against_gcp_storage_emulator(
    storage_emulator: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import requests

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", storage_emulator)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    bucket = "rlinfra-ckpt-test"
    made = requests.post(
        f"{storage_emulator}/storage/v1/b", params={"project": PROJECT}, json={"name": bucket}
    )
    assert made.status_code == 200, made.text
    names = ["a.txt", "checkpoints/global_step_2/actor/model 0.pt", "odd%name?.json"]
    for name in names:
        put = requests.post(
            f"{storage_emulator}/upload/storage/v1/b/{bucket}/o",
            params={"uploadType": "media", "name": name},
            data=b"checkpoint bytes",
        )
        assert put.status_code == 200, put.text
    store = GCP.store(tmp_path)
    assert store.kind == "Cloud Storage bucket"
    assert store.bucket_versions(tmp_path, bucket) == 3
    assert store.empty_bucket(tmp_path, bucket) == 3
    assert store.bucket_versions(tmp_path, bucket) == 0
    # Empty now: the storage root's destroy would succeed (the emulator refuses a full one).
    assert requests.delete(f"{storage_emulator}/storage/v1/b/{bucket}").status_code in (200, 204)
    assert store.bucket_versions(tmp_path, bucket) == 0  # gone
    assert store.empty_bucket(tmp_path, bucket) == 0
