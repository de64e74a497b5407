"""What every cloud's machine catalog shares: the YAML's frame, entries, prices and the choice.

A cloud's catalog (``clouds/<name>/catalog.py`` beside its ``catalog.yaml``) is a subclass of
:class:`Catalog` over its own :class:`Entry` and :class:`Choice` subclasses; it keeps only what
differs: its entries' own fields and how one is read from the YAML, where an entry is sold (the
regions it is priced in, or zones of a region) and the words of its messages (:class:`Words`).
Everything here is pure and names no cloud.

The choice, for every cloud alike: entries for any of the accelerator candidates (none: CPU-only
entries), then those with at least the vCPUs and memory asked for (memory compared with the
catalog's GiB figure as is, so a request is never met by less than asked), then those sold in the
region, then those the zone offers (when a preflight asked), ranked by :func:`rank`. A price the
catalog does not know stays unknown: such a choice ranks after every priced one and its
``hourly`` is NaN ("not a number", never a made-up figure).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

import yaml

from rlinfra.accelerators import Accelerator, parse_accelerator


@dataclass(frozen=True)
class Words:
    """How one cloud's catalog names itself and what it lists, in its messages."""

    cloud: str  # "rlinfra's <cloud> catalog", "no <cloud> <entry> in the catalog has ..."
    entry: str  # what an entry is ("machine type")
    regions: str  # what an unknown region's message lists ("regions with prices")
    sold: str  # how an entry is in a region ("... is <sold> in <region>")
    listed: str  # where the others are ("<listed> in: <regions>")
    sizes: str = ", "  # what joins "at least N vCPUs" and "at least M GB of memory"
    largest_size: bool = False  # whether "largest: <key>" also gives its vCPUs and GiB

    @property
    def label(self) -> str:
        """What malformed data's messages start with ("<cloud> catalog", lowercase)."""
        return f"{self.cloud.lower()} catalog"


@dataclass(frozen=True)
class Price:
    """Hourly price of one machine in one region, USD; None where the catalog does not know it."""

    on_demand: float | None
    spot: float | None


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True, kw_only=True)
class Entry:
    """One catalog entry: a machine (and the GPUs it has), its size and its price per region."""

    key: str
    accelerator: Accelerator | None
    gpu: str | None
    gpus: int
    gpu_memory_gib: int | None
    vcpus: int
    memory_gib: int
    prices: Mapping[str, Price]
    notes: str | None = None

    @property
    def regions(self) -> tuple[str, ...]:
        """The regions that sell it (by default: where it is priced)."""
        return tuple(self.prices)

    def offered_in(self, offered: Container[str]) -> bool:
        """Whether the zone's offered names (a preflight's answer) include this entry."""
        return self.key in offered


E = TypeVar("E", bound=Entry)
C = TypeVar("C", bound="Catalog[Any]")
CH = TypeVar("CH", bound="Choice")


@dataclass(frozen=True)
class RawEntry:
    """One entry's YAML mapping, read with errors that name the catalog, the entry and what is
    malformed."""

    words: Words
    key: str
    data: Mapping[str, Any]

    def refuse(self, what: str) -> ValueError:
        return ValueError(f"{self.words.label}: {self.key}: {what}")

    def need(self, field: str) -> Any:
        if field not in self.data:
            raise self.refuse(f"missing {field!r}")
        return self.data[field]

    def get(self, field: str) -> Any:
        return self.data.get(field)

    def prices(
        self,
        sold_in: Container[str],
        unsold: Callable[[str], str],
        *,
        on_demand_known: bool,
    ) -> dict[str, Price]:
        """``prices``, per region: each region must be in ``sold_in`` (else ``unsold(region)``
        says why not); ``on_demand_known``: every price has an on-demand figure."""
        prices: dict[str, Price] = {}
        for region, price in (self.need("prices") or {}).items():
            if region not in sold_in:
                raise self.refuse(unsold(region))
            on_demand = (
                float(price["on_demand"]) if on_demand_known else _number(price.get("on_demand"))
            )
            prices[region] = Price(on_demand, _number(price.get("spot")))
        return prices

    def gpus(self) -> dict[str, Any]:
        """``Entry``'s GPU fields; the accelerator spec the entry serves must count its GPUs."""
        accelerator = (
            parse_accelerator(self.data["accelerator"]) if self.get("accelerator") else None
        )
        gpus = int(self.need("gpus"))
        if accelerator is not None and accelerator.count != gpus:
            raise self.refuse(f"accelerator {accelerator} but gpus = {gpus}")
        return {
            "accelerator": accelerator,
            "gpu": self.get("gpu"),
            "gpus": gpus,
            "gpu_memory_gib": self.get("gpu_memory_gib"),
        }

    def size(self) -> dict[str, Any]:
        """``Entry``'s size fields."""
        return {"vcpus": int(self.need("vcpus")), "memory_gib": int(self.need("memory_gib"))}


