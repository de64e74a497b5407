"""``rlinfra.audit``: the plan summary auditors read, for both clouds' resources.

AWS plans are summarised from real `terraform plan` runs against the emulator in
tests/terraform/test_aws_driver.py. No Google provider exists on this machine, so GCP plans are
built here in `terraform show -json`'s shape (``resource_changes``, ``change.actions``,
``change.after``) from the values the GCP cluster root gets: its tfvars, rendered from a profile,
which gcp_cluster passes unchanged to ``machine_type`` and ``guest_accelerator`` and gcp_network
to each firewall rule.
"""

from __future__ import annotations

from typing import Any

import pytest

from rlinfra.audit import instance_key, prices_of, render_text, summarize
from rlinfra.clouds.gcp.catalog import choice_for, load_catalog, zone_for


def change(address: str, kind: str, after: dict[str, Any], *actions: str) -> dict[str, Any]:
    return {
        "address": address,
        "type": kind,
        "change": {"actions": list(actions) or ["create"], "after": after},
    }


def vm(rank: int, machine_type: str, guest: dict[str, Any] | None) -> dict[str, Any]:
    return change(
        f"module.cluster.google_compute_instance.this[{rank}]",
        "google_compute_instance",
        {
            "machine_type": machine_type,
            "guest_accelerator": [guest] if guest else [],
            "name": f"c-{rank}",
        },
    )


def firewall(name: str, ranges: list[str], ports: list[str], **extra: Any) -> dict[str, Any]:
    return change(
        f"module.network.google_compute_firewall.{name}",
        "google_compute_firewall",
        {
            "direction": "INGRESS",
            "source_ranges": ranges,
            "allow": [{"protocol": "tcp", "ports": ports}],
            **extra,
        },
    )


@pytest.mark.parametrize(
    "key",
    ["a3-highgpu-8g", "n1-standard-8+t4x1", "g2-standard-8"],
)
def test_each_gcp_machine_in_a_plan_is_counted_and_priced(key: str) -> None:
    entry = load_catalog().get(key)
    guest = entry.guest_accelerator
    tfvars_guest = {"type": guest.type, "count": guest.count} if guest else None
    plan = {
        "resource_changes": [
            vm(0, entry.machine_type, tfvars_guest),
            vm(1, entry.machine_type, tfvars_guest),
            firewall("internal", [], []),
            change("module.bucket.google_storage_bucket.this", "google_storage_bucket", {}),
        ]
    }
    zone = zone_for(entry, "us-central1", None)
    assert zone is not None
    choice = choice_for(entry, "us-central1", zone, spot=False)
    assert choice.price_known, key
    summary = summarize(plan, prices_of([choice]))
    name = choice.planned_as
    assert summary.instances == {name: 2}
    assert summary.hourly_usd == pytest.approx(2 * choice.hourly)
    assert summary.unpriced == []
    assert summary.create["google_compute_instance"] == 2
    if guest:
        assert name == f"{entry.machine_type}+{guest.type}x{guest.count}"
    else:
        assert name == entry.machine_type
    text = render_text(summary)
    assert f"  instances: 2 x {name}" in text
    assert f"  estimated cost: ${2 * choice.hourly:,.2f} per hour (catalog prices)" in text


def test_a_full_machine_type_url_names_the_same_machine() -> None:
    url = "https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-a/machineTypes/a2-highgpu-1g"
    assert instance_key(url) == "a2-highgpu-1g"
    assert (
        instance_key("n1-standard-4", [("nvidia-tesla-t4", 2)]) == "n1-standard-4+nvidia-tesla-t4x2"
    )
    assert instance_key("n1-standard-4", [("nvidia-tesla-t4", 0)]) == "n1-standard-4"


def test_an_unpriced_gcp_machine_is_listed_as_such() -> None:
    summary = summarize({"resource_changes": [vm(0, "a3-megagpu-8g", None)]}, {})
    assert summary.unpriced == ["a3-megagpu-8g"]
    assert "  ! no catalog price for a3-megagpu-8g" in render_text(summary)


def test_a_firewall_open_to_the_world_is_called_out() -> None:
    plan = {
        "resource_changes": [
            firewall("external[0]", ["0.0.0.0/0"], ["22", "8265"]),
            firewall('clients["8000"]', ["203.0.113.0/28"], ["8000"]),
            firewall("egress", ["0.0.0.0/0"], ["443"], direction="EGRESS"),
            firewall("off", ["0.0.0.0/0"], ["22"], disabled=True),
            change(
                "module.network.google_compute_firewall.all",
                "google_compute_firewall",
                {"source_ranges": ["::/0"], "allow": [{"protocol": "all"}]},
            ),
        ]
    }
    summary = summarize(plan)
    assert summary.exposed == [
        "module.network.google_compute_firewall.external[0]: tcp 22,8265 open to the internet",
        "module.network.google_compute_firewall.all: all (every port) open to the internet",
    ]
    assert (
        "  ! EXPOSED: module.network.google_compute_firewall.external[0]: tcp 22,8265 open to "
        "the internet"
    ) in render_text(summary)


def test_a_replaced_vm_and_a_destroyed_bucket_are_destructive() -> None:
    plan = {
        "resource_changes": [
            change(
                "module.cluster.google_compute_instance.this[0]",
                "google_compute_instance",
                {"machine_type": "g2-standard-8", "guest_accelerator": []},
                "delete",
                "create",
            ),
            change(
                "module.bucket.google_storage_bucket.this",
                "google_storage_bucket",
                {},
                "delete",
            ),
        ]
    }
    summary = summarize(plan)
    assert summary.replace["google_compute_instance"] == 1
    assert summary.instances == {"g2-standard-8": 1}
    assert summary.destructive == [
        "module.cluster.google_compute_instance.this[0] is replaced",
        "module.bucket.google_storage_bucket.this is destroyed (data in it is lost)",
    ]
