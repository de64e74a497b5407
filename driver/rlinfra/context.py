"""Facts about the deployment that the pure plan cannot know: paths, keys, the run id."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


def rlinfra_home() -> Path:
    """$RLINFRA_HOME or ~/.rlinfra: a folder (made when first needed), never a file."""
    home = Path(os.environ.get("RLINFRA_HOME") or Path.home() / ".rlinfra").resolve()
    if home.exists() and not home.is_dir():
        from rlinfra.errors import UsageError

        raise UsageError(f"RLINFRA_HOME {home} is not a folder", "Point it at a folder.")
    return home


def rlinfra_cache(home: Path | None = None) -> Path:
    """Downloads shared by every cluster (wheelhouses, uv's cache): $RLINFRA_CACHE or HOME/cache."""
    configured = os.environ.get("RLINFRA_CACHE")
    if configured:
        return Path(configured).resolve()
    return (home or rlinfra_home()) / "cache"


@dataclass(frozen=True)
class Controller:
    """The machine running rlinfra: tools it hands to nodes."""

    uv_binary: str
    system_python: str
    wheelhouse: str | None
    # A copy of uv on this machine's disk that local hosts see (None on other clouds).
    uv_binary_on_hosts: str | None = None
    # RLINFRA_AWS_ENDPOINT_URL: an AWS-compatible endpoint (an emulator) for every service.
    aws_endpoint: str | None = None
    # RLINFRA_TF_PLUGIN_MIRROR: a filesystem mirror of Terraform providers (no registry access).
    tf_plugin_mirror: str | None = None


@dataclass(frozen=True)
class Context:
    deployment_dir: Path
    home: Path
    cache: Path
    ssh_public_key: str
    task_id: str
    controller: Controller

    @property
    def ssh_private_key(self) -> Path:
        return self.deployment_dir / "ssh" / "id_ed25519"

    @property
    def ray_token_file(self) -> Path:
        """The cluster's Ray token on this machine (see rlinfra.deploy.ensure_ray_token)."""
        return self.deployment_dir / "secrets" / "ray_auth_token"
