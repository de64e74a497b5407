"""The AWS instance catalog (``clouds/aws/catalog.yaml``) and the choice of an instance type.

Pure: reads the packaged YAML once and answers questions about it (``clouds/catalog.py`` holds
what every cloud's catalog shares). ``choose`` turns a profile's accelerator candidates (or, for
CPU nodes, its cpus/memory) into the matching instance types in a region, cheapest first; the
first is the one rlinfra launches. Which types the zone really offers is asked of AWS by the
preflight and passed in as ``offered``. Every instance type has an on-demand price in each region
that sells it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from rlinfra.accelerators import Accelerator
from rlinfra.clouds import catalog as common

CATALOG_PATH = Path(__file__).resolve().parent / "catalog.yaml"


@dataclass(frozen=True, kw_only=True)
class InstanceType(common.Entry):
    """One instance type (its key is its name), sold where it is priced."""

    efa: bool

    @property
    def name(self) -> str:
        """``p5.48xlarge``: the instance type, the catalog's key."""
        return self.key

    @property
    def family(self) -> str:
        """``p5`` for ``p5.48xlarge``."""
        return self.name.split(".", 1)[0]


@dataclass(frozen=True)
class Catalog(common.Catalog[InstanceType]):
    WORDS = common.Words(
        cloud="AWS",
        entry="instance type",
        regions="regions with prices",
        sold="sold",
        listed="priced",
    )
    ENTRIES = "instance_types"

    @property
    def instance_types(self) -> Mapping[str, InstanceType]:
        return self.entries

    @classmethod
    def entry(cls, raw: common.RawEntry, regions: tuple[str, ...]) -> InstanceType:
        prices = raw.prices(
            regions, lambda region: f"price for unlisted region {region!r}", on_demand_known=True
        )
        return InstanceType(
            key=raw.key,
            **raw.gpus(),
            **raw.size(),
            efa=bool(raw.need("efa")),
            prices=prices,
            notes=raw.get("notes"),
        )


@dataclass(frozen=True)
class Choice(common.Choice):
    """One instance type that meets the request, with its price in the region."""

    efa: bool


parse_catalog = Catalog.parse


@cache
def load_catalog(path: Path = CATALOG_PATH) -> Catalog:
    return Catalog.load(path)


def choice_for(t: InstanceType, region: str, spot: bool) -> Choice:
    """``t`` in ``region``, priced (spot price ranks it when ``spot`` and known)."""
    return Choice.of(t, region, t.prices[region], spot, efa=t.efa)


def choose(
    candidates: list[Accelerator] | None,
    region: str,
    cpus: int | None = None,
    memory_gb: int | None = None,
    offered: set[str] | None = None,
    *,
    spot: bool = False,
    catalog: Catalog | None = None,
) -> list[Choice]:
    """Instance types that meet the request in ``region``, cheapest first (the first is chosen).

    ``candidates``: accelerator specs per node, any of which will do; None or empty asks for a
    CPU-only node, sized by ``cpus`` and ``memory_gb``. ``cpus`` and ``memory_gb`` are minimums for
    GPU types too. ``memory_gb`` is compared with the catalog's GiB figure as is (so a request is
    never met by less memory than asked). ``offered``: the types the zone offers; None skips that
    filter. ``spot`` ranks by spot price where the catalog has one. Ties go by name, so the choice
    is stable. Raises ValueError saying what did not fit.
    """
    cat = catalog or load_catalog()
    cat.check_region(region)
    in_region = cat.sold(candidates, region, cpus, memory_gb)
    available = cat.offered(in_region, candidates, region, offered)
    choices = {t.key: choice_for(t, region, spot) for t in available}
    return sorted(choices.values(), key=common.rank)
