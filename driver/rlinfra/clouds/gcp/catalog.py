"""The Google Cloud machine catalog (``clouds/gcp/catalog.yaml``) and the choice of a machine type.

Pure: reads the packaged YAML once and answers questions about it. ``choose`` turns a profile's
accelerator candidates into the catalog entries that serve them in a region, each in a zone of
that region that offers it, cheapest first; the first is the one rlinfra launches. Which types a
zone really offers is asked of the Compute API by the preflight (``offered`` narrows the choice
when it is known).

A price the catalog does not know (``null``: not known with confidence, or a region without
prices) stays unknown: such entries rank after every priced one, ``hourly`` is NaN ("not a
number", never a made-up figure) and ``price_text`` reads ``unknown``. Spot prices move daily and
the catalog records none, so a Spot request ranks by the on-demand price, an upper bound (Spot is
never dearer), and says so.
"""

from __future__ import annotations

import math
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
    """Hourly price of one VM in one region, USD; None where the catalog does not know it."""

    on_demand: float | None
    spot: float | None


@dataclass(frozen=True)
class GuestAccelerator:
    """GPUs attached to an N1 machine type (gcp_cluster's ``guest_accelerator``)."""

    type: str
    count: int


@dataclass(frozen=True)
class MachineType:
    """One catalog entry: a machine type (for N1, a machine type plus attached GPUs)."""

    key: str
    machine_type: str
    guest_accelerator: GuestAccelerator | None
    accelerator: Accelerator | None
    gpu: str | None
    gpus: int
    gpu_memory_gib: int | None
    vcpus: int
    memory_gib: int
    zones: Mapping[str, tuple[str, ...]]
    prices: Mapping[str, Price]
    notes: str | None = None

    @property
    def series(self) -> str:
        """``a3`` for ``a3-highgpu-8g``."""
        return self.machine_type.split("-", 1)[0]


@dataclass(frozen=True)
class Catalog:
    as_of: str
    currency: str
    sources: tuple[str, ...]
    notes: tuple[str, ...]
    regions: tuple[str, ...]
    machine_types: Mapping[str, MachineType]

    def get(self, name: str) -> MachineType:
        """An entry by its key (``a3-highgpu-8g``, ``n1-standard-8+t4x1``) or, when exactly one
        entry has it, by its machine type (``n1-standard-8``)."""
        if name in self.machine_types:
            return self.machine_types[name]
        same = [t for t in self.machine_types.values() if t.machine_type == name]
        if len(same) == 1:
            return same[0]
        if same:
            raise ValueError(
                f"machine type {name!r} has several entries in rlinfra's GCP catalog: "
                + ", ".join(t.key for t in same)
            )
        raise ValueError(
            f"machine type {name!r} is not in rlinfra's GCP catalog (as of {self.as_of})"
        )

    def for_accelerator(self, accelerator: Accelerator) -> list[MachineType]:
        return [t for t in self.machine_types.values() if t.accelerator == accelerator]

    def cpu_types(self) -> list[MachineType]:
        return [t for t in self.machine_types.values() if t.gpus == 0]


@dataclass(frozen=True)
class Choice:
    """One catalog entry that meets the request, in one zone, with its price in the region.

    Satisfies ``rlinfra.clouds.base.Candidate`` (``instance_type``, ``accelerator``, ``hourly``).
    """

    instance_type: str  # the catalog key: the machine type, or "<n1 type>+<gpu>x<count>"
    machine_type: str
    guest_accelerator: GuestAccelerator | None
    accelerator: Accelerator | None
    vcpus: int
    memory_gib: int
    gpus: int
    gpu: str | None
    region: str
    zone: str
    on_demand_hourly: float | None
    spot_hourly: float | None
    spot: bool

    @property
    def price(self) -> float | None:
        """What the choice is ranked by: the Spot price when Spot is asked for and known, else
        the on-demand price (for Spot an upper bound); None when that is unknown."""
        if self.spot and self.spot_hourly is not None:
            return self.spot_hourly
        return self.on_demand_hourly

    @property
    def price_known(self) -> bool:
        return self.price is not None

    @property
    def hourly(self) -> float:
        """USD per node-hour; NaN (not a number) when the catalog does not know the price."""
        price = self.price
        return math.nan if price is None else price

    @property
    def planned_as(self) -> str:
        """The VM as a plan shows it: machine type and attached GPUs (``audit.instance_key``),
        not the catalog key (which names the GPU short, ``n1-standard-8+t4x1``)."""
        from rlinfra.audit import instance_key

        guest = self.guest_accelerator
        return instance_key(self.machine_type, [(guest.type, guest.count)] if guest else [])

    @property
    def price_text(self) -> str:
        price = self.price
        if price is None:
            return "unknown"
        bound = " (on-demand; spot unknown)" if self.spot and self.spot_hourly is None else ""
        return f"{price:.3f}{bound}"


