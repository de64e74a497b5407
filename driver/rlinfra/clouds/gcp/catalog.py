"""The Google Cloud machine catalog (``clouds/gcp/catalog.yaml``) and the choice of a machine type.

Pure: reads the packaged YAML once and answers questions about it (``clouds/catalog.py`` holds
what every cloud's catalog shares). ``choose`` turns a profile's accelerator candidates into the
catalog entries that serve them in a region, each in a zone of that region that offers it,
cheapest first; the first is the one rlinfra launches. Which types a zone really offers is asked
of the Compute API by the preflight (``offered`` narrows the choice when it is known).

A price the catalog does not know (``null``: not known with confidence, or a region without
prices) stays unknown: such entries rank after every priced one, ``hourly`` is NaN ("not a
number", never a made-up figure) and ``price_text`` reads ``unknown``. Spot prices move daily and
the catalog records none, so a Spot request ranks by the on-demand price, an upper bound (Spot is
never dearer), and says so.

How Compute Engine sells a type is its ``provisioning_models`` (``STANDARD``: on demand, ``SPOT``,
``FLEX_START``; by default ``STANDARD`` and ``SPOT``): an on-demand request never gets a type sold
as Spot and Flex-start only (``a3-highgpu-1g``), a Spot request never one without ``SPOT``.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from rlinfra.accelerators import Accelerator
from rlinfra.clouds import catalog as common

CATALOG_PATH = Path(__file__).resolve().parent / "catalog.yaml"

# Compute Engine's provisioning models (scheduling.provisioningModel; FLEX_START: Dynamic Workload
# Scheduler), as messages name them; a type lists the ones it is sold under.
PROVISIONING_MODELS = {"STANDARD": "on demand", "SPOT": "Spot", "FLEX_START": "Flex-start"}
DEFAULT_PROVISIONING = ("STANDARD", "SPOT")


def provisioning_model(spot: bool) -> str:
    """The model a request asks for: ``SPOT`` for resources.spot, else ``STANDARD``."""
    return "SPOT" if spot else "STANDARD"


@dataclass(frozen=True)
class GuestAccelerator:
    """GPUs attached to an N1 machine type (gcp_cluster's ``guest_accelerator``)."""

    type: str
    count: int


@dataclass(frozen=True, kw_only=True)
class MachineType(common.Entry):
    """One catalog entry: a machine type (for N1, a machine type plus attached GPUs), sold in the
    regions that list zones for it."""

    machine_type: str
    guest_accelerator: GuestAccelerator | None
    zones: Mapping[str, tuple[str, ...]]
    provisioning_models: tuple[str, ...] = DEFAULT_PROVISIONING

    def sold_as(self, spot: bool) -> bool:
        """Whether Compute Engine sells the type as the request asks (Spot, or on demand)."""
        return provisioning_model(spot) in self.provisioning_models

    @property
    def sold_text(self) -> str:
        """How it is sold, in messages: "Spot or Flex-start only"."""
        models = [PROVISIONING_MODELS[m] for m in self.provisioning_models]
        only = "" if "STANDARD" in self.provisioning_models else " only"
        return " or ".join(models) + only

    @property
    def series(self) -> str:
        """``a3`` for ``a3-highgpu-8g``."""
        return self.machine_type.split("-", 1)[0]

    @property
    def regions(self) -> tuple[str, ...]:
        return tuple(self.zones)

    def offered_in(self, offered: Container[str]) -> bool:
        """Whether ``offered`` names the machine type or the catalog key."""
        return self.machine_type in offered or self.key in offered


@dataclass(frozen=True)
class Catalog(common.Catalog[MachineType]):
    WORDS = common.Words(
        cloud="GCP",
        entry="machine type",
        regions="regions",
        sold="offered",
        listed="offered",
        sizes=" and ",
        largest_size=True,
    )
    ENTRIES = "machine_types"

    @property
    def machine_types(self) -> Mapping[str, MachineType]:
        return self.entries

    @classmethod
    def entry(cls, raw: common.RawEntry, regions: tuple[str, ...]) -> MachineType:
        known_regions = set(regions)
        zones: dict[str, tuple[str, ...]] = {}
        for region, listed in (raw.need("zones") or {}).items():
            if region not in known_regions:
                raise raw.refuse(f"zones for unlisted region {region!r}")
            bad = [z for z in listed or () if not str(z).startswith(region + "-")]
            if bad or not listed:
                raise raw.refuse(f"zones of {region} must be named {region}-X")
            zones[region] = tuple(str(z) for z in listed)
        prices = raw.prices(
            zones,
            lambda region: f"priced in {region!r}, which lists no zone",
            on_demand_known=False,
        )
        guest = raw.get("guest_accelerator")
        models = tuple(str(m) for m in raw.get("provisioning_models") or DEFAULT_PROVISIONING)
        unknown = [m for m in models if m not in PROVISIONING_MODELS]
        if unknown or not models:
            raise raw.refuse(
                f"provisioning_models {list(models)}: each one of {', '.join(PROVISIONING_MODELS)}"
            )
        return MachineType(
            key=raw.key,
            **raw.gpus(),
            machine_type=str(raw.need("machine_type")),
            guest_accelerator=(
                GuestAccelerator(str(guest["type"]), int(guest["count"])) if guest else None
            ),
            **raw.size(),
            zones=zones,
            prices=prices,
            notes=raw.get("notes"),
            provisioning_models=models,
        )

    def known_as(self, name: str) -> MachineType | None:
        """``get`` takes a key (``a3-highgpu-8g``, ``n1-standard-8+t4x1``) or, when exactly one
        entry has it, a machine type (``n1-standard-8``)."""
        same = [t for t in self.entries.values() if t.machine_type == name]
        if len(same) == 1:
            return same[0]
        if same:
            raise ValueError(
                f"machine type {name!r} has several entries in rlinfra's GCP catalog: "
                + ", ".join(t.key for t in same)
            )
        return None


@dataclass(frozen=True)
class Choice(common.Choice):
    """One catalog entry that meets the request, in one zone, with its price in the region
    (``instance_type``: the catalog key, the machine type or "<n1 type>+<gpu>x<count>")."""

    machine_type: str
    guest_accelerator: GuestAccelerator | None
    zone: str

    @property
    def planned_as(self) -> str:
        """The VM as a plan shows it: machine type and attached GPUs (``audit.instance_key``),
        not the catalog key (which names the GPU short, ``n1-standard-8+t4x1``)."""
        from rlinfra.audit import instance_key

        guest = self.guest_accelerator
        return instance_key(self.machine_type, [(guest.type, guest.count)] if guest else [])


parse_catalog = Catalog.parse


@cache
def load_catalog(path: Path = CATALOG_PATH) -> Catalog:
    return Catalog.load(path)


def choice_for(t: MachineType, region: str, zone: str, spot: bool) -> Choice:
    """``t`` in ``zone`` of ``region``, priced where the catalog knows the price; ValueError when
    Compute Engine does not sell it as asked (``spot``, or on demand)."""
    if not t.sold_as(spot):
        raise ValueError(f"{t.key} is sold as {t.sold_text}{spot_hint(spot)}")
    price = t.prices.get(region, common.Price(None, None))
    return Choice.of(
        t,
        region,
        price,
        spot,
        machine_type=t.machine_type,
        guest_accelerator=t.guest_accelerator,
        zone=zone,
    )


def spot_hint(spot: bool) -> str:
    """What a request for a type not sold as asked can change (an on-demand one: ask for Spot)."""
    return "" if spot else ": set resources.spot: true to use it"


def sold_as_asked(
    types: list[MachineType], candidates: list[Accelerator] | None, region: str, spot: bool
) -> list[MachineType]:
    """``types`` that Compute Engine sells as the request asks (Spot, or on demand)."""
    kept = [t for t in types if t.sold_as(spot)]
    if not kept:
        how = "as Spot VMs" if spot else "on demand"
        sold = "; ".join(f"{t.key} is sold as {t.sold_text}" for t in types)
        raise ValueError(
            f"no GCP machine type for {common.wanted(candidates)} is sold {how} in {region} "
            f"({sold}){spot_hint(spot)}"
        )
    return kept


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
    zone offers, when asked; None skips that filter. ``spot``: Spot VMs (types sold as Spot),
    else on demand (types sold so). Raises ValueError saying what did not fit.
    """
    cat = catalog or load_catalog()
    cat.check_region(region)
    if zone is not None and not zone.startswith(region + "-"):
        raise ValueError(f"zone {zone!r} is not in region {region}")
    if not candidates and not cat.cpu_types():
        raise ValueError(
            f"rlinfra's GCP catalog (as of {cat.as_of}) lists GPU machine types only, so it "
            "cannot pick a CPU-only node; give resources.accelerators (e.g. 'L4:1')"
        )

    in_region = sold_as_asked(
        cat.sold(candidates, region, cpus, memory_gb), candidates, region, spot
    )
    in_zone = [t for t in in_region if zone_for(t, region, zone) is not None]
    if not in_zone:
        listed = sorted({z for t in in_region for z in t.zones[region]})
        raise ValueError(
            f"none of the machine types for {common.wanted(candidates)} "
            f"({', '.join(t.key for t in in_region)}) is offered in zone {zone} (catalog as of "
            f"{cat.as_of}; zones of {region} that offer one: {', '.join(listed)})"
        )

    available = cat.offered(in_zone, candidates, region, offered)
    choices = [
        choice_for(t, region, placed, spot)
        for t in available
        if (placed := zone_for(t, region, zone)) is not None
    ]
    return sorted(choices, key=common.rank)
