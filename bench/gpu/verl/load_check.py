"""The merged model's load check: it loads with transformers, its weights differ from the random
ones it started from (it was trained), and it generates (greedy, on the GPU when there is one).

    python load_check.py MERGED INITIAL

Prints one JSON line: parameters, tensors compared and changed, the largest change, the text.
"""

from __future__ import annotations

import json
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def main() -> None:
    merged, initial = sys.argv[1], sys.argv[2]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(merged)
    model = AutoModelForCausalLM.from_pretrained(merged, torch_dtype=torch.float32)
    start = AutoModelForCausalLM.from_pretrained(initial, torch_dtype=torch.float32)
    before = start.state_dict()
    compared = changed = 0
    largest = 0.0
    for name, tensor in model.state_dict().items():
        if name not in before or before[name].shape != tensor.shape:
            continue
        compared += 1
        diff = (tensor - before[name]).abs().max().item()
        largest = max(largest, diff)
        changed += diff > 0
    model = model.to(device=device, dtype=torch.bfloat16)
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2 + 3?"}],
        add_generation_prompt=True,
        return_tensors="pt",
    ).to(device)
    out = model.generate(ids, max_new_tokens=12, do_sample=False)
    print(
        json.dumps(
            {
                "merged": merged,
                "device": device,
                "parameters": sum(p.numel() for p in model.parameters()),
                "tensors_compared": compared,
                "tensors_changed": changed,
                "largest_change": largest,
                "generated": tokenizer.decode(out[0, ids.shape[1] :]),
            }
        ),
        flush=True,
    )
    if compared == 0 or changed == 0:
        sys.exit("the merged weights equal the initial ones: it was not trained")


if __name__ == "__main__":
    main()
