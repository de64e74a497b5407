"""Override checks against the pinned Verl release's own config.

The snapshot test reads the REAL verl package (installed with --no-deps by `make venv`; pure
Python, no torch, no GPU) and regenerates rlinfra's shipped key tree from it.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlinfra.clouds.planning import make_plan
from rlinfra.errors import ProfileError
from rlinfra.jobspec import job_spec
from rlinfra.profile import Overrides, apply_overrides, load_profile, profile_from_data
from rlinfra.workloads import memory
from rlinfra.workloads.verl_config import (
    CONFIG_FILE,
    DATA_DIR,
    VERL_VERSION,
    check_key,
    installed_config,
    snapshot,
    verl_config,
)

PROFILES_DIR = Path(__file__).resolve().parents[2] / "profiles"

# Keys the reference recipes set that not every Verl release has (why 0.6.0 is pinned).
RECIPE_KEYS = [
    "actor_rollout_ref.rollout.trace.backend",
    "actor_rollout_ref.rollout.trace.token2text",
    "actor_rollout_ref.actor.fsdp_config.model_dtype",
    "critic.model.fsdp_config.model_dtype",
    "actor_rollout_ref.rollout.multi_turn.enable",
    "actor_rollout_ref.rollout.multi_turn.max_assistant_turns",
    "actor_rollout_ref.rollout.multi_turn.tool_config_path",
    "actor_rollout_ref.rollout.multi_turn.format",
    "data.return_raw_chat",
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio",
    "actor_rollout_ref.rollout.max_model_len",
    "trainer.resume_mode",
]


def profile_data(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((PROFILES_DIR / f"{name}.yaml").read_text())
    return data


def test_snapshot_matches_the_real_verl_package() -> None:
    try:
        version, text = installed_config()
    except metadata.PackageNotFoundError:
        pytest.fail(
            f"verl is not installed: pip install --no-deps verl=={VERL_VERSION} (make venv)"
        )
    assert version == VERL_VERSION, f"installed verl {version}, rlinfra pins {VERL_VERSION}"
    real = snapshot(text, version)
    shipped = verl_config(VERL_VERSION)
    assert dict(shipped.keys) == real["keys"], (
        f"{DATA_DIR}/{VERL_VERSION}.json is stale: python -m rlinfra.workloads --write"
    )
    assert real["source"] == CONFIG_FILE
    assert len(real["keys"]) > 400


def test_the_pinned_release_has_every_recipe_key() -> None:
    keys = verl_config().keys
    assert [k for k in RECIPE_KEYS if k not in keys] == []


def test_unknown_key_names_file_field_and_closest_key() -> None:
    data = profile_data("h100x1-ppo")
    data["workload"]["overrides"]["actor_rollout_ref.actor.optim.lrr"] = "1e-6"
    with pytest.raises(ProfileError) as err:
        make_plan(profile_from_data(data, "profiles/x.yaml", "x"), "profiles/x.yaml")
    assert err.value.message == (
        "profiles/x.yaml: workload.overrides.actor_rollout_ref.actor.optim.lrr: "
        f"not a Verl {VERL_VERSION} config key"
    )
    assert err.value.hint == "Did you mean actor_rollout_ref.actor.optim.lr?"


@pytest.mark.parametrize(
    ("wrong", "meant"),
    [
        ("trainer.total_epoch", "trainer.total_epochs"),
        (
            "actor_rollout_ref.rollout.gpu_memory_utilisation",
            "actor_rollout_ref.rollout.gpu_memory_utilization",
        ),
        ("critic.model.fsdp_config.model_dtpye", "critic.model.fsdp_config.model_dtype"),
        ("actor_rollout_ref.optim.lr", "actor_rollout_ref.actor.optim.lr"),
    ],
)
def test_close_matches(wrong: str, meant: str) -> None:
    problem = check_key(verl_config(), wrong, "1")
    assert problem is not None
    assert problem[1] == f"Did you mean {meant}?"


def test_hydra_add_and_force_add_prefixes() -> None:
    config = verl_config()
    assert check_key(config, "+trainer.my_new_key", "1") is None
    assert check_key(config, "++trainer.nnodes", "2") is None
    assert check_key(config, "++trainer.whatever", "2") is None
    problem = check_key(config, "+trainer.nnodes", "2")
    assert problem is not None and "'+' only adds new keys" in problem[0]
    assert check_key(config, "~trainer.nnodes", "") is None
    problem = check_key(config, "~trainer.nope", "")
    assert problem is not None and "not a Verl" in problem[0]


def test_values_are_checked_against_the_default_kind() -> None:
    config = verl_config()
    assert check_key(config, "trainer.total_epochs", "3") is None
    assert check_key(config, "actor_rollout_ref.actor.entropy_coeff", "0.001") is None
    assert check_key(config, "trainer.logger", "[console,wandb]") is None
    assert check_key(config, "data.filter_overlong_prompts", "True") is None
    assert check_key(config, "actor_rollout_ref.model.path", "${oc.env:MODEL}") is None
    bad = {
        "trainer.total_epochs": "ten",
        "data.filter_overlong_prompts": "yes",
        "trainer.logger": "console",
        "actor_rollout_ref.actor.optim": "1e-6",
    }
    for key, value in bad.items():
        assert check_key(config, key, value) is not None, key


def test_env_driven_values_are_validated_and_blamed_on_the_flag() -> None:
    profile, source = load_profile("h100x2")
    profile, changes = apply_overrides(profile, Overrides(env={"TOTAL_EPOCHS": "ten"}), source)
    with pytest.raises(ProfileError) as err:
        make_plan(profile, "profiles/h100x2.yaml", overrides=tuple(changes))
    assert err.value.field == "workload.overrides.trainer.total_epochs"
    assert "'ten' is not a number" in err.value.message
    assert "(from --env TOTAL_EPOCHS)" in err.value.message


def test_env_driven_keys_are_checked_too() -> None:
    data = profile_data("h100x1-ppo")
    data["env"]["ROLE"] = "actor"
    data["workload"]["overrides"]["actor_rollout_ref.${ROLE}.ppo_epochs"] = 2
    plan = make_plan(profile_from_data(data, "k.yaml", "k"), "k.yaml")
    assert "actor_rollout_ref.actor.ppo_epochs=2" in job_spec(plan).overrides
    profile, changes = apply_overrides(plan.profile, Overrides(env={"ROLE": "actr"}), "k.yaml")
    with pytest.raises(ProfileError, match=r"actor_rollout_ref\.actr\.ppo_epochs.*not a Verl"):
        make_plan(profile, "k.yaml", overrides=tuple(changes))


def test_verl_on_nodes_without_gpus_runs_in_cpu_mode() -> None:
    """No GPU: the same main_ppo, through rlinfra's CPU mode, with its overrides in the job."""
    data = profile_data("h100x1-ppo")
    data.pop("resources")
    data["resources"] = {"cpus": 32, "memory_gb": 128}
    data["workload"]["overrides"]["trainer.logger"] = ["console"]
    data["workload"]["overrides"]["actor_rollout_ref.rollout.name"] = "hf"
    spec = job_spec(make_plan(profile_from_data(data, "c.yaml", "c"), "c.yaml"))
    assert spec.entrypoint[:3] == ("python3", "-m", "rlinfra_node.verl_cpu.main_ppo")
    for item in ("trainer.device=cpu", "trainer.n_gpus_per_node=1", "critic.strategy=fsdp2"):
        assert item in spec.overrides, item
    # A setting CPU mode owns may be repeated, not changed.
    data["workload"]["overrides"]["actor_rollout_ref.rollout.name"] = "vllm"
    with pytest.raises(ProfileError, match="rollout.name.*rlinfra sets it to 'hf'"):
        make_plan(profile_from_data(data, "c.yaml", "c"), "c.yaml")


