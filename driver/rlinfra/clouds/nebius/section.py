"""The nebius cloud's key of a profile, ``nebius:``: the project everything is made in, an
existing subnet or InfiniBand fabric to use, and the names of the variables that hold the
nodes' S3 key for the checkpoint bucket.

    nebius:
      project_id: project-e00abc123def456    # `up` needs it (or NEBIUS_PROJECT_ID)
      subnet_id: vpcsubnet-e00...            # optional: the nodes join this subnet
      fabric: fabric-3                       # optional: 8-GPU presets' GPU cluster fabric
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from rlinfra.cloud_section import CloudSection
from rlinfra.strict import StrictModel

PROJECT_ID_RE = re.compile(r"^project-[a-z0-9]+$")
SUBNET_ID_RE = re.compile(r"^vpcsubnet-[a-z0-9]+$")
FABRIC_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class NebiusSettings(StrictModel):
    """Where on Nebius AI Cloud the cluster goes."""

    project_id: str | None = Field(
        default=None,
        description="Nebius project id (project-...); default NEBIUS_PROJECT_ID. `up` needs one.",
    )
    subnet_id: str | None = Field(
        default=None, description="An existing subnet (vpcsubnet-...); default: a new network."
    )
    fabric: str | None = Field(
        default=None,
        description="InfiniBand fabric of 8-GPU presets' GPU cluster; default: the catalog's first "
        "for the platform and region.",
    )
    access_key_id_env: str = Field(
        default="NEBIUS_S3_ACCESS_KEY_ID",
        description="Variable holding the nodes' S3 access key id for the bucket.",
    )
    secret_access_key_env: str = Field(
        default="NEBIUS_S3_SECRET_ACCESS_KEY",
        description="Variable holding the nodes' S3 secret access key for the bucket.",
    )

    @field_validator("project_id")
    @classmethod
    def _project(cls, value: str | None) -> str | None:
        if value is not None and not PROJECT_ID_RE.fullmatch(value):
            raise ValueError(f"{value!r} is not a Nebius project id (project-...)")
        return value

    @field_validator("subnet_id")
    @classmethod
    def _subnet(cls, value: str | None) -> str | None:
        if value is not None and not SUBNET_ID_RE.fullmatch(value):
            raise ValueError(f"{value!r} is not a Nebius subnet id (vpcsubnet-...)")
        return value

    @field_validator("fabric")
    @classmethod
    def _fabric(cls, value: str | None) -> str | None:
        if value is not None and not FABRIC_RE.fullmatch(value):
            raise ValueError(f"{value!r} is not a fabric name (e.g. fabric-3)")
        return value

    @field_validator("access_key_id_env", "secret_access_key_env")
    @classmethod
    def _env(cls, value: str) -> str:
        if not ENV_NAME_RE.fullmatch(value):
            raise ValueError(f"{value!r} is not an environment variable name")
        return value


SECTION = CloudSection(
    key="nebius",
    cloud="nebius",
    annotation=NebiusSettings,
    description="Nebius AI Cloud: project, subnet, fabric, the bucket key's variables.",
)
