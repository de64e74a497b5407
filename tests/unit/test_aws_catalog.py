"""The AWS instance catalog and the choice of an instance type (pure: no AWS, no files written)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from helpers.paths import REPO
from rlinfra.accelerators import parse_accelerator
from rlinfra.clouds.aws.catalog import CATALOG_PATH, choose, load_catalog, parse_catalog


def specs(*names: str) -> list[Any]:
    return [parse_accelerator(name) for name in names]


# --- the data -----------------------------------------------------------------------------------


def test_catalog_is_dated_sourced_and_covers_the_regions() -> None:
    catalog = load_catalog()
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", catalog.as_of)
    assert any("aws.amazon.com/ec2/pricing/on-demand" in s for s in catalog.sources)
    assert any("spot" in note and "approximate" in note for note in catalog.notes)
    assert {"us-east-1", "us-west-2", "eu-west-1"} <= set(catalog.regions)
    for region in ("us-east-1", "us-west-2", "eu-west-1"):
        assert any(region in t.prices for t in catalog.instance_types.values()), region


@pytest.mark.parametrize(
    ("spec", "types"),
    [
        ("H100:1", {"p5.4xlarge"}),
        ("H100:8", {"p5.48xlarge"}),
        ("H200:8", {"p5e.48xlarge", "p5en.48xlarge"}),
        ("A100:8", {"p4d.24xlarge"}),
        ("A100-80GB:8", {"p4de.24xlarge"}),
        ("L40S:1", {"g6e.xlarge"}),
        ("L40S:4", {"g6e.12xlarge"}),
        ("L40S:8", {"g6e.48xlarge"}),
        ("L4:1", {"g6.xlarge"}),
        ("L4:4", {"g6.12xlarge"}),
        ("L4:8", {"g6.48xlarge"}),
        ("A10G:1", {"g5.xlarge"}),
        ("A10G:4", {"g5.12xlarge"}),
        ("A10G:8", {"g5.48xlarge"}),
    ],
)
def test_accelerator_specs_map_to_instance_types(spec: str, types: set[str]) -> None:
    found = load_catalog().for_accelerator(parse_accelerator(spec))
    assert {t.name for t in found} == types
    assert all(t.gpus == parse_accelerator(spec).count for t in found)


def test_every_entry_is_complete_and_plausible() -> None:
    catalog = load_catalog()
    for t in catalog.instance_types.values():
        assert t.vcpus > 0 and t.memory_gib > 0, t.name
        assert t.prices, t.name
        for region, price in t.prices.items():
            assert region in catalog.regions
            assert price.on_demand > 0, (t.name, region)
            assert price.spot is not None and 0 < price.spot < price.on_demand, (t.name, region)
        if t.gpus:
            assert t.gpu and t.accelerator is not None, t.name


def test_efa_flags_match_the_cluster_module() -> None:
    """The module's validation list and the catalog agree on EFA support."""
    main_tf = (REPO / "terraform" / "modules" / "aws_cluster" / "main.tf").read_text()
    block = main_tf.split("efa_instance_types = [", 1)[1].split("]", 1)[0]
    module_types = set(re.findall(r'"([a-z0-9]+\.[a-z0-9]+)"', block))
    for t in load_catalog().instance_types.values():
        assert t.efa == (t.name in module_types), t.name


def test_cpu_types_include_a_large_memory_size() -> None:
    cpu = load_catalog().cpu_types()
    assert {t.name.split(".")[0] for t in cpu} == {"m7i", "c7i", "r7i"}
    assert any(t.vcpus >= 32 and t.memory_gib >= 256 for t in cpu)
    assert load_catalog().get("r7i.8xlarge").memory_gib == 256


def test_malformed_catalog_is_refused() -> None:
    data = yaml.safe_load(CATALOG_PATH.read_text())
    data["instance_types"]["p5.48xlarge"]["gpus"] = 4
    with pytest.raises(ValueError, match="p5.48xlarge: accelerator H100:8 but gpus = 4"):
        parse_catalog(data)
    data = yaml.safe_load(CATALOG_PATH.read_text())
    data["instance_types"]["g5.xlarge"]["prices"]["ap-south-9"] = {"on_demand": 1.0}
    with pytest.raises(ValueError, match="unlisted region 'ap-south-9'"):
        parse_catalog(data)


