"""Clouds: one class each, behind the interface declared in ``clouds/base.py``.

``cloud_for(name)`` gives the cloud a profile names; adding a cloud is a module here with a
``CLOUD`` instance of a :class:`~rlinfra.clouds.base.Cloud` subclass, its Terraform modules, and
its storage tasks, plus its name in ``SUPPORTED``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from rlinfra.errors import UsageError

if TYPE_CHECKING:
    from rlinfra.clouds.base import Cloud

# The clouds this version deploys; a profile naming another is refused at `validate`.
SUPPORTED = ("local", "aws", "gcp", "ssh")


def cloud_for(name: str) -> Cloud:
    """The cloud called ``name`` (its module is imported on first use)."""
    if name not in SUPPORTED:
        raise UsageError(
            f"cloud {name!r} cannot be deployed by this version of rlinfra",
            "Supported clouds: " + ", ".join(SUPPORTED) + ".",
        )
    cloud: Cloud = importlib.import_module(f"rlinfra.clouds.{name}").CLOUD
    return cloud
