"""Workloads: each profile's rendered training command against the reference recipe, with its fixes.

The reference's overrides are written out here from the reference page (seed-workflows.md), with
rlinfra's paths (data and checkpoints in the bucket) in place of the recipe's $HOME paths. The
JobSpec of every profile is also kept as a golden file (RLINFRA_UPDATE_GOLDEN=1 regenerates).
Nothing here runs Verl: the GPU programs cannot run on this machine.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from helpers.contexts import fixed_context
from rlinfra.clouds.planning import make_plan
from rlinfra.errors import ProfileError, UsageError
from rlinfra.jobspec import job_spec
from rlinfra.plan import Plan
from rlinfra.profile import Overrides, apply_overrides, load_profile, profile_from_data
from rlinfra.render import render
from rlinfra.secrets import resolve_secrets

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "workloads"
UPDATE = os.environ.get("RLINFRA_UPDATE_GOLDEN") == "1"
PROFILES = [
    "h100x1-ppo",
    "h100x1-grpo",
    "h100x2",
    "search-grpo",
    "search-infer-local",
    "search-infer-google",
]


def plan_of(name: str, overrides: Overrides | None = None) -> Plan:
    profile, source = load_profile(name)
    profile, changes = apply_overrides(profile, overrides or Overrides(), source)
    return make_plan(profile, f"profiles/{name}.yaml", overrides=tuple(changes))


def items(text: str) -> list[str]:
    return text.split()


# Workflow 1, as on the reference page (paths: data in the bucket, checkpoints at /checkpoints).
PPO_MATH = items(
    """
    data.train_files=/checkpoints/data/math/train.parquet
    data.val_files=/checkpoints/data/math/test.parquet data.train_batch_size=256
    data.max_prompt_length=1024 data.max_response_length=1024 data.filter_overlong_prompts=True
    actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct actor_rollout_ref.actor.optim.lr=1e-6
    actor_rollout_ref.actor.ppo_mini_batch_size=64
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 actor_rollout_ref.rollout.name=vllm
    actor_rollout_ref.rollout.gpu_memory_utilization=0.4 actor_rollout_ref.rollout.trace.backend=weave
    actor_rollout_ref.rollout.trace.token2text=True
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4
    actor_rollout_ref.actor.fsdp_config.model_dtype=bfloat16 critic.optim.lr=1e-5
    critic.model.path=Qwen/Qwen2.5-0.5B-Instruct critic.ppo_micro_batch_size_per_gpu=4
    critic.model.fsdp_config.model_dtype=bfloat16 algorithm.kl_ctrl.kl_coef=0.001
    trainer.logger=[console,wandb] trainer.val_before_train=False
    trainer.n_gpus_per_node=1 trainer.nnodes=1 trainer.save_freq=10
    trainer.test_freq=1 trainer.default_local_dir=/checkpoints trainer.total_epochs=1
    trainer.project_name=rlinfra-verl trainer.experiment_name=ppo-math
    """
)

# Workflow 2: its own overrides (actor/rollout/ref/model under actor_rollout_ref.).
GRPO_CODE = items(
    """
    algorithm.adv_estimator=grpo data.train_batch_size=32 data.max_prompt_length=256
    data.max_response_length=256 data.truncation=error
    actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct
    actor_rollout_ref.model.use_remove_padding=True
    actor_rollout_ref.model.enable_gradient_checkpointing=True
    actor_rollout_ref.actor.ppo_mini_batch_size=16 actor_rollout_ref.actor.ppo_epochs=1
    actor_rollout_ref.actor.use_kl_loss=False actor_rollout_ref.actor.entropy_coeff=0
    actor_rollout_ref.actor.fsdp_config.param_offload=True
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=True
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16 actor_rollout_ref.rollout.n=1
    actor_rollout_ref.rollout.enable_chunked_prefill=True
    actor_rollout_ref.rollout.max_num_batched_tokens=2048
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16
    actor_rollout_ref.ref.fsdp_config.param_offload=True algorithm.use_kl_in_reward=False
    trainer.critic_warmup=0
    data.train_files=/checkpoints/data/rstar-coder/train.parquet
    data.val_files=/checkpoints/data/rstar-coder/test.parquet
    trainer.experiment_name=grpo-code trainer.default_local_dir=/checkpoints
    """
)

# Workflow 3 (two-node PPO on GSM8K).
PPO_GSM8K = items(
    """
    data.train_files=/checkpoints/data/gsm8k/train.parquet
    data.val_files=/checkpoints/data/gsm8k/test.parquet data.train_batch_size=128
    data.max_prompt_length=512 data.max_response_length=256
    actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct
    critic.model.path=Qwen/Qwen2.5-0.5B-Instruct actor_rollout_ref.actor.optim.lr=1e-6
    critic.optim.lr=1e-5 actor_rollout_ref.actor.ppo_mini_batch_size=64
    critic.ppo_mini_batch_size=64 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4
    critic.ppo_micro_batch_size_per_gpu=4 actor_rollout_ref.rollout.name=vllm
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8
    actor_rollout_ref.rollout.tensor_model_parallel_size=1
    actor_rollout_ref.rollout.gpu_memory_utilization=0.4
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4 algorithm.kl_ctrl.kl_coef=0.001
    trainer.project_name=ppo_training trainer.experiment_name=qwen-2.5-0.5B
    trainer.val_before_train=False trainer.n_gpus_per_node=8 trainer.nnodes=2
    trainer.default_local_dir=/checkpoints trainer.save_freq=10 trainer.test_freq=10
    trainer.total_epochs=3 trainer.logger=[console] trainer.resume_mode=auto
    """
)

# Workflow 7 (search-augmented GRPO), and what --config-name=search_multiturn_grpo sets.
SEARCH_GRPO = items(
    """
    actor_rollout_ref.rollout.name=sglang data.return_raw_chat=True
    actor_rollout_ref.rollout.multi_turn.enable=True
    actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2
    actor_rollout_ref.rollout.multi_turn.tool_config_path=/checkpoints/rlinfra/search_tool_config.yaml
    algorithm.adv_estimator=grpo actor_rollout_ref.actor.use_kl_loss=True
    actor_rollout_ref.actor.kl_loss_coef=0.001 actor_rollout_ref.actor.kl_loss_type=low_var_kl
    algorithm.use_kl_in_reward=False data.max_prompt_length=4096 data.max_response_length=3000
    actor_rollout_ref.rollout.max_model_len=15000 actor_rollout_ref.rollout.n=5
    actor_rollout_ref.model.path=Qwen/Qwen2.5-3B-Instruct data.train_batch_size=512
    data.val_batch_size=256 trainer.total_training_steps=10 trainer.save_freq=5
    trainer.test_freq=5 actor_rollout_ref.actor.optim.lr=1e-6
    actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.285
    actor_rollout_ref.actor.fsdp_config.param_offload=True
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=True
    actor_rollout_ref.actor.fsdp_config.model_dtype=bfloat16
    actor_rollout_ref.rollout.multi_turn.format=qwen data.shuffle=False
    actor_rollout_ref.hybrid_engine=True
    data.filter_overlong_prompts=True data.truncation=error
    actor_rollout_ref.model.use_remove_padding=True
    actor_rollout_ref.actor.ppo_mini_batch_size=16
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4
    actor_rollout_ref.actor.entropy_coeff=0
    actor_rollout_ref.model.enable_gradient_checkpointing=True
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8
    actor_rollout_ref.rollout.tensor_model_parallel_size=1
    actor_rollout_ref.rollout.gpu_memory_utilization=0.4
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8
    trainer.critic_warmup=0 trainer.val_before_train=False trainer.logger=[console]
    trainer.total_epochs=1 trainer.n_gpus_per_node=1 trainer.nnodes=1
    trainer.project_name=search_r1_like_async_rl
    trainer.experiment_name=qwen2.5-3b-it_rm-searchR1-like-sgl-multiturn
    """
)
# What rlinfra adds to the search recipe: its data and checkpoint paths, and resuming.
SEARCH_GRPO_RLINFRA = items(
    """
    data.train_files=/checkpoints/data/search-r1-small/train.parquet
    data.val_files=/checkpoints/data/search-r1-small/test.parquet
    trainer.default_local_dir=/checkpoints trainer.resume_mode=auto
    """
)

ALWAYS = ["trainer.resume_mode=auto", "trainer.default_local_dir=/checkpoints"]


def overrides_of(plan: Plan) -> dict[str, str]:
    spec = job_spec(plan)
    out: dict[str, str] = {}
    for item in spec.overrides:
        key, _, value = item.partition("=")
        assert key not in out, f"{key} given twice"
        out[key] = value
    return out


@pytest.mark.parametrize(
    ("name", "reference"),
    [
        ("h100x1-ppo", PPO_MATH),
        ("h100x1-grpo", GRPO_CODE),
        ("h100x2", PPO_GSM8K),
        ("search-grpo", SEARCH_GRPO),
    ],
)
def test_training_command_has_every_reference_override(name: str, reference: list[str]) -> None:
    spec = job_spec(plan_of(name))
    assert spec.entrypoint[:3] == ("python3", "-m", "verl.trainer.main_ppo")
    missing = [item for item in [*reference, *ALWAYS] if item not in spec.overrides]
    assert not missing, f"{name}: missing or different: {missing}"
    # No key twice, and nothing the pinned Verl config does not know (checked in job_spec).
    assert len(overrides_of(plan_of(name))) == len(spec.overrides)


@pytest.mark.parametrize("name", ["search-grpo", "search-grpo-external"])
def test_search_grpo_overrides_equal_the_recipes(name: str) -> None:
    """Nothing more and nothing different: the recipe's command line and config, plus paths."""
    plan = plan_of(name, Overrides(env={"RETRIEVAL_SERVICE_URL": "http://10.0.0.5:8000"}))
    spec = job_spec(plan)
    extra = sorted(set(spec.overrides) - set(SEARCH_GRPO) - set(SEARCH_GRPO_RLINFRA))
    missing = sorted(set(SEARCH_GRPO) - set(spec.overrides))
    assert not extra and not missing, (extra, missing)