def _machine_type(key: str, raw: Mapping[str, Any], regions: Iterable[str]) -> MachineType:
    def need(field: str) -> Any:
        if field not in raw:
            raise ValueError(f"gcp catalog: {key}: missing {field!r}")
        return raw[field]

    known_regions = set(regions)
    zones: dict[str, tuple[str, ...]] = {}
    for region, listed in (need("zones") or {}).items():
        if region not in known_regions:
            raise ValueError(f"gcp catalog: {key}: zones for unlisted region {region!r}")
        bad = [z for z in listed or () if not str(z).startswith(region + "-")]
        if bad or not listed:
            raise ValueError(f"gcp catalog: {key}: zones of {region} must be named {region}-X")
        zones[region] = tuple(str(z) for z in listed)
    prices: dict[str, Price] = {}
    for region, price in (need("prices") or {}).items():
        if region not in zones:
            raise ValueError(f"gcp catalog: {key}: priced in {region!r}, which lists no zone")
        on_demand, spot = price.get("on_demand"), price.get("spot")
        prices[region] = Price(
            None if on_demand is None else float(on_demand), None if spot is None else float(spot)
        )
    accelerator = parse_accelerator(raw["accelerator"]) if raw.get("accelerator") else None
    gpus = int(need("gpus"))
    if accelerator is not None and accelerator.count != gpus:
        raise ValueError(f"gcp catalog: {key}: accelerator {accelerator} but gpus = {gpus}")
    guest = raw.get("guest_accelerator")
    return MachineType(
        key=key,
        machine_type=str(need("machine_type")),
        guest_accelerator=(
            GuestAccelerator(str(guest["type"]), int(guest["count"])) if guest else None
        ),
        accelerator=accelerator,
        gpu=raw.get("gpu"),
        gpus=gpus,
        gpu_memory_gib=raw.get("gpu_memory_gib"),
        vcpus=int(need("vcpus")),
        memory_gib=int(need("memory_gib")),
        zones=zones,
        prices=prices,
        notes=raw.get("notes"),
    )


def parse_catalog(data: Mapping[str, Any]) -> Catalog:
    """Build a catalog from the YAML's data; raises ValueError naming what is malformed."""
    regions = tuple(data.get("regions") or ())
    if not regions:
        raise ValueError("gcp catalog: 'regions' is empty")
    types = {
        key: _machine_type(key, raw, regions)
        for key, raw in (data.get("machine_types") or {}).items()
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
        machine_types=types,
    )


@cache
def load_catalog(path: Path = CATALOG_PATH) -> Catalog:
    return parse_catalog(yaml.safe_load(path.read_text()))


def choice_for(t: MachineType, region: str, zone: str, spot: bool) -> Choice:
    """``t`` in ``zone`` of ``region``, priced where the catalog knows the price."""
    price = t.prices.get(region, Price(None, None))
    return Choice(
        instance_type=t.key,
        machine_type=t.machine_type,
        guest_accelerator=t.guest_accelerator,
        accelerator=t.accelerator,
        vcpus=t.vcpus,
        memory_gib=t.memory_gib,
        gpus=t.gpus,
        gpu=t.gpu,
        region=region,
        zone=zone,
        on_demand_hourly=price.on_demand,
        spot_hourly=price.spot,
        spot=spot,
    )


def rank(choice: Choice) -> tuple[bool, float, str]:
    """Priced before unpriced, then cheapest first, then by name (a stable choice)."""
    price = choice.price
    return (price is None, 0.0 if price is None else price, choice.instance_type)