def test_model_sizes() -> None:
    assert memory.model_params_billion("Qwen/Qwen2.5-7B-Instruct") == pytest.approx(7.62)
    assert memory.model_params_billion("someone/Mistral-Nemo-12B-v1") == 12.0
    assert memory.model_params_billion("org/tiny-500M") == pytest.approx(0.5)
    assert memory.model_params_billion("org/llama-3.1-8b-instruct") == 8.0
    assert memory.model_params_billion("/checkpoints/hf_model") is None


def test_memory_estimate_counts_offload() -> None:
    full = memory.estimate({}, 7.62, 1, 80, with_critic=False, with_ref=True)
    offloaded = memory.estimate(
        {
            "actor_rollout_ref.actor.fsdp_config.param_offload": "True",
            "actor_rollout_ref.actor.fsdp_config.optimizer_offload": "True",
            "actor_rollout_ref.ref.fsdp_config.param_offload": "True",
        },
        7.62,
        1,
        80,
        with_critic=False,
        with_ref=True,
    )
    # fp32 weights + grads (8 B) + Adam (8 B) + bf16 reference (2 B) per parameter.
    assert full.per_gpu_gib == pytest.approx(7.62e9 * 18 / 1024**3)
    assert full.too_large
    assert offloaded.per_gpu_gib == 0.0 and not offloaded.too_large
    sharded = memory.estimate({}, 7.62, 16, 80, with_critic=False, with_ref=True)
    assert sharded.per_gpu_gib == pytest.approx(full.per_gpu_gib / 16)


def test_memory_warning_for_a_big_model_never_for_the_recipes() -> None:
    for name in ("h100x1-ppo", "h100x1-grpo", "h100x2", "search-grpo"):
        profile, source = load_profile(name)
        assert job_spec(make_plan(profile, source)).warnings == (), name
    data = profile_data("h100x1-grpo")
    for key in (
        "actor_rollout_ref.actor.fsdp_config.param_offload",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
    ):
        data["workload"]["overrides"][key] = False
    plan = make_plan(profile_from_data(data, "m.yaml", "m"), "m.yaml")  # a warning, not a refusal
    (warning,) = job_spec(plan).warnings
    assert warning.startswith("m.yaml: workload: Qwen/Qwen2.5-7B-Instruct may not fit")
    assert "80 GiB GPUs" in warning and "param_offload" in warning