def test_ppo_math_fixes_and_after_steps() -> None:
    spec = job_spec(plan_of("h100x1-ppo"))
    assert spec.runtime_env_vars == {"VLLM_USE_V1": "1"}
    dataprep = spec.data_steps[0]
    assert dataprep.argv[:3] == ("python3", "-m", "rlinfra_node.dataprep")
    assert dataprep.done_marker == "/checkpoints/data/math/_SUCCESS"
    merge, serve = spec.after_steps
    assert merge.argv == (
        "python3",
        "-m",
        "rlinfra_node.after_training",
        "--checkpoint-dir",
        "/checkpoints",
        "--target",
        "/checkpoints/hf_model",
        "--program",
        "verl",
        # 0.5B ties its embeddings: the flag stays for it.
        "--tie-word-embedding",
        # Pushed only when HF_TOKEN is set (after_training checks its environment).
        "--hf-upload-path",
        "maknee/verl-ppo-math",
    )
    # Then the reference's `vllm serve /checkpoints/hf_model --port 9090`, supervised.
    assert serve.argv == (
        "python3",
        "-m",
        "rlinfra_node.model_server",
        "deploy",
        "--engine",
        "vllm",
        "--model",
        "/checkpoints/hf_model",
        "--host",
        "127.0.0.1",
        "--port",
        "9090",
    )


