"""The Nebius AI Cloud catalog (``clouds/nebius/catalog.yaml``) and the choice of a platform and
preset.

Pure: reads the packaged YAML once and answers questions about it (``clouds/catalog.py`` holds
what every cloud's catalog shares). An entry is one preset of one platform, keyed
``<platform>/<preset>`` (``gpu-h100-sxm/8gpu-128vcpu-1600gb``): Nebius's API and Terraform take
the two names apart (``resources.platform``, ``resources.preset``). ``choose`` turns a profile's
accelerator candidates (or, for CPU-only nodes, its cpus/memory) into the presets sold in a
region, cheapest first; the first is the one rlinfra launches. Which platforms and presets the
project's region really offers is asked of the API by the preflight (``offered`` narrows the
choice when it is known).

8-GPU presets join a GPU cluster, whose InfiniBand fabric is fixed per platform and region: an
entry's ``fabrics`` lists them, and a choice carries the first (``fabric``). A preemptible price
the catalog does not know stays unknown: a spot request then ranks by the on-demand price (an
upper bound) and says so.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

from rlinfra.accelerators import Accelerator
from rlinfra.clouds import catalog as common

CATALOG_PATH = Path(__file__).resolve().parent / "catalog.yaml"

# "8gpu-128vcpu-1600gb", "4vcpu-16gb": the preset's size as its name spells it.
PRESET_NAME = re.compile(r"(?:(?P<gpus>\d+)gpu-)?(?P<vcpus>\d+)vcpu-(?P<memory>\d+)gb")
# "gpu-h100-sxm" -> H100; CPU platforms are "cpu-<family>".
GPU_PLATFORM = re.compile(r"gpu-(?P<model>[a-z0-9]+)-[a-z0-9-]+")
CPU_PLATFORM = re.compile(r"cpu-[a-z0-9-]+")
# Only presets with this many GPUs join a GPU cluster (InfiniBand).
CLUSTER_GPUS = 8

NC = TypeVar("NC", bound="Catalog")


def preset_size(preset: str) -> tuple[int, int, int]:
    """(GPUs, vCPUs, GiB of memory) that a preset's name spells; ValueError for another name."""
    found = PRESET_NAME.fullmatch(preset)
    if found is None:
        raise ValueError(f"preset {preset!r} is not named [Ngpu-]Nvcpu-Ngb")
    return int(found["gpus"] or 0), int(found["vcpus"]), int(found["memory"])


def platform_gpu(platform: str) -> str | None:
    """The GPU model a platform's name spells (``gpu-h100-sxm`` -> ``H100``), None for a CPU
    platform; ValueError for a name that is neither."""
    found = GPU_PLATFORM.fullmatch(platform)
    if found is not None:
        return found["model"].upper()
    if CPU_PLATFORM.fullmatch(platform):
        return None
    raise ValueError(f"platform {platform!r} is named neither gpu-<model>-... nor cpu-...")


@dataclass(frozen=True, kw_only=True)
class Preset(common.Entry):
    """One catalog entry: a preset of a platform (key ``<platform>/<preset>``), sold where it is
    priced; ``fabrics``: per region, the InfiniBand fabrics its GPU cluster can be made in (only
    8-GPU presets have any)."""

    platform: str
    preset: str
    fabrics: Mapping[str, tuple[str, ...]]
    image_family: str

    @property
    def clusters(self) -> bool:
        """Whether the preset joins a GPU cluster (InfiniBand) somewhere."""
        return any(self.fabrics.values())

    def fabrics_in(self, region: str) -> tuple[str, ...]:
        """The fabrics a GPU cluster of this preset can be made in, in ``region`` (none: the
        nodes talk over Ethernet only)."""
        return self.fabrics.get(region, ())


