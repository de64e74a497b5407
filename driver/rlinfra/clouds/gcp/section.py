"""The gcp cloud's key of a profile: ``project``, the Google Cloud project everything is made in
(`up` needs it; default bucket names derive from it)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

from rlinfra.cloud_section import CloudSection

# A Google Cloud project id: 6-30 lowercase letters, digits and hyphens, a letter first.
PROJECT_ID_RE = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")


def _project_id(value: str) -> str:
    if not PROJECT_ID_RE.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a Google Cloud project id (6-30 lowercase letters, digits "
            "and '-', starting with a letter, not ending with '-')"
        )
    return value


SECTION = CloudSection(
    key="project",
    cloud="gcp",
    annotation=Annotated[str, AfterValidator(_project_id)],
    description="Google Cloud project id (cloud gcp only; `up` needs it). Unset elsewhere.",
    after="zones",
)