def zone_for(t: MachineType, region: str, zone: str | None) -> str | None:
    """The zone the entry is placed in: ``zone`` when the entry lists it in the region, the
    first listed zone when no zone was asked for, None when the region or zone lacks it."""
    zones = t.zones.get(region, ())
    if zone is not None:
        return zone if zone in zones else None
    return zones[0] if zones else None


def choose(
    candidates: list[Accelerator] | None,
    region: str,
    zone: str | None = None,
    cpus: int | None = None,
    memory_gb: int | None = None,
    offered: set[str] | None = None,
    *,
    spot: bool = False,
    catalog: Catalog | None = None,
) -> list[Choice]:
    """Entries that meet the request in ``region`` (and ``zone``, when given), priced before
    unpriced and cheapest first (the first is chosen).

    ``candidates``: accelerator specs per node, any of which will do; None or empty asks for a
    CPU-only node, which this catalog cannot serve unless it lists CPU types. ``cpus`` and
    ``memory_gb`` are minimums (memory compared with the catalog's GiB figure as is, so a request
    is never met by less than asked). ``offered``: the machine types (or catalog keys) that the
    zone offers, when asked; None skips that filter. Raises ValueError saying what did not fit.
    """
    cat = catalog or load_catalog()
    if region not in cat.regions:
        raise ValueError(
            f"region {region!r} is not in rlinfra's GCP catalog (regions: {', '.join(cat.regions)})"
        )
    if zone is not None and not zone.startswith(region + "-"):
        raise ValueError(f"zone {zone!r} is not in region {region}")

    if candidates:
        pool = [t for accelerator in candidates for t in cat.for_accelerator(accelerator)]
        wanted = "accelerators " + ", ".join(str(a) for a in candidates)
        if not pool:
            known = sorted(
                {str(t.accelerator) for t in cat.machine_types.values() if t.accelerator}
            )
            raise ValueError(
                f"no GCP machine type in the catalog has {wanted} (known: {', '.join(known)})"
            )
    else:
        pool = cat.cpu_types()
        wanted = "a CPU-only node"
        if not pool:
            raise ValueError(
                f"rlinfra's GCP catalog (as of {cat.as_of}) lists GPU machine types only, so it "
                "cannot pick a CPU-only node; give resources.accelerators (e.g. 'L4:1')"
            )

    sized = [
        t
        for t in pool
        if (cpus is None or t.vcpus >= cpus) and (memory_gb is None or t.memory_gib >= memory_gb)
    ]
    if not sized:
        size_text = " and ".join(
            part
            for part in (
                f"at least {cpus} vCPUs" if cpus is not None else "",
                f"at least {memory_gb} GB of memory" if memory_gb is not None else "",
            )
            if part
        )
        largest = max(pool, key=lambda t: (t.vcpus, t.memory_gib))
        raise ValueError(
            f"no GCP machine type for {wanted} has {size_text} (largest: {largest.key}, "
            f"{largest.vcpus} vCPUs, {largest.memory_gib} GiB)"
        )

    in_region = [t for t in sized if region in t.zones]
    if not in_region:
        elsewhere = sorted({r for t in sized for r in t.zones})
        raise ValueError(
            f"no GCP machine type for {wanted} is offered in {region} "
            f"({', '.join(t.key for t in sized)}; offered in: {', '.join(elsewhere) or 'none'})"
        )

    placed = [(t, zone_for(t, region, zone)) for t in in_region]
    in_zone = [(t, z) for t, z in placed if z is not None]
    if not in_zone:
        listed = sorted({z for t in in_region for z in t.zones[region]})
        raise ValueError(
            f"none of the machine types for {wanted} ({', '.join(t.key for t in in_region)}) is "
            f"offered in zone {zone} (catalog as of {cat.as_of}; zones of {region} that offer "
            f"one: {', '.join(listed)})"
        )

    available = (
        in_zone
        if offered is None
        else [(t, z) for t, z in in_zone if t.machine_type in offered or t.key in offered]
    )
    if not available:
        raise ValueError(
            f"none of the machine types for {wanted} in {region} is offered in the zone: "
            f"{', '.join(t.key for t, _ in in_zone)}"
        )

    choices = [choice_for(t, region, z, spot) for t, z in available if z is not None]
    return sorted(choices, key=rank)
