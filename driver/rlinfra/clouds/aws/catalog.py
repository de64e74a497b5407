"""The AWS instance catalog (``clouds/aws/catalog.yaml``) and the choice of an instance type.

Pure: reads the packaged YAML once and answers questions about it. ``choose`` turns a profile's
accelerator candidates (or, for CPU nodes, its cpus/memory) into the matching instance types in a
region, cheapest first; the first is the one rlinfra launches. Which types the zone really offers
is asked of AWS by the preflight and passed in as ``offered``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from rlinfra.accelerators import Accelerator, parse_accelerator

CATALOG_PATH = Path(__file__).resolve().parent / "catalog.yaml"


@dataclass(frozen=True)
class Price:
    """Hourly price of one instance in one region, USD."""

    on_demand: float
    spot: float | None


@dataclass(frozen=True)
class InstanceType:
    name: str
    vcpus: int
    memory_gib: int
    gpus: int
    gpu: str | None
    gpu_memory_gib: int | None
    accelerator: Accelerator | None
    efa: bool
    prices: Mapping[str, Price]
    notes: str | None = None

    @property
    def family(self) -> str:
        """``p5`` for ``p5.48xlarge``."""
        return self.name.split(".", 1)[0]


@dataclass(frozen=True)
class Catalog:
    as_of: str
    currency: str
    sources: tuple[str, ...]
    notes: tuple[str, ...]
    regions: tuple[str, ...]
    instance_types: Mapping[str, InstanceType]

    def get(self, name: str) -> InstanceType:
        try:
            return self.instance_types[name]
        except KeyError:
            raise ValueError(
                f"instance type {name!r} is not in rlinfra's AWS catalog (as of {self.as_of})"
            ) from None

    def for_accelerator(self, accelerator: Accelerator) -> list[InstanceType]:
        return [t for t in self.instance_types.values() if t.accelerator == accelerator]

    def cpu_types(self) -> list[InstanceType]:
        return [t for t in self.instance_types.values() if t.gpus == 0]


@dataclass(frozen=True)
class Choice:
    """One instance type that meets the request, with its price in the region."""

    instance_type: str
    accelerator: Accelerator | None
    vcpus: int
    memory_gib: int
    gpus: int
    gpu: str | None
    efa: bool
    region: str
    on_demand_hourly: float
    spot_hourly: float | None
    spot: bool

    @property
    def hourly(self) -> float:
        """The price this choice is ranked by: spot when asked for spot (and known), else on-demand."""
        if self.spot and self.spot_hourly is not None:
            return self.spot_hourly
        return self.on_demand_hourly

    @property
    def planned_as(self) -> str:
        return self.instance_type


def _instance_type(name: str, raw: Mapping[str, Any], regions: Iterable[str]) -> InstanceType:
    def need(key: str) -> Any:
        if key not in raw:
            raise ValueError(f"aws catalog: {name}: missing {key!r}")
        return raw[key]

    prices: dict[str, Price] = {}
    for region, price in (need("prices") or {}).items():
        if region not in regions:
            raise ValueError(f"aws catalog: {name}: price for unlisted region {region!r}")
        spot = price.get("spot")
        prices[region] = Price(float(price["on_demand"]), None if spot is None else float(spot))
    accelerator = parse_accelerator(raw["accelerator"]) if raw.get("accelerator") else None
    gpus = int(need("gpus"))
    if accelerator is not None and accelerator.count != gpus:
        raise ValueError(f"aws catalog: {name}: accelerator {accelerator} but gpus = {gpus}")
    return InstanceType(
        name=name,
        vcpus=int(need("vcpus")),
        memory_gib=int(need("memory_gib")),
        gpus=gpus,
        gpu=raw.get("gpu"),
        gpu_memory_gib=raw.get("gpu_memory_gib"),
        accelerator=accelerator,
        efa=bool(need("efa")),
        prices=prices,
        notes=raw.get("notes"),
    )


def parse_catalog(data: Mapping[str, Any]) -> Catalog:
    """Build a catalog from the YAML's data; raises ValueError naming what is malformed."""
    regions = tuple(data.get("regions") or ())
    if not regions:
        raise ValueError("aws catalog: 'regions' is empty")
    types = {
        name: _instance_type(name, raw, regions)
        for name, raw in (data.get("instance_types") or {}).items()
    }
    sources = tuple(
        f"{s['name']} <{s['url']}>" if s.get("url") else str(s["name"])
        for s in data.get("sources") or ()
    )
    return Catalog(
        as_of=str(data["as_of"]),
        currency=str(data.get("currency", "USD")),
        sources=sources,
        notes=tuple(str(n) for n in data.get("notes") or ()),
        regions=regions,
        instance_types=types,
    )


@cache
def load_catalog(path: Path = CATALOG_PATH) -> Catalog:
    return parse_catalog(yaml.safe_load(path.read_text()))


def choice_for(t: InstanceType, region: str, spot: bool) -> Choice:
    """``t`` in ``region``, priced (spot price ranks it when ``spot`` and known)."""
    price = t.prices[region]
    return Choice(
        instance_type=t.name,
        accelerator=t.accelerator,
        vcpus=t.vcpus,
        memory_gib=t.memory_gib,
        gpus=t.gpus,
        gpu=t.gpu,
        efa=t.efa,
        region=region,
        on_demand_hourly=price.on_demand,
        spot_hourly=price.spot,
        spot=spot,
    )


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
    if region not in cat.regions:
        raise ValueError(
            f"region {region!r} is not in rlinfra's AWS catalog (regions with prices: "
            f"{', '.join(cat.regions)})"
        )

    if candidates:
        pool = [t for accelerator in candidates for t in cat.for_accelerator(accelerator)]
        wanted = "accelerators " + ", ".join(str(a) for a in candidates)
        if not pool:
            known = sorted(
                {str(t.accelerator) for t in cat.instance_types.values() if t.accelerator}
            )
            raise ValueError(
                f"no AWS instance type in the catalog has {wanted} (known: {', '.join(known)})"
            )
    else:
        pool = cat.cpu_types()
        wanted = "a CPU-only node"

    sized = [
        t
        for t in pool
        if (cpus is None or t.vcpus >= cpus) and (memory_gb is None or t.memory_gib >= memory_gb)
    ]
    size_text = ", ".join(
        part
        for part in (
            f"at least {cpus} vCPUs" if cpus is not None else "",
            f"at least {memory_gb} GB of memory" if memory_gb is not None else "",
        )
        if part
    )
    if not sized:
        raise ValueError(
            f"no AWS instance type for {wanted} has {size_text}"
            + (
                f" (largest: {max(pool, key=lambda t: (t.vcpus, t.memory_gib)).name})"
                if pool
                else ""
            )
        )

    in_region = [t for t in sized if region in t.prices]
    if not in_region:
        elsewhere = sorted({r for t in sized for r in t.prices})
        raise ValueError(
            f"no AWS instance type for {wanted} is sold in {region} "
            f"({', '.join(t.name for t in sized)}; priced in: {', '.join(elsewhere) or 'none'})"
        )

    available = in_region if offered is None else [t for t in in_region if t.name in offered]
    if not available:
        raise ValueError(
            f"none of the instance types for {wanted} in {region} is offered in the zone: "
            f"{', '.join(t.name for t in in_region)}"
        )

    choices = {t.name: choice_for(t, region, spot) for t in available}
    return sorted(choices.values(), key=lambda c: (c.hourly, c.instance_type))