def test_grpo_code_has_the_three_reference_bugs_fixed() -> None:
    spec = job_spec(plan_of("h100x1-grpo"))
    overrides = overrides_of(plan_of("h100x1-grpo"))
    # 1. Code rows: the rstar-coder converter labels rows "codecontests" with test cases (Verl's
    #    code scorer); "openai/gsm8k" would route them to the GSM8K "####" rule.
    dataprep = spec.data_steps[0]
    assert dataprep.argv[dataprep.argv.index("--dataset") + 1] == "rstar-coder"
    assert "synthetic_rl_testcase" in dataprep.argv[dataprep.argv.index("--data-files") + 1]
    assert "openai/gsm8k" not in json.dumps(spec.to_json())
    # 2. The upload is decided by after_training from HF_TOKEN being set (not being empty).
    merge, _serve = spec.after_steps
    assert merge.argv[merge.argv.index("--hf-upload-path") + 1] == "maknee/verl-grpo-code"
    # 3. No --tie-word-embedding for the 7B model.
    assert "--tie-word-embedding" not in merge.argv
    # GRPO has no critic: rlinfra adds no critic keys.
    assert not [k for k in overrides if k.startswith("critic.")]


def test_multinode_runtime_env_and_env_flags_flow_into_the_command() -> None:
    base = job_spec(plan_of("h100x2"))
    assert base.runtime_env_vars == {
        "CUDA_DEVICE_MAX_CONNECTIONS": "1",
        "HF_HUB_ENABLE_HF_TRANSFER": "1",
        "TORCH_NCCL_AVOID_RECORD_STREAMS": "1",
    }
    plan = plan_of(
        "h100x2",
        Overrides(
            num_nodes=4,
            env={
                "TOTAL_EPOCHS": "10",
                "MODEL_NAME": "Qwen/Qwen2.5-1.5B-Instruct",
                "ACTOR_LR": "5e-7",
                "CRITIC_LR": "2e-5",
            },
        ),
    )
    overrides = overrides_of(plan)
    assert overrides["trainer.total_epochs"] == "10"
    assert overrides["actor_rollout_ref.model.path"] == "Qwen/Qwen2.5-1.5B-Instruct"
    assert overrides["critic.model.path"] == "Qwen/Qwen2.5-1.5B-Instruct"
    assert overrides["actor_rollout_ref.actor.optim.lr"] == "5e-7"
    assert overrides["critic.optim.lr"] == "2e-5"
    assert overrides["trainer.nnodes"] == "4"
    assert overrides["trainer.n_gpus_per_node"] == "8"
    single = overrides_of(plan_of("h100x1-ppo", Overrides(accelerators=["H100:8"])))
    assert single["trainer.n_gpus_per_node"] == "8"
    assert job_spec(plan).data_steps[-1].argv[-1] == "Qwen/Qwen2.5-1.5B-Instruct"


