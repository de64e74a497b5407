"""A3 High with 1, 2 or 4 H100s (a3-highgpu-1g/2g/4g): Compute Engine sells them as Spot and
Flex-start only, so a Spot profile gets them and an on-demand one is told why it does not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from rlinfra.accelerators import Accelerator
from rlinfra.clouds.gcp.catalog import Choice, choose, load_catalog, parse_catalog
from rlinfra.clouds.registry import cloud_for
from rlinfra.errors import UsageError
from rlinfra.profile import profile_from_data

REPO = Path(__file__).resolve().parents[2]
GCP = cloud_for("gcp")


def one_h100(spot: bool, **resources: Any) -> dict[str, Any]:
    """The built-in GCP profile, on one H100 per node."""
    data: dict[str, Any] = yaml.safe_load((REPO / "profiles" / "h100x8-gcp.yaml").read_text())
    data["project"] = "rl-test-project"
    data["resources"].update(
        {"accelerators": "H100:1", "num_nodes": 1, "cpus": None, "memory_gb": None, "spot": spot}
    )
    data["resources"].update(resources)
    return data


def site_of(data: dict[str, Any]) -> list[Choice]:
    profile = profile_from_data(data, "g.yaml", "g")
    site = GCP.site(profile, "g.yaml", "g", None)
    choices = [c for c in site.choices if isinstance(c, Choice)]
    assert len(choices) == len(site.choices)
    return choices


def test_a_spot_single_h100_profile_gets_a3_highgpu_1g() -> None:
    (chosen,) = site_of(one_h100(spot=True))
    assert (chosen.instance_type, chosen.machine_type) == ("a3-highgpu-1g", "a3-highgpu-1g")
    assert chosen.accelerator == Accelerator("H100", 1) and chosen.spot
    assert (chosen.region, chosen.zone) == ("us-central1", "us-central1-a")
    # The catalog records no Spot price (it moves daily): unknown, never made up.
    assert chosen.price is None and chosen.price_text == "unknown"


def test_an_on_demand_single_h100_profile_does_not_and_is_told_why() -> None:
    with pytest.raises(UsageError) as caught:
        site_of(one_h100(spot=False))
    message = caught.value.message
    assert message.startswith(
        "g.yaml: resources: no GCP machine type for accelerators H100:1 is sold on demand in "
        "us-central1 (a3-highgpu-1g is sold as Spot or Flex-start only)"
    ), message
    assert message.endswith("set resources.spot: true to use it"), message
    # Naming the type does not get around it either.
    with pytest.raises(UsageError, match="a3-highgpu-1g is sold as Spot or Flex-start only"):
        site_of(one_h100(spot=False, instance_type="a3-highgpu-1g"))
    (named,) = site_of(one_h100(spot=True, instance_type="a3-highgpu-1g"))
    assert named.instance_type == "a3-highgpu-1g"


def test_on_demand_candidates_keep_the_types_sold_on_demand() -> None:
    # A100:1 or H100:1 on demand: the A2 type stays, the Spot-only A3 type is left out.
    both = [Accelerator("A100", 1), Accelerator("H100", 1)]
    assert [c.instance_type for c in choose(both, "us-central1")] == ["a2-highgpu-1g"]
    spot = [c.instance_type for c in choose(both, "us-central1", spot=True)]
    assert spot == ["a2-highgpu-1g", "a3-highgpu-1g"]  # priced first, the unpriced last
    for count in (2, 4):
        (found,) = choose([Accelerator("H100", count)], "us-east4", spot=True)
        assert found.instance_type == f"a3-highgpu-{count}g" and found.zone == "us-east4-a"
        with pytest.raises(ValueError, match=f"a3-highgpu-{count}g is sold as Spot or Flex-start"):
            choose([Accelerator("H100", count)], "us-east4")


def test_the_catalog_lists_the_small_a3_types_as_spot_and_flex_start_only() -> None:
    catalog = load_catalog()
    for count, vcpus, memory in ((1, 26, 234), (2, 52, 468), (4, 104, 936)):
        entry = catalog.get(f"a3-highgpu-{count}g")
        assert entry.provisioning_models == ("SPOT", "FLEX_START")
        assert (entry.gpus, entry.vcpus, entry.memory_gib) == (count, vcpus, memory)
        assert entry.zones == catalog.get("a3-highgpu-8g").zones
        assert all(p.on_demand is None and p.spot is None for p in entry.prices.values())
    assert catalog.get("a3-highgpu-8g").provisioning_models == ("STANDARD", "SPOT")
    assert any("006059e" in s and "skypilot-catalog" in s for s in catalog.sources)
    with pytest.raises(ValueError, match=r"provisioning_models \['RESERVED'\]"):
        parse_catalog(
            {
                "as_of": "x",
                "regions": ["r1-a1"],
                "machine_types": {
                    "a3-highgpu-1g": {
                        "machine_type": "a3-highgpu-1g",
                        "accelerator": "H100:1",
                        "gpus": 1,
                        "vcpus": 26,
                        "memory_gib": 234,
                        "provisioning_models": ["RESERVED"],
                        "zones": {"r1-a1": ["r1-a1-a"]},
                        "prices": {"r1-a1": {"on_demand": None, "spot": None}},
                    }
                },
            }
        )
