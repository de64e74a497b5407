"""A rough GPU memory estimate for FSDP training, to warn (never refuse) before GPUs are paid for.

What it counts, per trained model (the actor; in PPO with GAE also the critic), sharded evenly
over every GPU of the cluster (FSDP):

- weights and gradients in the FSDP ``model_dtype`` (Verl's default fp32: 4 + 4 bytes/param;
  bf16: 2 + 2), unless ``fsdp_config.param_offload`` keeps them on the CPU;
- Adam's two fp32 moments (8 bytes/param), unless ``fsdp_config.optimizer_offload``;
- the reference policy (GRPO/PPO with a KL term) as bf16 weights, unless its ``param_offload``.

The rollout engine (vLLM/SGLang) takes ``rollout.gpu_memory_utilization`` of each GPU while it
generates; Verl frees most of it between phases, so it is reported, not added. Activations are
not counted: a model whose states fill more than ~85% of a GPU is called out as likely to run
out of memory.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

GIB = 1024**3
WARN_FRACTION = 0.85

# Parameter counts (billions) of models the recipes use; others are parsed from the name.
KNOWN_MODELS: dict[str, float] = {
    "Qwen/Qwen2.5-0.5B-Instruct": 0.494,
    "Qwen/Qwen2.5-1.5B-Instruct": 1.54,
    "Qwen/Qwen2.5-3B-Instruct": 3.09,
    "Qwen/Qwen2.5-7B-Instruct": 7.62,
    "Qwen/Qwen2.5-14B-Instruct": 14.7,
    "Qwen/Qwen2.5-32B-Instruct": 32.8,
    "Qwen/Qwen2.5-72B-Instruct": 72.7,
    "meta-llama/Llama-3.1-8B-Instruct": 8.03,
    "meta-llama/Llama-3.2-1B-Instruct": 1.24,
    "meta-llama/Llama-3.2-3B-Instruct": 3.21,
}

# Models whose config has tie_word_embeddings: false (merging them "tied" is a mistake).
UNTIED_EMBEDDINGS = frozenset(
    {
        "Qwen/Qwen2.5-7B-Instruct",
        "Qwen/Qwen2.5-14B-Instruct",
        "Qwen/Qwen2.5-32B-Instruct",
        "Qwen/Qwen2.5-72B-Instruct",
        "meta-llama/Llama-3.1-8B-Instruct",
    }
)

_SIZE = re.compile(r"(?<![A-Za-z0-9.])(\d+(?:\.\d+)?)\s*([BbMm])(?![A-Za-z])")
_DTYPE_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2}


def model_params_billion(model: str) -> float | None:
    """Parameters in billions: from the table, else a size in the name ('7B', '500M'), else None."""
    if model in KNOWN_MODELS:
        return KNOWN_MODELS[model]
    name = model.rstrip("/").rsplit("/", 1)[-1]
    match = _SIZE.search(name)
    if not match:
        return None
    number = float(match.group(1))
    return number if match.group(2) in "Bb" else number / 1000.0


def _flag(overrides: Mapping[str, str], key: str, default: bool = False) -> bool:
    value = overrides.get(key)
    return default if value is None else value.strip().lower() == "true"


def _dtype_bytes(overrides: Mapping[str, str], key: str) -> int:
    return _DTYPE_BYTES.get((overrides.get(key) or "fp32").strip().lower(), 4)


@dataclass(frozen=True)
class MemoryEstimate:
    params_billion: float
    per_gpu_gib: float
    gpu_gib: int
    parts: tuple[tuple[str, float], ...]

    @property
    def too_large(self) -> bool:
        return self.per_gpu_gib > WARN_FRACTION * self.gpu_gib

    def describe(self) -> str:
        parts = ", ".join(f"{name} {gib:.1f}" for name, gib in self.parts if gib > 0)
        return (
            f"~{self.per_gpu_gib:.1f} GiB of model state per GPU ({parts or 'all offloaded'}) "
            f"for a {self.params_billion:g}B model on {self.gpu_gib} GiB GPUs"
        )


def _trained(
    overrides: Mapping[str, str], prefix: str, params: float, gpus: int
) -> tuple[float, float]:
    """(weights+grads, optimizer) GiB per GPU of one trained model under ``prefix``."""
    per_param = _dtype_bytes(overrides, f"{prefix}.fsdp_config.model_dtype")
    weights = 0.0 if _flag(overrides, f"{prefix}.fsdp_config.param_offload") else 2 * per_param
    optim = 0.0 if _flag(overrides, f"{prefix}.fsdp_config.optimizer_offload") else 8.0
    scale = params * 1e9 / gpus / GIB
    return weights * scale, optim * scale


def estimate(
    overrides: Mapping[str, str],
    params_billion: float,
    gpus_total: int,
    gpu_gib: int,
    with_critic: bool,
    with_ref: bool,
) -> MemoryEstimate:
    """Per-GPU model-state memory for the given (expanded) Verl overrides."""
    gpus = max(gpus_total, 1)
    actor_w, actor_o = _trained(overrides, "actor_rollout_ref.actor", params_billion, gpus)
    parts = [("actor weights+grads", actor_w), ("actor Adam", actor_o)]
    if with_critic:
        critic_w, critic_o = _trained(overrides, "critic.model", params_billion, gpus)
        parts += [("critic weights+grads", critic_w), ("critic Adam", critic_o)]
    if with_ref and not _flag(overrides, "actor_rollout_ref.ref.fsdp_config.param_offload"):
        parts.append(("reference", 2 * params_billion * 1e9 / gpus / GIB))
    total = sum(gib for _, gib in parts)
    return MemoryEstimate(params_billion, total, gpu_gib, tuple(parts))