def test_search_external_needs_the_url_and_rewrites_the_tool_config() -> None:
    # A review plans without the URL; `up` and `run` refuse with the flag to pass.
    review = job_spec(plan_of("search-grpo-external"))
    assert review.files == () and review.probe_steps == ()
    assert "RETRIEVAL_SERVICE_URL is not set" in review.warnings[0]
    with pytest.raises(UsageError) as err:
        review.refuse_unset()
    assert "workload.search_tool.url: retrieval service URL is empty" in err.value.message
    assert "--env RETRIEVAL_SERVICE_URL=http://HOST:PORT" in err.value.message
    with pytest.raises(ProfileError, match="is not an http"):
        plan_of("search-grpo-external", Overrides(env={"RETRIEVAL_SERVICE_URL": "ftp://x"}))
    plan = plan_of(
        "search-grpo-external", Overrides(env={"RETRIEVAL_SERVICE_URL": "http://10.0.0.5:8000/"})
    )
    spec = job_spec(plan)
    ((path, text),) = spec.files
    assert path == "/checkpoints/rlinfra/search_tool_config.yaml"
    assert overrides_of(plan)["actor_rollout_ref.rollout.multi_turn.tool_config_path"] == path
    tool = yaml.safe_load(text)["tools"][0]
    assert tool["class_name"] == "verl.tools.search_tool.SearchTool"
    assert tool["config"]["type"] == "native"
    assert tool["config"]["retrieval_service_url"] == "http://10.0.0.5:8000/retrieve"
    assert tool["config"]["num_workers"] == 8
    (probe,) = spec.probe_steps
    assert probe.argv == (
        "python3",
        "-m",
        "rlinfra_node.search_tool",
        "probe",
        "--url",
        "http://10.0.0.5:8000",
        "--tries",
        "30",
        "--interval",
        "5",
    )
    bad = Overrides(env={"RETRIEVAL_SERVICE_URL": "10.0.0.5:8000"})
    with pytest.raises(ProfileError, match="is not an http"):
        plan_of("search-grpo-external", bad)


