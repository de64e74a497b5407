"""The Terraform layer's fixtures: the Google provider's reduced schema (fetched once per machine,
read once per test process) for the static checks of the GCP modules and roots."""

from __future__ import annotations

from typing import Any

import pytest

from helpers import provider_schema


@pytest.fixture(scope="session")
def google_schema() -> dict[str, Any]:
    return provider_schema.google_schema()
