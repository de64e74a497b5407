"""Render contexts with fixed facts (paths, key, task id), so rendered files are golden."""

from __future__ import annotations

from pathlib import Path

from rlinfra.context import Context, Controller

GOLDEN_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGoldenKeyGoldenKeyGoldenKeyGoldenKey x"


def fixed_context(
    cluster: str = "c",
    *,
    ssh_public_key: str = GOLDEN_KEY,
    system_python: str = "/usr/bin/python3",
    wheelhouse: str | None = None,
    uv_on_hosts: str | None = None,
) -> Context:
    """The context of cluster ``cluster`` under /srv/rlinfra, as a controller would make it."""
    extra = {"uv_binary_on_hosts": uv_on_hosts} if uv_on_hosts else {}
    return Context(
        deployment_dir=Path(f"/srv/rlinfra/clusters/{cluster}"),
        home=Path("/srv/rlinfra"),
        cache=Path("/srv/rlinfra/cache"),
        ssh_public_key=ssh_public_key,
        task_id=f"{cluster}-0123456789ab",
        controller=Controller(
            uv_binary="/usr/local/bin/uv",
            system_python=system_python,
            wheelhouse=wheelhouse,
            **extra,
        ),
    )