def test_search_in_node_uses_the_local_retriever_and_dataset_size_flows() -> None:
    plan = plan_of("search-grpo", Overrides(env={"DATASET_SIZE": "medium"}))
    spec = job_spec(plan)
    tool = yaml.safe_load(spec.files[0][1])["tools"][0]
    assert tool["config"]["retrieval_service_url"] == "http://127.0.0.1:8000/retrieve"
    assert tool["config"]["num_workers"] == 120
    dataprep = spec.data_steps[0]
    assert dataprep.argv[-2:] == ("--size", "medium")
    assert dataprep.argv[dataprep.argv.index("--out") + 1] == "/checkpoints/data/search-r1-medium"
    assert (
        overrides_of(plan)["data.train_files"] == "/checkpoints/data/search-r1-medium/train.parquet"
    )
    assert plan.profile.serving is not None and plan.profile.serving.retrieval is not None
    assert plan.profile.serving.retrieval.replicas == 1
    with pytest.raises(ProfileError, match="'huge' .*is not a dataset size"):
        plan_of("search-grpo", Overrides(env={"DATASET_SIZE": "huge"}))


def test_google_inference_requires_both_keys_before_anything() -> None:
    plan = plan_of("search-infer-google")
    spec = job_spec(plan)
    assert spec.entrypoint[:3] == ("python3", "-m", "rlinfra_node.search_infer")
    assert "google" in spec.entrypoint and not spec.probe_steps
    profile = plan.profile
    with pytest.raises(UsageError, match="secrets.GOOGLE_API_KEY: required secret is not set"):
        resolve_secrets(profile, {}, {}, plan.source)
    with pytest.raises(UsageError, match="secrets.GOOGLE_CSE_ID: required secret is not set"):
        resolve_secrets(profile, {}, {"GOOGLE_API_KEY": "k"}, plan.source)
    # A Google profile that forgot to declare them is refused by the workload check.
    data = yaml.safe_load(Path(plan.source).read_text()) if Path(plan.source).is_file() else None
    data = data or yaml.safe_load(
        (Path(__file__).parents[2] / "profiles" / "search-infer-google.yaml").read_text()
    )
    data["secrets"] = {"HF_TOKEN": "optional"}
    with pytest.raises(ProfileError, match="needs GOOGLE_API_KEY declared as a required secret"):
        make_plan(profile_from_data(data, "g.yaml", "g"), "g.yaml")


def test_secrets_never_reach_argv_or_runtime_env() -> None:
    data = yaml.safe_load((Path(__file__).parents[2] / "profiles" / "h100x1-ppo.yaml").read_text())
    data["workload"]["overrides"]["trainer.experiment_name"] = "${WANDB_API_KEY}"
    with pytest.raises(ProfileError, match=r"\$\{WANDB_API_KEY\} is a secret"):
        make_plan(profile_from_data(data, "s.yaml", "s"), "s.yaml")
    data = yaml.safe_load((Path(__file__).parents[2] / "profiles" / "h100x1-ppo.yaml").read_text())
    data["workload"]["runtime_env"]["HF_TOKEN"] = "x"
    with pytest.raises(ProfileError, match="workload.runtime_env.HF_TOKEN: HF_TOKEN is a secret"):
        make_plan(profile_from_data(data, "s.yaml", "s"), "s.yaml")
    for name in PROFILES:
        plan = plan_of(name)
        spec = json.dumps(job_spec(plan).to_json())
        for secret in plan.profile.secrets:
            assert "${" + secret not in spec


def test_fixed_overrides_cannot_be_changed() -> None:
    data = yaml.safe_load((Path(__file__).parents[2] / "profiles" / "h100x1-ppo.yaml").read_text())
    data["workload"]["overrides"]["trainer.nnodes"] = 3
    with pytest.raises(ProfileError) as err:
        make_plan(profile_from_data(data, "f.yaml", "f"), "f.yaml")
    assert err.value.field == "workload.overrides.trainer.nnodes"
    assert "rlinfra sets it to '1' from the plan" in err.value.message
    data["workload"]["overrides"]["trainer.nnodes"] = "${NUM_NODES}"
    data["workload"]["overrides"]["trainer.resume_mode"] = "disable"
    with pytest.raises(ProfileError, match="trainer.resume_mode: is 'disable'"):
        make_plan(profile_from_data(data, "f.yaml", "f"), "f.yaml")