# --- choose ---------------------------------------------------------------------------------------


def test_cheapest_candidate_wins_and_the_rest_follow_by_price() -> None:
    choices = choose(specs("H100:8", "A100-80GB:8", "A100:8"), "us-east-1")
    assert [c.instance_type for c in choices] == ["p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge"]
    prices = [c.hourly for c in choices]
    assert prices == sorted(prices)
    assert choices[0].accelerator == parse_accelerator("A100:8")
    assert choices[0].region == "us-east-1"
    assert (
        choices[0].on_demand_hourly
        == load_catalog().get("p4d.24xlarge").prices["us-east-1"].on_demand
    )


def test_offered_filter_applies() -> None:
    # The zone offers no p4d: the next cheapest offered candidate wins.
    choices = choose(
        specs("H100:8", "A100-80GB:8", "A100:8"),
        "us-east-1",
        offered={"p5.48xlarge", "p4de.24xlarge", "g5.xlarge"},
    )
    assert [c.instance_type for c in choices] == ["p4de.24xlarge", "p5.48xlarge"]


def test_nothing_offered_is_an_error_naming_the_candidates() -> None:
    with pytest.raises(ValueError, match=r"offered in the zone: .*p5\.48xlarge"):
        choose(specs("H100:8"), "us-east-1", offered={"g5.xlarge"})


def test_region_decides_what_is_available() -> None:
    # No P5 is sold in eu-west-1; the A100 candidate is.
    choices = choose(specs("H100:8", "A100:8"), "eu-west-1")
    assert [c.instance_type for c in choices] == ["p4d.24xlarge"]
    with pytest.raises(ValueError, match=r"H100:8 is sold in eu-west-1 .*priced in: us-east-1"):
        choose(specs("H100:8"), "eu-west-1")


def test_spot_ranks_by_spot_price() -> None:
    choices = choose(specs("H200:8"), "us-west-2", spot=True)
    assert [c.instance_type for c in choices] == ["p5en.48xlarge", "p5e.48xlarge"]
    assert choices[0].hourly == choices[0].spot_hourly


def test_cpu_only_request_picks_the_cheapest_type_that_fits() -> None:
    choices = choose(None, "us-east-1", cpus=32, memory_gb=256)
    assert choices[0].instance_type == "r7i.8xlarge"
    assert all(c.vcpus >= 32 and c.memory_gib >= 256 and c.gpus == 0 for c in choices)
    assert choose([], "us-east-1", cpus=8)[0].instance_type == "c7i.2xlarge"
    assert choose(None, "us-east-1", memory_gb=64)[0].instance_type == "r7i.2xlarge"
    assert choose(None, "us-east-1")[0].instance_type == "c7i.large"


def test_gpu_candidates_also_meet_cpu_and_memory_minimums() -> None:
    choices = choose(specs("L4:1", "L40S:1"), "us-east-1", memory_gb=32)
    assert [c.instance_type for c in choices] == ["g6e.xlarge"]


def test_too_big_a_request_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"CPU-only node has at least 1000 vCPUs"):
        choose(None, "us-east-1", cpus=1000)


def test_unknown_region_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"region 'mars-east-1' is not in rlinfra's AWS catalog"):
        choose(specs("H100:8"), "mars-east-1")


def test_accelerator_the_catalog_lacks_is_an_error() -> None:
    with pytest.raises(
        ValueError, match=r"no AWS instance type in the catalog has accelerators B200:8"
    ):
        choose(specs("B200:8"), "us-east-1")


def test_unknown_instance_type_lookup_is_an_error() -> None:
    with pytest.raises(ValueError, match="'x9.huge' is not in rlinfra's AWS catalog"):
        load_catalog().get("x9.huge")
