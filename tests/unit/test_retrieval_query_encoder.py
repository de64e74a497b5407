"""`serving.retrieval.query_encoder`: from the profile to the settings each replica reads."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rlinfra.errors import ProfileError
from rlinfra.profile import profile_from_data
from rlinfra.serving import retrieval_ansible_vars
from rlinfra_node.retrieval.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def profile_with(**changes: object) -> dict[str, object]:
    data: dict[str, object] = yaml.safe_load((ROOT / "profiles/retrieval-cpu.yaml").read_text())
    data["serving"]["retrieval"].update(changes)  # type: ignore[index]
    return data


@pytest.mark.parametrize("value", [None, "library", "float32", "bfloat16"])
def test_the_query_encoder_reaches_the_replicas_settings(value: str | None) -> None:
    changes = {} if value is None else {"query_encoder": value}
    profile = profile_from_data(profile_with(**changes), "p.yaml", "p")
    retrieval = profile.serving.retrieval  # type: ignore[union-attr]
    assert retrieval is not None
    settings = retrieval_ansible_vars(retrieval, ["/checkpoints"])["retrieval_service_settings"]
    assert isinstance(settings, dict)
    assert settings["query_encoder"] == (value or "auto")
    assert Settings.from_dict(settings).query_encoder == (value or "auto")


def test_an_unknown_query_encoder_names_the_field() -> None:
    with pytest.raises(ProfileError) as caught:
        profile_from_data(profile_with(query_encoder="fp16"), "p.yaml", "p")
    message = str(caught.value)
    assert "query_encoder" in message and "p.yaml" in message