def test_unknown_and_unbraced_variables_name_the_field() -> None:
    data = yaml.safe_load((Path(__file__).parents[2] / "profiles" / "h100x1-ppo.yaml").read_text())
    data["workload"]["overrides"]["trainer.total_epochs"] = "${TOTAL_EPOCH}"
    with pytest.raises(ProfileError) as err:
        make_plan(profile_from_data(data, "v.yaml", "v"), "v.yaml")
    assert err.value.message == (
        "v.yaml: workload.overrides.trainer.total_epochs: unknown variable ${TOTAL_EPOCH}"
    )
    assert "TOTAL_EPOCHS" in (err.value.hint or "")
    data["workload"]["overrides"]["trainer.total_epochs"] = "$TOTAL_EPOCHS"
    with pytest.raises(ProfileError, match=r"\$TOTAL_EPOCHS is not expanded"):
        make_plan(profile_from_data(data, "v.yaml", "v"), "v.yaml")


def test_tie_word_embedding_refused_for_an_untied_model() -> None:
    data = yaml.safe_load((Path(__file__).parents[2] / "profiles" / "h100x1-grpo.yaml").read_text())
    data["workload"]["after"]["merge"]["tie_word_embedding"] = True
    with pytest.raises(ProfileError, match="Qwen2.5-7B-Instruct does not tie its word embeddings"):
        make_plan(profile_from_data(data, "t.yaml", "t"), "t.yaml")


def test_verl_on_the_local_cloud_runs_in_cpu_mode_with_the_same_overrides() -> None:
    data = {
        "cloud": "local",
        "resources": {"num_nodes": 2},
        "env": {"TOTAL_EPOCHS": "2"},
        "storage": [{"bucket": "rlinfra-local-checkpoints", "mount_path": "/checkpoints"}],
        "workload": {
            "type": "ppo",
            "model": "${CHECKPOINT_DIR}/models/tiny",
            "random_model": {"hidden": 32},
            "data": {"dataset": "gsm8k", "source": "/data/gsm8k"},
            "overrides": {
                "data.train_files": "${DATA_DIR}/train.parquet",
                "trainer.total_epochs": "${TOTAL_EPOCHS}",
                "trainer.save_freq": 1,
            },
            "after": {"merge": {}},
        },
    }
    plan = make_plan(profile_from_data(data, "l.yaml", "l"), "l.yaml")
    spec = job_spec(plan)
    assert spec.entrypoint[:3] == ("python3", "-m", "rlinfra_node.verl_cpu.main_ppo")
    for item in (
        "data.train_files=/checkpoints/data/gsm8k/train.parquet",
        "trainer.total_epochs=2",
        "trainer.nnodes=2",
        "trainer.n_gpus_per_node=1",
        "trainer.device=cpu",
        "actor_rollout_ref.rollout.name=hf",
        "trainer.resume_mode=auto",
        "trainer.default_local_dir=/checkpoints",
        "critic.model.path=/checkpoints/models/tiny",
    ):
        assert item in spec.overrides, item
    # The model is made on the node (no hub here); the data comes from the local path.
    assert [s.name for s in spec.data_steps] == ["dataprep", "make-model"]
    made = spec.data_steps[1]
    assert made.argv[:3] == ("python3", "-m", "rlinfra_node.tiny_model")
    assert made.argv[made.argv.index("--hidden") + 1] == "32"
    assert made.done_marker == "/checkpoints/models/tiny/_SUCCESS"
    assert spec.data_steps[0].argv[spec.data_steps[0].argv.index("--source") + 1] == "/data/gsm8k"
    assert spec.after_steps[0].argv[:3] == ("python3", "-m", "rlinfra_node.after_training")
    assert spec.warnings == ()
    # Every node offers what CPU mode's workers ask Ray for.
    from rlinfra.jobspec import ray_node_resources

    assert ray_node_resources(plan) == (1, {"cpu": 1})


def test_cpu_mode_never_reaches_gpu_profiles() -> None:
    from rlinfra.jobspec import cpu_mode, ray_node_resources

    for name in ("h100x1-ppo", "h100x1-grpo", "h100x2", "search-grpo"):
        plan = plan_of(name)
        assert not cpu_mode(plan), name
        assert ray_node_resources(plan) == (None, {}), name
        spec = job_spec(plan)
        assert spec.entrypoint[2] != "rlinfra_node.verl_cpu.main_ppo", name
        assert "trainer.device=cpu" not in spec.overrides, name


