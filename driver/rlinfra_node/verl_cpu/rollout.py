"""The ``("hf", "sync")`` rollout Verl 0.6.0 lacks: generation with a plain HF copy of the policy.

Verl's ``HFRollout`` (``workers/rollout/hf_rollout.py``) holds a generation loop over any HF
module but cannot be built by the 0.6.0 worker (its ``__init__`` does not take the
``config, model_config, device_mesh`` every rollout gets, and it lacks the hybrid engine's
``resume``/``update_weights``/``release``). This subclass builds the HF model from the worker's
model config, and before each generation the FSDP actor hands it the full policy weights through
``update_weights`` (``ActorRolloutRefWorker.rollout_mode``), so every rank generates with the
current policy. The copy lives on the worker's device (Verl's ``get_device_name``): in CPU memory
and float32 on CPU nodes, on the GPU in the rollout config's ``dtype`` (bfloat16 by default) on
GPU nodes, where the prompts arrive. It stays there: nothing to release or resume.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from transformers import AutoModelForCausalLM
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.hf_rollout import HFRollout


def rollout_device(config: Any) -> tuple[torch.device, torch.dtype]:
    """Where the generation copy lives and in which dtype: this worker's accelerator and the
    rollout config's ``dtype``, or the CPU in float32 (CPUs lack fast half-precision kernels)."""
    from verl.utils.device import get_device_id, get_device_name

    name = get_device_name()
    if name == "cpu":
        return torch.device("cpu"), torch.float32
    dtype = getattr(torch, str(getattr(config, "dtype", None) or "bfloat16"))
    return torch.device(name, get_device_id()), dtype


class HFSyncRollout(HFRollout):
    """Verl's HF generation loop over an HF model refreshed from the FSDP actor."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any) -> None:
        BaseRollout.__init__(self, config, model_config, device_mesh)
        device, dtype = rollout_device(config)
        self.module = AutoModelForCausalLM.from_config(
            model_config.hf_config,
            torch_dtype=dtype,
            attn_implementation="sdpa",
            trust_remote_code=model_config.trust_remote_code,
        )
        self.module.to(device)
        self.module.eval()

    async def resume(self, tags: list[str]) -> None:
        """Nothing was released (the copy stays in memory)."""

    async def release(self) -> None:
        """Nothing to free: the copy is the size of the model and is refreshed in place."""

    @torch.no_grad()
    async def update_weights(self, weights: Iterable[tuple[str, torch.Tensor]], **kwargs: Any):
        """Copy the actor's full tensors (HF names) into the generation model."""
        if kwargs.get("peft_config") is not None:
            raise NotImplementedError("LoRA is not supported by rlinfra's CPU HF rollout")
        own = self.module.state_dict(keep_vars=True)
        updated: set[int] = set()
        for name, tensor in weights:
            if name not in own:
                raise KeyError(f"the actor sent weight {name!r}, which the HF rollout lacks")
            own[name].data.copy_(tensor.to(own[name].dtype))
            updated.add(id(own[name]))
        # Tied weights (embeddings and lm_head) are one parameter under two names.
        missing = [name for name, p in self.module.named_parameters() if id(p) not in updated]
        if missing:
            raise KeyError(f"the actor sent no weights for {', '.join(missing)}")
