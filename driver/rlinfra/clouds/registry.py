"""Looking clouds up in the registry (``rlinfra.clouds.REGISTRY``): ``cloud_for(name)`` gives a
cloud's instance, importing its module on first use, and ``CLOUDS`` every cloud as a mapping."""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from rlinfra.clouds import REGISTRY
from rlinfra.errors import UsageError

if TYPE_CHECKING:
    from rlinfra.clouds.base import Cloud


def cloud_for(name: str) -> Cloud:
    """The cloud called ``name`` (its module is imported on first use)."""
    if name not in REGISTRY:
        raise UsageError(
            f"cloud {name!r} cannot be deployed by this version of rlinfra",
            "Supported clouds: " + ", ".join(REGISTRY) + ".",
        )
    cloud: Cloud = importlib.import_module(REGISTRY[name]).CLOUD
    return cloud


class _Registry(Mapping[str, "Cloud"]):
    """Every registered cloud by name, each imported when first looked up."""

    def __getitem__(self, name: str) -> Cloud:
        if name not in REGISTRY:
            raise KeyError(name)
        return cloud_for(name)

    def __iter__(self) -> Iterator[str]:
        return iter(REGISTRY)

    def __len__(self) -> int:
        return len(REGISTRY)


CLOUDS: Mapping[str, Cloud] = _Registry()