def test_random_model_needs_a_path() -> None:
    data = {
        "cloud": "local",
        "storage": [{"bucket": "rlinfra-local-checkpoints"}],
        "workload": {
            "type": "ppo",
            "model": "Qwen/Qwen2.5-0.5B-Instruct",
            "random_model": {},
            "data": {"dataset": "gsm8k"},
        },
    }
    with pytest.raises(ProfileError, match="workload.model: .* is not a path on the node"):
        make_plan(profile_from_data(data, "r.yaml", "r"), "r.yaml")


def test_training_needs_a_bucket() -> None:
    data = {
        "cloud": "local",
        "workload": {
            "type": "ppo",
            "model": "m",
            "data": {"dataset": "gsm8k"},
        },
    }
    with pytest.raises(ProfileError, match="storage: a ppo workload keeps its checkpoints"):
        make_plan(profile_from_data(data, "b.yaml", "b"), "b.yaml")


def test_workload_model_errors_name_the_field() -> None:
    bad = {"workload": {"type": "ppo", "model": "m", "data": {"dataset": "gsm8k"}, "overide": {}}}
    with pytest.raises(ProfileError, match="workload.overide: unknown key") as err:
        profile_from_data(bad, "w.yaml", "w")
    assert err.value.hint == "Did you mean 'overrides'?"
    bad = {"workload": {"type": "ppo", "model": "m", "data": {"dataset": "gsm8k", "size": "small"}}}
    with pytest.raises(ProfileError, match="size is only for the search-r1 dataset"):
        profile_from_data(bad, "w.yaml", "w")
    bad = {
        "workload": {
            "type": "grpo",
            "model": "m",
            "data": {"dataset": "math"},
            "after": {"hf_upload": "a/b"},
        }
    }
    with pytest.raises(ProfileError, match="hf_upload needs merge"):
        profile_from_data(bad, "w.yaml", "w")


def test_render_writes_job_json_equal_to_the_spec() -> None:
    plan = plan_of("h100x1-ppo")
    files = render(plan, fixed_context())
    assert json.loads(files["job.json"]) == json.loads(json.dumps(job_spec(plan).to_json()))
    assert "job.json" in render(plan_of_local(), fixed_context())  # its stand-in PPO job
    assert "job.json" not in render(plan_of("retrieval-local"), fixed_context())


def plan_of_local() -> Plan:
    profile, _ = load_profile("local")
    return make_plan(profile, "profiles/local.yaml")


@pytest.mark.parametrize("name", PROFILES)
def test_job_spec_golden(name: str) -> None:
    spec = job_spec(plan_of(name))
    text = json.dumps(spec.to_json(), indent=2) + "\n"
    path = GOLDEN / f"{name}.json"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.is_file(), f"missing golden file {path}; run with RLINFRA_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{name} differs from its golden file"
    assert job_spec(plan_of(name)) == spec  # deterministic


def test_tensor_sharing_workloads_get_ptrace_and_shared_memory_on_their_hosts() -> None:
    from rlinfra.render import ansible_vars

    search = ansible_vars(plan_of("search-grpo"), fixed_context())
    assert search["base_ptrace_scope"] == "0" and search["base_min_shm_gib"] == 16
    ppo = ansible_vars(plan_of("h100x1-ppo"), fixed_context())
    assert "base_ptrace_scope" not in ppo and "base_min_shm_gib" not in ppo
    assert "base_ptrace_scope" not in ansible_vars(plan_of_local(), fixed_context())


def test_every_workload_type_has_one_kind_and_a_profile_reads_it() -> None:
    from typing import get_args

    from rlinfra.workloads.model import KINDS, WorkloadType

    assert sorted(KINDS) == sorted(get_args(WorkloadType))
    profile, _ = load_profile("search-grpo")
    assert profile.workload is not None and profile.workload.kind is KINDS["search-grpo"]
    assert profile.workload.kind.needs_search_tool and profile.workload.kind.trains
