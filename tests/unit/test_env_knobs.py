"""The seed recipes' knobs are env variables that change the run, and `plan` says where each
--env lands; W&B logging follows the optional key, decided where the key is (the job).

The knob names and defaults are the seed recipes' (seed-workflows.md and the files it was read
from).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlinfra.clouds.planning import make_plan
from rlinfra.jobspec import job_spec
from rlinfra.plan import Plan
from rlinfra.profile import Overrides, apply_overrides, known_profiles, load_profile
from rlinfra_node.job_runner import entrypoint, plan_steps

ROOT = Path(__file__).resolve().parents[2]
RLINFRA = str(Path(sys.executable).with_name("rlinfra"))

# Knob -> (a value to give, the Hydra key that must carry it).
TRAINER_KNOBS = {
    "TOTAL_EPOCHS": ("7", "trainer.total_epochs"),
    "TOTAL_STEPS": ("13", "trainer.total_training_steps"),
    "TRAIN_BATCH_SIZE": ("64", "data.train_batch_size"),
    "VAL_BATCH_SIZE": ("32", "data.val_batch_size"),
    "SAVE_FREQ": ("3", "trainer.save_freq"),
    "TEST_FREQ": ("4", "trainer.test_freq"),
    "MODEL_NAME": ("Qwen/Qwen2.5-1.5B-Instruct", "actor_rollout_ref.model.path"),
    "ACTOR_LR": ("3e-6", "actor_rollout_ref.actor.optim.lr"),
    "CRITIC_LR": ("2e-5", "critic.optim.lr"),
}
# The search recipe's defaults (its file's `envs:`).
SEARCH_DEFAULTS = {
    "DATASET_SIZE": "small",
    "TOTAL_EPOCHS": "1",
    "TOTAL_STEPS": "10",
    "TRAIN_BATCH_SIZE": "512",
    "VAL_BATCH_SIZE": "256",
    "SAVE_FREQ": "5",
    "TEST_FREQ": "5",
    "MODEL_NAME": "Qwen/Qwen2.5-3B-Instruct",
}
URL = {"RETRIEVAL_SERVICE_URL": "http://10.0.0.5:8000"}


def plan_of(name: str, env: dict[str, str]) -> Plan:
    profile, source = load_profile(name)
    profile, changes = apply_overrides(profile, Overrides(env=env), source)
    return make_plan(profile, source, overrides=tuple(changes))


def training_profiles() -> list[str]:
    out = []
    for name in sorted(known_profiles()):
        profile, _ = load_profile(name)
        if profile.workload is not None and profile.workload.type != "search-inference":
            out.append(name)
    return out


@pytest.mark.parametrize("name", ["search-grpo", "search-grpo-external"])
def test_search_profiles_carry_every_seed_knob_with_its_default(name: str) -> None:
    profile, _ = load_profile(name)
    assert {k: profile.env.get(k) for k in SEARCH_DEFAULTS} == SEARCH_DEFAULTS


@pytest.mark.parametrize("name", training_profiles())
def test_each_knob_given_with_env_reaches_the_overrides(name: str) -> None:
    profile, _ = load_profile(name)
    knobs = [k for k in TRAINER_KNOBS if k in profile.env]
    base = dict(URL) if "RETRIEVAL_SERVICE_URL" in profile.env else {}
    for knob in knobs:
        value, key = TRAINER_KNOBS[knob]
        before = job_spec(plan_of(name, base)).overrides
        after = job_spec(plan_of(name, {**base, knob: value})).overrides
        assert f"{key}={value}" in after, (name, knob)
        assert f"{key}={value}" not in before, (name, knob)
    if "DATASET_SIZE" in profile.env:
        spec = job_spec(plan_of(name, {**base, "DATASET_SIZE": "medium"}))
        assert any("medium" in item for item in spec.overrides if item.startswith("data."))
        assert any("medium" in " ".join(step.argv) for step in spec.data_steps)


def test_plan_json_says_where_each_env_lands(tmp_path: Path) -> None:
    env = {**os.environ, "RLINFRA_HOME": str(tmp_path), "AWS_EC2_METADATA_DISABLED": "true"}
    env["RLINFRA_QUIET"] = "0"  # the override lines are progress output (CI runs quiet)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        env.pop(name, None)
    argv = [RLINFRA, "plan", "-p", "search-grpo", "--json"]
    argv += ["--env", "TOTAL_STEPS=20", "--env", "NCCL_DEBUG=INFO"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    rows = {row["field"]: row for row in plan["overrides"]}
    assert rows["env.TOTAL_STEPS"]["new"] == "20"
    assert rows["env.TOTAL_STEPS"]["read_by"] == ["workload.overrides.trainer.total_training_steps"]
    assert rows["env.NCCL_DEBUG"]["read_by"] == []
    assert plan["env"]["MODEL_NAME"]["read_by"] == ["workload.model"]
    text = subprocess.run(
        [a for a in argv if a != "--json"], env=env, capture_output=True, text=True, timeout=120
    )
    assert text.returncode == 0, text.stderr
    assert (
        "override env.NCCL_DEBUG: unset -> INFO (from the command line); node environment only"
        in text.stderr
    )
    assert "env TOTAL_STEPS: read by workload.overrides.trainer.total_training_steps" in text.stdout


def test_logger_is_console_unless_the_optional_wandb_key_reaches_the_job() -> None:
    spec = json.loads(json.dumps(job_spec(plan_of("search-grpo", {})).to_json()))
    assert "trainer.logger=[console]" in spec["entrypoint"]
    assert spec["when_secret"] == [["WANDB_API_KEY", "trainer.logger=[console,wandb]"]]
    without = entrypoint(spec, {})
    assert "trainer.logger=[console]" in without
    with_key = entrypoint(spec, {"WANDB_API_KEY": "k"})
    assert "trainer.logger=[console,wandb]" in with_key
    assert "trainer.logger=[console]" not in with_key
    assert len(with_key) == len(without)
    train = [argv for step, argv, _ in plan_steps(spec, {"WANDB_API_KEY": "k"}) if step == "train"]
    assert train == [with_key]
    # An empty value is no key.
    assert entrypoint(spec, {"WANDB_API_KEY": ""}) == without


def test_a_required_key_or_an_explicit_logger_is_left_alone() -> None:
    ppo = job_spec(plan_of("h100x1-ppo", {}))
    assert "trainer.logger=[console,wandb]" in ppo.entrypoint and ppo.when_secret == ()
    multinode = job_spec(plan_of("h100x2", {}))  # optional key, logger set by the profile
    assert "trainer.logger=[console]" in multinode.entrypoint and multinode.when_secret == ()
    local = job_spec(plan_of("local", {}))  # CPU mode: the console only, key or not
    assert "trainer.logger=[console]" in local.entrypoint and local.when_secret == ()
