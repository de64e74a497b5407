"""Clouds: one folder each (``clouds/<name>/``), one class behind the interface declared in
``clouds/base.py``, and this registry, the one place that names them.

``REGISTRY`` maps a cloud's name to the module holding its ``CLOUD`` (an instance of a
:class:`~rlinfra.clouds.base.Cloud` subclass), imported on first use; ``cloud_for(name)`` gives
that instance, ``CLOUDS`` every cloud as a mapping; ``SECTIONS`` lists the clouds' own profile
keys. ``rlinfra.clouds.planning.make_plan`` plans a profile on them. Adding a cloud is its
folder, its Terraform and its lines here (docs/design.md has the checklist).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from rlinfra.cloud_section import CloudSection
from rlinfra.clouds.gcp import section as _gcp_section
from rlinfra.clouds.nebius import section as _nebius_section
from rlinfra.clouds.ssh import section as _ssh_section
from rlinfra.errors import UsageError

if TYPE_CHECKING:
    from rlinfra.clouds.base import Cloud

# The clouds this version deploys, by name: the module that holds each one's CLOUD. A profile
# naming another is refused at `validate`.
REGISTRY: dict[str, str] = {
    "local": "rlinfra.clouds.local.cloud",
    "aws": "rlinfra.clouds.aws.cloud",
    "gcp": "rlinfra.clouds.gcp.cloud",
    "ssh": "rlinfra.clouds.ssh.cloud",
    "nebius": "rlinfra.clouds.nebius.cloud",
}

# The clouds' own keys of a profile (``rlinfra.cloud_section``), which the profile model is made
# with. This module imports nothing else of rlinfra but the errors, so that the profile, below
# the clouds, can read this list (the import contract in pyproject.toml holds it to that).
SECTIONS: tuple[CloudSection, ...] = (
    _gcp_section.SECTION,
    _ssh_section.SECTION,
    _nebius_section.SECTION,
)


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
