"""Pin sets hold what the programs that run on them import."""

from __future__ import annotations

import pytest
import yaml

from rlinfra.clouds.planning import make_plan
from rlinfra.errors import UsageError
from rlinfra.pins import pin_sets
from rlinfra.profile import known_profiles, load_profile, profile_from_data


def test_every_gpu_set_with_verl_has_flash_attn() -> None:
    """Verl 0.6.0's actor loads flash_attention_2; use_remove_padding imports flash_attn."""
    for pins in pin_sets().values():
        if pins.torch_backend is None or not any(p.startswith("verl") for p in pins.packages):
            continue
        assert any(p.startswith("flash-attn @ ") for p in pins.packages), pins.name
        assert ("flash_attn", "2.8.3") in pins.imports, pins.name
        torch = next(p for p in pins.packages if p.startswith("torch=="))
        wheel = next(p for p in pins.packages if p.startswith("flash-attn @ "))
        # The prebuilt wheel is built for the set's torch (major.minor).
        assert "torch" + ".".join(torch.removeprefix("torch==").split(".")[:2]) in wheel


@pytest.mark.parametrize("name", sorted(known_profiles()))
def test_nodes_that_run_the_retriever_get_its_packages(name: str) -> None:
    profile, source = load_profile(name)
    if profile.serving is None or profile.serving.retrieval is None:
        return
    modules = {module for module, _ in make_plan(profile, source).pins.imports}
    assert {"faiss", "sentence_transformers", "fastapi"} <= modules


def test_a_set_without_retrieval_packages_is_refused_for_a_retriever() -> None:
    data = yaml.safe_load(
        """
        name: r
        cloud: local
        resources: {num_nodes: 1}
        storage: [{bucket: b-1, mount_path: /checkpoints}]
        software: {pin_set: cpu-sandbox, python: system}
        serving: {retrieval: {replicas: 1}}
        """
    )
    profile = profile_from_data(data, "r.yaml", "r")
    with pytest.raises(UsageError) as caught:
        make_plan(profile, "r.yaml")
    assert caught.value.message.startswith("r.yaml: software.pin_set: pin set cpu-sandbox")
