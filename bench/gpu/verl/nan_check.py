"""Why the GPU run's gradients were NaN: one forward and backward of the job's model on a
left-padded batch shaped like Verl's padded PPO batch (``use_remove_padding=false``), on CUDA in
bfloat16, for each attention path:

- ``sdpa``: transformers' own sdpa mask (padding query rows attend to nothing);
- ``sdpa+rlinfra``: the mask after rlinfra_node.verl_cpu's ``attend_somewhere``;
- ``sdpa/<backend>``: the stock mask with one torch sdpa backend allowed;
- ``eager``: transformers' eager attention.

Prints one JSON line per case: whether the loss and every gradient are finite, and the gradient
norm. Usage: ``python nan_check.py MODEL_DIR``.
"""

from __future__ import annotations

import contextlib
import json
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import AutoModelForCausalLM

PROMPT, RESPONSE, BATCH = 256, 64, 4


def batch(vocab: int, device: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (BATCH, PROMPT + RESPONSE), generator=g)
    mask = torch.ones_like(ids)
    for row, real in enumerate((89, 120, 60, 256)):  # prompt tokens per row, left-padded
        mask[row, : PROMPT - real] = 0
    position = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids.to(device), mask.to(device), position.to(device)


def case(model, name: str, ids, mask, position, backend=None) -> dict:
    model.zero_grad(set_to_none=True)
    ctx = sdpa_kernel([backend]) if backend is not None else contextlib.nullcontext()
    try:
        with ctx, torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=ids, attention_mask=mask, position_ids=position).logits
            logp = torch.log_softmax(logits[:, PROMPT - 1 : -1].float(), -1)
            loss = -logp.gather(-1, ids[:, PROMPT:, None]).mean()
        loss.backward()
    except Exception as error:  # a backend may refuse this mask
        return {"case": name, "error": str(error).splitlines()[0][:200]}
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    finite = all(torch.isfinite(g).all().item() for g in grads)
    norm = torch.linalg.vector_norm(torch.stack([g.float().norm() for g in grads])).item()
    return {"case": name, "loss": loss.item(), "grads_finite": finite, "grad_norm": norm}


def main() -> None:
    path = sys.argv[1]
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa").cuda()
    model.train()
    ids, mask, position = batch(model.config.vocab_size // 64, "cuda")
    results = [case(model, "sdpa", ids, mask, position)]
    for backend in (
        SDPBackend.CUDNN_ATTENTION,
        SDPBackend.EFFICIENT_ATTENTION,
        SDPBackend.MATH,
    ):
        results.append(case(model, f"sdpa/{backend.name}", ids, mask, position, backend))
    from rlinfra_node.verl_cpu.patches import _patch_sdpa_mask

    _patch_sdpa_mask()
    results.append(case(model, "sdpa+rlinfra", ids, mask, position))
    eager = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager").cuda()
    eager.train()
    results.append(case(eager, "eager", ids, mask, position))
    for result in results:
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