@dataclass(frozen=True)
class Catalog(ABC, Generic[E]):
    """A cloud's catalog: the YAML's frame and its entries by key. Subclasses name their words,
    the YAML's key of the entries, and how one entry is read."""

    WORDS: ClassVar[Words]
    ENTRIES: ClassVar[str]  # the YAML's key of the entries ("machine_types")

    as_of: str
    currency: str
    sources: tuple[str, ...]
    notes: tuple[str, ...]
    regions: tuple[str, ...]
    entries: Mapping[str, E]

    @classmethod
    @abstractmethod
    def entry(cls, raw: RawEntry, regions: tuple[str, ...]) -> E:
        """One entry from its YAML; ValueError (``raw.refuse``) naming what is malformed."""

    @classmethod
    def parse(cls: type[C], data: Mapping[str, Any]) -> C:
        """Build a catalog from the YAML's data; raises ValueError naming what is malformed."""
        words = cls.WORDS
        regions = tuple(data.get("regions") or ())
        if not regions:
            raise ValueError(f"{words.label}: 'regions' is empty")
        entries = {
            key: cls.entry(RawEntry(words, key, raw), regions)
            for key, raw in (data.get(cls.ENTRIES) or {}).items()
        }
        sources = tuple(
            f"{s['name']} <{s['url']}>" if s.get("url") else str(s["name"])
            for s in data.get("sources") or ()
        )
        return cls(
            as_of=str(data["as_of"]),
            currency=str(data.get("currency", "USD")),
            sources=sources,
            notes=tuple(str(n) for n in data.get("notes") or ()),
            regions=regions,
            entries=entries,
        )

    @classmethod
    def load(cls: type[C], path: Path) -> C:
        return cls.parse(yaml.safe_load(path.read_text()))

    def get(self, name: str) -> E:
        """An entry by its key (or by another name the cloud's catalog knows it by)."""
        if name in self.entries:
            return self.entries[name]
        other = self.known_as(name)
        if other is not None:
            return other
        words = self.WORDS
        raise ValueError(
            f"{words.entry} {name!r} is not in rlinfra's {words.cloud} catalog (as of {self.as_of})"
        )

    def known_as(self, name: str) -> E | None:
        """The entry that ``name`` (not a key) stands for; None: no entry."""
        return None

    def for_accelerator(self, accelerator: Accelerator) -> list[E]:
        return [t for t in self.entries.values() if t.accelerator == accelerator]

    def cpu_types(self) -> list[E]:
        return [t for t in self.entries.values() if t.gpus == 0]

    # -- the choice, in steps (each raises ValueError saying what did not fit)

    def check_region(self, region: str) -> None:
        if region not in self.regions:
            words = self.WORDS
            raise ValueError(
                f"region {region!r} is not in rlinfra's {words.cloud} catalog ({words.regions}: "
                f"{', '.join(self.regions)})"
            )

    def sold(
        self,
        candidates: list[Accelerator] | None,
        region: str,
        cpus: int | None,
        memory_gb: int | None,
    ) -> list[E]:
        """Entries for any of ``candidates`` (None or empty: CPU-only entries) with at least
        ``cpus`` vCPUs and ``memory_gb`` GiB, sold in ``region``."""
        words = self.WORDS
        what = f"{words.cloud} {words.entry}"
        asked = wanted(candidates)
        if candidates:
            pool = [t for accelerator in candidates for t in self.for_accelerator(accelerator)]
            if not pool:
                known = sorted({str(t.accelerator) for t in self.entries.values() if t.accelerator})
                raise ValueError(
                    f"no {what} in the catalog has {asked} (known: {', '.join(known)})"
                )
        else:
            pool = self.cpu_types()

        sized = [
            t
            for t in pool
            if (cpus is None or t.vcpus >= cpus)
            and (memory_gb is None or t.memory_gib >= memory_gb)
        ]
        if not sized:
            size_text = words.sizes.join(
                part
                for part in (
                    f"at least {cpus} vCPUs" if cpus is not None else "",
                    f"at least {memory_gb} GB of memory" if memory_gb is not None else "",
                )
                if part
            )
            largest = ""
            if pool:
                big = max(pool, key=lambda t: (t.vcpus, t.memory_gib))
                shown = f"{big.key}, {big.vcpus} vCPUs, {big.memory_gib} GiB"
                largest = f" (largest: {shown if words.largest_size else big.key})"
            raise ValueError(f"no {what} for {asked} has {size_text}{largest}")

        in_region = [t for t in sized if region in t.regions]
        if not in_region:
            elsewhere = sorted({r for t in sized for r in t.regions})
            raise ValueError(
                f"no {what} for {asked} is {words.sold} in {region} "
                f"({', '.join(t.key for t in sized)}; {words.listed} in: "
                f"{', '.join(elsewhere) or 'none'})"
            )
        return in_region

    def offered(
        self,
        entries: list[E],
        candidates: list[Accelerator] | None,
        region: str,
        offered: set[str] | None,
    ) -> list[E]:
        """``entries`` that the zone offers (``offered``: its names; None skips the filter)."""
        available = entries if offered is None else [t for t in entries if t.offered_in(offered)]
        if not available:
            raise ValueError(
                f"none of the {self.WORDS.entry}s for {wanted(candidates)} in {region} is offered "
                f"in the zone: {', '.join(t.key for t in entries)}"
            )
        return available


