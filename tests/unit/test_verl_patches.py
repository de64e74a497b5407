"""The Verl 0.6.0 patches that GPU nodes need too (rlinfra_node.verl_cpu.patches), and the job a
GPU profile with the HF rollout renders; run with transformers and torch on this machine's CPU.

The fully-masked-row fix is what made the one-GPU run's gradients finite (bench/gpu/verl): here
it is shown to change no output that a loss reads, and to leave no query row without a key.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
import torch
import yaml

from rlinfra.clouds.planning import make_plan
from rlinfra.jobspec import job_spec
from rlinfra.profile import profile_from_data
from rlinfra_node.verl_cpu import patches
from rlinfra_node.verl_cpu.patches import attend_somewhere

REPO = Path(__file__).resolve().parents[2]
BENCH_PROFILE = REPO / "bench" / "gpu" / "verl" / "gpu-ppo-hf.yaml"


def test_attend_somewhere_fills_only_rows_that_attend_to_nothing() -> None:
    causal = torch.tril(torch.ones(4, 4, dtype=torch.bool))
    padding = torch.tensor([False, False, True, True])
    mask = (causal & padding)[None, None]  # rows 0 and 1 are left padding: nothing to attend
    fixed = attend_somewhere(mask)
    assert fixed[0, 0, :2].all()
    assert torch.equal(fixed[0, 0, 2:], mask[0, 0, 2:])
    assert fixed.any(dim=-1).all()
    floats = torch.zeros(1, 1, 4, 4)
    assert attend_somewhere(floats) is floats
    assert attend_somewhere(None) is None


@pytest.fixture
def sdpa_patched():
    """The sdpa mask patch applied, and transformers' registry restored afterwards."""
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    original = ALL_MASK_ATTENTION_FUNCTIONS["sdpa"]
    yield
    AttentionMaskInterface.register("sdpa", original)


def _tiny_qwen2():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        attn_implementation="sdpa",
    )
    return Qwen2ForCausalLM(config).eval()


def test_the_sdpa_patch_changes_no_output_a_loss_reads(sdpa_patched) -> None:
    model = _tiny_qwen2()
    ids = torch.randint(3, 128, (2, 12))
    mask = torch.ones_like(ids)
    mask[0, :5] = 0  # left padding, as Verl pads prompts to data.max_prompt_length
    position = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        before = model(input_ids=ids, attention_mask=mask, position_ids=position).logits
        patches._patch_sdpa_mask()
        patches._patch_sdpa_mask()  # applying twice wraps once
        after = model(input_ids=ids, attention_mask=mask, position_ids=position).logits
    real = mask.bool()
    assert torch.isfinite(after).all()
    torch.testing.assert_close(after[real], before[real], rtol=1e-5, atol=1e-5)
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    wrapped = ALL_MASK_ATTENTION_FUNCTIONS["sdpa"]
    assert wrapped._rlinfra_attend_somewhere
    assert not getattr(wrapped.__wrapped__, "_rlinfra_attend_somewhere", False)


def test_get_event_loop_makes_a_loop_where_the_policy_refuses() -> None:
    original = asyncio.get_event_loop
    results: list[object] = []

    def refusing() -> asyncio.AbstractEventLoop:
        raise RuntimeError("There is no current event loop in thread 'worker'.")

    asyncio.get_event_loop = refusing
    try:
        patches._patch_event_loop()

        def worker() -> None:
            loop = asyncio.get_event_loop()
            results.append(loop.run_until_complete(asyncio.sleep(0, result="ran")))
            loop.close()

        thread = threading.Thread(target=worker)
        thread.start()
        thread.join(10)
    finally:
        asyncio.get_event_loop = original
    assert results == ["ran"]


def _bench_profile(**workload_changes: object):
    data = yaml.safe_load(BENCH_PROFILE.read_text())
    data["workload"].update(workload_changes)
    return make_plan(profile_from_data(data, str(BENCH_PROFILE), "gpu-ppo-hf"), str(BENCH_PROFILE))


def test_a_gpu_profile_with_the_hf_rollout_trains_through_the_patched_launcher() -> None:
    spec = job_spec(_bench_profile())
    assert spec.entrypoint[:3] == ("python3", "-m", "rlinfra_node.verl_cpu.main_ppo")
    assert "trainer.device=cpu" not in spec.entrypoint  # a GPU node keeps Verl's device
    assert "trainer.n_gpus_per_node=1" in spec.entrypoint
    make_model = next(step for step in spec.data_steps if step.name == "make-model")
    shape = " ".join(make_model.argv)
    for flags in ("--hidden 896", "--layers 24", "--heads 14", "--kv-heads 2"):
        assert flags in shape
    assert "--intermediate 4864 --model-vocab 151936" in shape


def test_a_gpu_profile_with_vllm_runs_verls_own_trainer() -> None:
    overrides = dict(yaml.safe_load(BENCH_PROFILE.read_text())["workload"]["overrides"])
    overrides["actor_rollout_ref.rollout.name"] = "vllm"
    spec = job_spec(_bench_profile(overrides=overrides))
    assert spec.entrypoint[:3] == ("python3", "-m", "verl.trainer.main_ppo")
