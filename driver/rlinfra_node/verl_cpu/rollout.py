"""The ``("hf", "sync")`` rollout Verl 0.6.0 lacks: generation with a plain HF copy of the policy.

Verl's ``HFRollout`` (``workers/rollout/hf_rollout.py``) holds a generation loop over any HF
module but cannot be built by the 0.6.0 worker (its ``__init__`` does not take the
``config, model_config, device_mesh`` every rollout gets, and it lacks the hybrid engine's
``resume``/``update_weights``/``release``). This subclass builds the HF model from the worker's
model config, and before each generation the FSDP actor hands it the full policy weights through
``update_weights`` (``ActorRolloutRefWorker.rollout_mode``), so every rank generates with the
current policy. The copy lives in CPU memory: nothing to release or resume.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from transformers import AutoModelForCausalLM
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.hf_rollout import HFRollout


class HFSyncRollout(HFRollout):
    """Verl's HF generation loop over an HF model refreshed from the FSDP actor."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any) -> None:
        BaseRollout.__init__(self, config, model_config, device_mesh)
        self.module = AutoModelForCausalLM.from_config(
            model_config.hf_config,
            torch_dtype=torch.float32,
            attn_implementation="sdpa",
            trust_remote_code=model_config.trust_remote_code,
        )
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