def wanted(candidates: Iterable[Accelerator] | None) -> str:
    """What a request asks for, in messages: "accelerators H100:8, A100:8" or a CPU-only node."""
    specs = list(candidates or ())
    if specs:
        return "accelerators " + ", ".join(str(a) for a in specs)
    return "a CPU-only node"


@dataclass(frozen=True)
class Choice:
    """One catalog entry that meets the request, with its price in the region.

    Satisfies ``rlinfra.plan.Candidate`` (``instance_type``, ``accelerator``, ``hourly``,
    ``planned_as``).
    """

    instance_type: str  # the entry's key
    accelerator: Accelerator | None
    vcpus: int
    memory_gib: int
    gpus: int
    gpu: str | None
    region: str
    on_demand_hourly: float | None
    spot_hourly: float | None
    spot: bool

    @classmethod
    def of(cls: type[CH], entry: Entry, region: str, price: Price, spot: bool, **own: Any) -> CH:
        """``entry`` in ``region`` at ``price`` (``spot``: ranked by the spot price where it is
        known); ``own``: the fields of the cloud's own choice."""
        return cls(
            instance_type=entry.key,
            accelerator=entry.accelerator,
            vcpus=entry.vcpus,
            memory_gib=entry.memory_gib,
            gpus=entry.gpus,
            gpu=entry.gpu,
            region=region,
            on_demand_hourly=price.on_demand,
            spot_hourly=price.spot,
            spot=spot,
            **own,
        )

    @property
    def price(self) -> float | None:
        """What the choice is ranked by: the spot price when spot is asked for and known, else
        the on-demand price (for spot an upper bound); None when that is unknown."""
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
        """How a Terraform plan's summary names the machine (by default the entry's key)."""
        return self.instance_type

    @property
    def price_text(self) -> str:
        price = self.price
        if price is None:
            return "unknown"
        bound = " (on-demand; spot unknown)" if self.spot and self.spot_hourly is None else ""
        return f"{price:.3f}{bound}"


def rank(choice: Choice) -> tuple[bool, float, str]:
    """Priced before unpriced, then cheapest first, then by name (a stable choice)."""
    price = choice.price
    return (price is None, 0.0 if price is None else price, choice.instance_type)
