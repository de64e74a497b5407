"""`serving.retrieval.clients`: other clusters that use a retrieval service."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rlinfra.clouds.planning import make_plan
from rlinfra.errors import ProfileError, UsageError
from rlinfra.profile import profile_from_data
from rlinfra.serving import retrieval_ansible_vars, service_clients

ROOT = Path(__file__).resolve().parents[2]


def retrieval_cpu(**changes: object) -> dict[str, object]:
    data: dict[str, object] = yaml.safe_load((ROOT / "profiles/retrieval-cpu.yaml").read_text())
    data["serving"]["retrieval"].update(changes)  # type: ignore[index]
    return data


def test_clients_make_the_service_listen_for_them_and_open_only_its_port() -> None:
    profile = profile_from_data(retrieval_cpu(clients=["203.0.113.9/28"]), "p.yaml", "p")
    retrieval = profile.serving.retrieval  # type: ignore[union-attr]
    assert retrieval is not None and retrieval.clients == ["203.0.113.0/28"]
    assert retrieval.bind_host == "0.0.0.0"
    assert service_clients(profile.serving) == [{"port": 8000, "cidrs": ["203.0.113.0/28"]}]
    assert retrieval_ansible_vars(retrieval, ["/checkpoints"])["retrieval_service_host"] == (
        "0.0.0.0"
    )
    alone = profile_from_data(retrieval_cpu(), "p.yaml", "p")
    assert alone.serving.retrieval.bind_host == "127.0.0.1"  # type: ignore[union-attr]
    assert service_clients(alone.serving) == []


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"clients": ["0.0.0.0/0"]}, "opens the retrieval service to every network"),
        ({"clients": ["not-a-cidr"]}, "is not an IPv4 CIDR block"),
    ],
)
def test_bad_clients_are_refused(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ProfileError) as caught:
        profile_from_data(retrieval_cpu(**changes), "p.yaml", "p")
    assert message in str(caught.value)


def test_local_clusters_cannot_be_clients() -> None:
    data = yaml.safe_load((ROOT / "profiles/retrieval-local.yaml").read_text())
    data["serving"]["retrieval"]["clients"] = ["10.213.5.0/24"]
    profile = profile_from_data(data, "p.yaml", "p")
    with pytest.raises(UsageError) as caught:
        make_plan(profile, "p.yaml")
    assert caught.value.message.startswith("p.yaml: serving.retrieval.clients: ")
    assert "cannot reach each other" in caught.value.message
