"""Clouds: one folder each (``clouds/<name>/``), one class behind the interface declared in
``clouds/base.py``, and this registry, the one place that names them.

``REGISTRY`` maps a cloud's name to the module holding its ``CLOUD`` (an instance of a
:class:`~rlinfra.clouds.base.Cloud` subclass); ``SECTIONS`` lists the clouds' own profile keys.
This module is data only (the profile, below the clouds, reads ``SECTIONS``):
``rlinfra.clouds.registry`` looks clouds up (``cloud_for``, ``CLOUDS``), importing each module
on first use, and ``rlinfra.clouds.planning.make_plan`` plans a profile on them. Adding a cloud is its
folder, its Terraform and its lines here (docs/design.md has the checklist).
"""

from __future__ import annotations

from rlinfra.cloud_section import CloudSection
from rlinfra.clouds.gcp import section as _gcp_section
from rlinfra.clouds.nebius import section as _nebius_section
from rlinfra.clouds.ssh import section as _ssh_section

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
# with. This module imports nothing of rlinfra but these sections, so that the profile, below
# the clouds, can read this list (the import contract in pyproject.toml holds it to that).
SECTIONS: tuple[CloudSection, ...] = (
    _gcp_section.SECTION,
    _ssh_section.SECTION,
    _nebius_section.SECTION,
)
