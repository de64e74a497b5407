"""A BERT sentence encoder's forward pass in plain torch functions, for the queries a server gets.

A search's time is mostly the encoder's, and for one short query most of that is not arithmetic:
transformers' ``BertModel`` goes through a dozen Python modules a layer, builds its attention
mask through several helpers, and keeps float32 weights (44 MB for all-MiniLM-L6-v2, more than a
core's share of cache, read once per query). Measured with one thread on this project's test
machine (AMD EPYC with AVX-512 BF16; bench/results/retrieval.md keeps the current figures), one
query took 10.9 ms through sentence-transformers, 8.7 ms through this forward in float32 and
4.6 ms through it in bfloat16; 32 queries took 95, 92 and 53 ms.

``FastEncoder`` does the same computation as the model's own modules (word, position and token
type embeddings, layer norm, per layer fused QKV projection, scaled dot-product attention with
the padding mask, output projection, residual and layer norm, GELU feed-forward, residual and
layer norm; then the model's mean or CLS pooling and L2 normalisation), so in float32 it gives
the same vectors to float rounding. In bfloat16 (weights and activations; pooling and the norm in
float32) vectors keep a cosine similarity above 0.9999 with float32's on the models tried.

It is used only for what it covers: a sentence-transformers model made of a ``Transformer``
holding transformers' own ``BertModel`` (not a subclass or remote code) with absolute positions,
exact GELU and float32 weights, giving its last hidden state for right-padded input; a
``Pooling`` by mean or CLS token alone; and optionally ``Normalize``. Anything else (another
architecture, adapters, a dense layer after pooling, other pooling) returns ``None`` from
``FastEncoder.build`` and the caller keeps the library's path. The bfloat16 copy of the weights
costs half the model's float32 size again in each replica (23 MB for all-MiniLM-L6-v2, 220 MB
for e5-base-v2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# CPU features with which torch's bfloat16 matrix multiplies run natively (oneDNN); without them
# bfloat16 is emulated and slower than float32.
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_has_bf16(cpuinfo: str | None = None) -> bool:
    """Whether this CPU multiplies bfloat16 natively (Linux on x86: /proc/cpuinfo's flags;
    elsewhere False, so ``auto`` keeps float32)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return False
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        if re.match(r"flags\s*:", line):
            flags.update(line.split(":", 1)[1].split())
    return any(flag in flags for flag in BF16_CPU_FLAGS)


def resolve_precision(precision: str, device: str, cpuinfo: str | None = None) -> str:
    """``auto``: bfloat16 on a CUDA device that supports it or a CPU with native bfloat16,
    float32 elsewhere; an explicit precision is kept."""
    if precision not in ("auto", "float32", "bfloat16"):
        raise ValueError(f"precision {precision!r}: use auto, float32 or bfloat16")
    if precision != "auto":
        return precision
    if device.startswith("cuda"):
        import torch

        with torch.cuda.device(torch.device(device)):
            native = torch.cuda.is_bf16_supported(including_emulation=False)
        return "bfloat16" if native else "float32"
    return "bfloat16" if device == "cpu" and cpu_has_bf16(cpuinfo) else "float32"


@dataclass(frozen=True)
class _Layer:
    qkv_weight: Any
    qkv_bias: Any
    out_weight: Any
    out_bias: Any
    norm1_weight: Any
    norm1_bias: Any
    up_weight: Any
    up_bias: Any
    down_weight: Any
    down_bias: Any
    norm2_weight: Any
    norm2_bias: Any


def _pooling_mode(pooling: Any, hidden: int) -> str | None:
    """``mean`` or ``cls`` when that is all the pooling module does, else None."""
    config = pooling.get_config_dict()
    output = getattr(pooling, "pooling_output_dimension", None)
    if output is not None and int(output) != hidden:
        return None
    if not config.get("include_prompt", True):
        return None
    mode = config.get("pooling_mode")
    if isinstance(mode, (list, tuple)) and len(mode) == 1:
        mode = mode[0]
    if isinstance(mode, str):  # sentence-transformers 6
        return mode if mode in ("mean", "cls") else None
    if mode is not None:
        return None
    # sentence-transformers 5: one boolean key per mode (both spellings of the names).
    names = ("cls", "max", "mean", "mean_sqrt_len", "weightedmean", "lasttoken")
    chosen = [
        name
        for name in names
        if any(config.get(f"pooling_mode_{name}{end}") for end in ("", "_token", "_tokens"))
    ]
    return chosen[0] if chosen in (["mean"], ["cls"]) else None


def _plain_transformer(transformer: Any) -> bool:
    """Whether the Transformer module gives the last hidden state of right-padded input (what
    the forward computes), from float32 weights."""
    modality = getattr(transformer, "modality_config", None)
    if modality is not None and modality.get("text") != {
        "method": "forward",
        "method_output_name": "last_hidden_state",
    }:
        return False
    if getattr(transformer, "module_output_name", "token_embeddings") != "token_embeddings":
        return False
    tokenizer = getattr(transformer, "tokenizer", None)
    if getattr(tokenizer, "padding_side", "right") != "right":
        return False
    import torch

    return all(
        parameter.dtype == torch.float32 for parameter in transformer.auto_model.parameters()
    )


