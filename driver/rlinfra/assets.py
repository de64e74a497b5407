"""Where rlinfra's Terraform modules, Ansible roles and built-in profiles live.

In a source checkout they are the top-level folders next to ``driver/``; in an installed wheel
they are packaged under ``rlinfra/_assets``. ``RLINFRA_ASSETS`` points elsewhere when set.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path


@cache
def assets_root() -> Path:
    override = os.environ.get("RLINFRA_ASSETS")
    if override:
        return Path(override).resolve()
    here = Path(__file__).resolve().parent
    packaged = here / "_assets"
    if packaged.is_dir():
        return packaged
    checkout = here.parent.parent
    if (checkout / "terraform").is_dir() and (checkout / "ansible").is_dir():
        return checkout
    raise RuntimeError(f"rlinfra's assets are missing (looked in {packaged} and {checkout})")


def asset_dir(name: str) -> Path:
    return assets_root() / name