@dataclass(frozen=True)
class Catalog(common.Catalog[Preset]):
    WORDS = common.Words(
        cloud="Nebius",
        entry="preset",
        regions="regions",
        sold="sold",
        listed="sold",
        sizes=" and ",
        largest_size=True,
    )
    ENTRIES = "presets"

    # The boot image family of GPU and of CPU presets ({"gpu": ..., "cpu": ...}).
    image_families: Mapping[str, str] = field(default_factory=dict)

    @property
    def presets(self) -> Mapping[str, Preset]:
        return self.entries

    @classmethod
    def parse(cls: type[NC], data: Mapping[str, Any]) -> NC:
        """The shared frame, plus ``image_families``: an entry without an ``image_family`` of its
        own boots the GPU or the CPU family."""
        families = families_of(data)
        parsed = super().parse(data)
        entries = {
            key: e
            if e.image_family
            else dataclasses.replace(e, image_family=families["gpu" if e.gpus else "cpu"])
            for key, e in parsed.entries.items()
        }
        return dataclasses.replace(parsed, image_families=families, entries=entries)

    @classmethod
    def entry(cls, raw: common.RawEntry, regions: tuple[str, ...]) -> Preset:
        platform = str(raw.need("platform"))
        preset = str(raw.need("preset"))
        if raw.key != f"{platform}/{preset}":
            raise raw.refuse(f"the key must be '{platform}/{preset}' (platform/preset)")
        gpus = raw.gpus()
        size = raw.size()
        try:
            named = preset_size(preset)
            model = platform_gpu(platform)
        except ValueError as exc:
            raise raw.refuse(str(exc)) from None
        if named != (gpus["gpus"], size["vcpus"], size["memory_gib"]):
            raise raw.refuse(
                f"preset {preset} names {named[0]} GPUs, {named[1]} vCPUs and {named[2]} GiB, "
                f"but the entry has {gpus['gpus']}, {size['vcpus']} and {size['memory_gib']}"
            )
        accelerator = gpus["accelerator"]
        if model is None and (gpus["gpus"] or accelerator is not None):
            raise raw.refuse(f"CPU platform {platform} with GPUs")
        if model is not None and (accelerator is None or accelerator.name != model):
            raise raw.refuse(f"platform {platform} has {model} GPUs, not {accelerator or 'none'}")
        prices = raw.prices(
            regions, lambda region: f"price for unlisted region {region!r}", on_demand_known=True
        )
        fabrics: dict[str, tuple[str, ...]] = {}
        for region, listed in (raw.get("fabrics") or {}).items():
            if region not in prices:
                raise raw.refuse(f"fabrics in {region!r}, where it is not priced")
            if not listed:
                raise raw.refuse(f"no fabric listed in {region}")
            fabrics[region] = tuple(str(f) for f in listed)
        if fabrics and gpus["gpus"] != CLUSTER_GPUS:
            raise raw.refuse(f"fabrics for a {gpus['gpus']}-GPU preset: only 8-GPU presets cluster")
        return Preset(
            key=raw.key,
            **gpus,
            **size,
            prices=prices,
            notes=raw.get("notes"),
            platform=platform,
            preset=preset,
            fabrics=fabrics,
            image_family=str(raw.get("image_family") or ""),  # "": the catalog's (parse)
        )


def families_of(data: Mapping[str, Any]) -> dict[str, str]:
    """The YAML's ``image_families``: both a GPU and a CPU family; ValueError otherwise."""
    families = {str(k): str(v) for k, v in (data.get("image_families") or {}).items()}
    missing = {"gpu", "cpu"} - set(families)
    if missing:
        raise ValueError(
            f"{Catalog.WORDS.label}: image_families lacks {', '.join(sorted(missing))}"
        )
    return families


@dataclass(frozen=True)
class Choice(common.Choice):
    """One preset that meets the request, with its price in the region (``instance_type``: the
    catalog key ``<platform>/<preset>``); ``fabric``: the InfiniBand fabric its GPU cluster is
    made in (the first the catalog lists in the region), None for presets that do not cluster."""

    platform: str
    preset: str
    fabric: str | None
    fabrics: tuple[str, ...]
    image_family: str


parse_catalog = Catalog.parse


@cache
def load_catalog(path: Path = CATALOG_PATH) -> Catalog:
    return Catalog.load(path)


def choice_for(t: Preset, region: str, spot: bool) -> Choice:
    """``t`` in ``region`` at its price there (the preemptible price ranks it when ``spot`` and
    known); ValueError when the catalog does not sell it in the region."""
    if region not in t.prices:
        raise ValueError(
            f"preset {t.key} is not sold in {region} (sold in: {', '.join(t.regions)})"
        )
    fabrics = t.fabrics_in(region)
    return Choice.of(
        t,
        region,
        t.prices[region],
        spot,
        platform=t.platform,
        preset=t.preset,
        fabric=fabrics[0] if fabrics else None,
        fabrics=fabrics,
        image_family=t.image_family,
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
    """Presets that meet the request in ``region``, cheapest first (the first is chosen).

    ``candidates``: accelerator specs per node, any of which will do; None or empty asks for a
    CPU-only node, sized by ``cpus`` and ``memory_gb``, minimums for GPU presets too (memory is
    compared with the catalog's GiB figure as is, so a request is never met by less than asked).
    ``offered``: the ``<platform>/<preset>`` keys the project's region offers, when a preflight
    asked; None skips that filter. ``spot`` ranks by the preemptible price where the catalog
    knows it. Ties go by name, so the choice is stable. Raises ValueError saying what did not
    fit.
    """
    cat = catalog or load_catalog()
    cat.check_region(region)
    in_region = cat.sold(candidates, region, cpus, memory_gb)
    available = cat.offered(in_region, candidates, region, offered)
    return sorted((choice_for(t, region, spot) for t in available), key=common.rank)