class FastEncoder:
    """The forward pass of a supported sentence-transformers BERT model, in one dtype."""

    def __init__(self, bert: Any, pooling: str, normalize: bool, dtype: Any, device: Any) -> None:
        import torch

        config = bert.config
        self.dtype = dtype
        self.device = device
        self.pooling = pooling
        self.normalize = normalize
        self.heads = int(config.num_attention_heads)
        self.eps = float(config.layer_norm_eps)
        state = {
            name: tensor.detach().to(device=device, dtype=dtype).contiguous()
            for name, tensor in bert.state_dict().items()
            if tensor.is_floating_point()
        }
        self.hidden = int(state["embeddings.word_embeddings.weight"].shape[1])
        if self.hidden % self.heads:
            raise ValueError(f"hidden size {self.hidden} is not a multiple of {self.heads} heads")
        self.word = state["embeddings.word_embeddings.weight"]
        self.position = state["embeddings.position_embeddings.weight"]
        self.token_type = state.get("embeddings.token_type_embeddings.weight")
        self.embed_norm = (
            state["embeddings.LayerNorm.weight"],
            state["embeddings.LayerNorm.bias"],
        )
        self.layers = []
        for number in range(int(config.num_hidden_layers)):

            def get(name: str, number: int = number) -> Any:
                return state[f"encoder.layer.{number}.{name}"]

            self.layers.append(
                _Layer(
                    qkv_weight=torch.cat(
                        [get(f"attention.self.{part}.weight") for part in ("query", "key", "value")]
                    ),
                    qkv_bias=torch.cat(
                        [get(f"attention.self.{part}.bias") for part in ("query", "key", "value")]
                    ),
                    out_weight=get("attention.output.dense.weight"),
                    out_bias=get("attention.output.dense.bias"),
                    norm1_weight=get("attention.output.LayerNorm.weight"),
                    norm1_bias=get("attention.output.LayerNorm.bias"),
                    up_weight=get("intermediate.dense.weight"),
                    up_bias=get("intermediate.dense.bias"),
                    down_weight=get("output.dense.weight"),
                    down_bias=get("output.dense.bias"),
                    norm2_weight=get("output.LayerNorm.weight"),
                    norm2_bias=get("output.LayerNorm.bias"),
                )
            )

    @classmethod
    def build(cls, model: Any, precision: str) -> FastEncoder | None:
        """The fast forward of ``model`` (a SentenceTransformer) in ``precision`` (float32 or
        bfloat16), or None when the model is not one this module covers."""
        import torch

        modules = list(model)
        if not 2 <= len(modules) <= 3:
            return None
        transformer, pooling = modules[0], modules[1]
        normalize = len(modules) == 3
        if normalize and type(modules[2]).__name__ != "Normalize":
            return None
        if type(pooling).__name__ != "Pooling" or not hasattr(pooling, "get_config_dict"):
            return None
        bert = getattr(transformer, "auto_model", None)
        try:
            from transformers import BertModel
        except ImportError:
            return None
        config = getattr(bert, "config", None)
        if (
            type(bert) is not BertModel  # not a subclass, not remote code named the same
            or getattr(config, "model_type", None) != "bert"
            or getattr(config, "position_embedding_type", "absolute") != "absolute"
            or getattr(config, "hidden_act", None) != "gelu"
            or getattr(config, "is_decoder", False)
            or getattr(config, "add_cross_attention", False)
            or not _plain_transformer(transformer)
        ):
            return None
        mode = _pooling_mode(pooling, int(config.hidden_size))
        if mode is None:
            return None
        dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[precision]
        try:
            return cls(bert, mode, normalize, dtype, model.device)
        except (KeyError, ValueError):  # weights named otherwise (adapters, quantised layers)
            return None

    def __call__(self, features: dict[str, Any]) -> Any:
        """Float32 sentence embeddings (L2-normalised when the model normalises) of tokenised
        ``features`` (input_ids, attention_mask, optionally token_type_ids)."""
        import torch
        import torch.nn.functional as F

        ids = features["input_ids"].to(self.device)
        mask = features["attention_mask"].to(self.device)
        batch, length = ids.shape
        hidden, heads = self.hidden, self.heads
        with torch.inference_mode():
            x = self.word[ids] + self.position[:length]
            if self.token_type is not None:
                types = features.get("token_type_ids")
                x = x + (
                    self.token_type[types.to(self.device)]
                    if types is not None
                    else self.token_type[0]
                )
            x = F.layer_norm(x, (hidden,), *self.embed_norm, self.eps)
            padding = None
            if not bool(mask.all()):
                padding = torch.zeros(batch, 1, 1, length, dtype=x.dtype, device=self.device)
                padding.masked_fill_(~mask.bool()[:, None, None, :], torch.finfo(x.dtype).min)
            for layer in self.layers:
                qkv = F.linear(x, layer.qkv_weight, layer.qkv_bias)
                qkv = qkv.view(batch, length, 3, heads, hidden // heads).permute(2, 0, 3, 1, 4)
                attended = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], attn_mask=padding)
                attended = attended.transpose(1, 2).reshape(batch, length, hidden)
                x = F.linear(attended, layer.out_weight, layer.out_bias) + x
                x = F.layer_norm(x, (hidden,), layer.norm1_weight, layer.norm1_bias, self.eps)
                up = F.gelu(F.linear(x, layer.up_weight, layer.up_bias))
                x = F.linear(up, layer.down_weight, layer.down_bias) + x
                x = F.layer_norm(x, (hidden,), layer.norm2_weight, layer.norm2_bias, self.eps)
            out = x.float()
            if self.pooling == "cls":
                pooled = out[:, 0]
            else:
                weights = mask.unsqueeze(-1).to(out.dtype)
                pooled = (out * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            if self.normalize:
                pooled = F.normalize(pooled, p=2, dim=1)
        return pooled
