"""Make a tiny Qwen2-architecture model with random weights, and a tokenizer trained here.

    python -m rlinfra_node.tiny_model --out DIR [--corpus FILE ...] [--hidden 64] [--layers 2]
        [--vocab 512] [--seed 0] [--heads N] [--kv-heads N] [--intermediate N] [--model-vocab N]

For machines with no model hub: Verl's real trainer needs an HF folder that ``AutoTokenizer`` and
``AutoModelForCausalLM`` load offline. The tokenizer is a byte-level BPE trained with the
``tokenizers`` library on the corpus (default: the GSM8K-shaped sample this package ships; for
``.jsonl`` files the string fields of every row), so any text encodes and prompts take few
tokens. It has a ChatML chat template (Verl applies the chat template to every prompt),
``<|im_end|>`` as eos and ``<|endoftext|>`` as pad. The model is a ``Qwen2ForCausalLM`` with
tied embeddings, initialised from ``--seed``: the same arguments give the same files.

By default the shape follows ``--hidden`` (heads of 16 dimensions, as many key/value heads,
an MLP 4 times as wide) and the embedding has one row per token. ``--heads``, ``--kv-heads``,
``--intermediate`` and ``--model-vocab`` (embedding rows, at least the tokenizer's size) give a
real model's shapes; Qwen2.5-0.5B's are ``--hidden 896 --layers 24 --heads 14 --kv-heads 2
--intermediate 4864 --model-vocab 151936`` (494M parameters).

The folder is built under a temporary name beside DIR and renamed into place with its
``_SUCCESS`` marker (the arguments, as JSON) written last; a DIR holding the marker is left alone
(a second run prints so), one holding different arguments is refused.

Exit codes: 0 made or already there, 2 bad arguments or a DIR that is not this tool's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

MARKER = "_SUCCESS"
SAMPLE = Path(__file__).with_name("samples") / "gsm8k_sample.jsonl"
PAD = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


class TinyModelError(Exception):
    """A one-line error for the command line (exit code 2)."""


def corpus_texts(paths: Sequence[Path]) -> Iterator[str]:
    """The text to train the tokenizer on: every string field of ``.jsonl`` rows, else lines."""
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            if path.suffix == ".jsonl":
                row = json.loads(line)
                yield from (value for value in row.values() if isinstance(value, str))
            else:
                yield line


def train_tokenizer(texts: Sequence[str], vocab: int):
    """A byte-level BPE ``PreTrainedTokenizerFast`` with the chat template and special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=[PAD, IM_START, IM_END],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=IM_END,
        pad_token=PAD,
        chat_template=CHAT_TEMPLATE,
        model_max_length=2048,
    )


@dataclass(frozen=True)
class Shape:
    """The model's shape; None fields follow ``hidden`` (and the tokenizer, for ``model_vocab``)."""

    hidden: int = 64
    layers: int = 2
    heads: int | None = None
    kv_heads: int | None = None
    intermediate: int | None = None
    model_vocab: int | None = None

    @property
    def n_heads(self) -> int:
        return self.heads or max(1, self.hidden // 16)

    @property
    def n_kv_heads(self) -> int:
        return self.kv_heads or self.n_heads

    def check(self) -> None:
        if self.hidden % 16 or self.hidden < 16 or self.layers < 1:
            raise TinyModelError("--hidden must be a multiple of 16, --layers >= 1")
        if self.hidden % self.n_heads:
            raise TinyModelError(
                f"--hidden {self.hidden} is not a multiple of {self.n_heads} heads"
            )
        if self.n_heads % self.n_kv_heads:
            raise TinyModelError(
                f"{self.n_heads} heads cannot share {self.n_kv_heads} key/value heads evenly"
            )
        if self.intermediate is not None and self.intermediate < 1:
            raise TinyModelError("--intermediate must be at least 1")

    def marker(self) -> dict[str, int]:
        """What the ``_SUCCESS`` marker records beyond hidden and layers: only what was given,
        so folders made before these options existed still match."""
        given = {
            "heads": self.heads,
            "kv_heads": self.kv_heads,
            "intermediate": self.intermediate,
            "model_vocab": self.model_vocab,
        }
        return {key: value for key, value in given.items() if value is not None}


def build(out: Path, texts: Sequence[str], shape: Shape, vocab: int, seed: int):
    """Write tokenizer and model files into ``out`` (an existing empty folder)."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tokenizer = train_tokenizer(texts, vocab)
    rows = shape.model_vocab or len(tokenizer)
    if rows < len(tokenizer):
        raise TinyModelError(
            f"--model-vocab {rows} is smaller than the tokenizer ({len(tokenizer)})"
        )
    config = Qwen2Config(
        vocab_size=rows,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate or shape.hidden * 4,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.n_heads,
        num_key_value_heads=shape.n_kv_heads,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.convert_tokens_to_ids(IM_START),
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    tokenizer.save_pretrained(out)
    model.save_pretrained(out, safe_serialization=True)


def make(
    out: Path,
    corpus: Sequence[Path],
    hidden: int = 64,
    layers: int = 2,
    vocab: int = 512,
    seed: int = 0,
    shape: Shape | None = None,
) -> bool:
    """Make the model folder ``out``; False when a finished one with these arguments is there.
    ``shape`` (when given) replaces ``hidden`` and ``layers``."""
    shape = shape or Shape(hidden=hidden, layers=layers)
    shape.check()
    if vocab < 300:
        raise TinyModelError("--vocab must be at least 300")
    missing = [str(path) for path in corpus if not path.is_file()]
    if missing:
        raise TinyModelError(f"no corpus file {', '.join(missing)}")
    texts = list(corpus_texts(corpus))
    digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16]
    wanted = {"hidden": shape.hidden, "layers": shape.layers, "vocab": vocab, "seed": seed}
    wanted = {**wanted, **shape.marker(), "corpus": digest}
    marker = out / MARKER
    if marker.is_file():
        found = json.loads(marker.read_text())
        if found != wanted:
            raise TinyModelError(f"{out} holds a tiny model made with {found}, not {wanted}")
        return False
    if out.exists():
        raise TinyModelError(f"{out} exists without {MARKER}: not a tiny model; remove it")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.", dir=out.parent) as tmp:
        staging = Path(tmp) / "model"
        staging.mkdir()
        build(staging, texts, shape, vocab, seed)
        (staging / MARKER).write_text(json.dumps(wanted, sort_keys=True) + "\n")
        staging.rename(out)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlinfra_node.tiny_model", description=__doc__)
    parser.add_argument("--out", type=Path, required=True, help="the HF model folder to write")
    parser.add_argument(
        "--corpus",
        type=Path,
        action="append",
        help=f"text or .jsonl to train the tokenizer on (repeat; default {SAMPLE.name})",
    )
    parser.add_argument("--hidden", type=int, default=64, help="hidden size (multiple of 16)")
    parser.add_argument("--layers", type=int, default=2, help="decoder layers")
    parser.add_argument("--vocab", type=int, default=512, help="tokenizer vocabulary size")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    parser.add_argument("--heads", type=int, help="attention heads (default: hidden / 16)")
    parser.add_argument("--kv-heads", type=int, help="key/value heads (default: --heads)")
    parser.add_argument("--intermediate", type=int, help="MLP width (default: 4 x hidden)")
    parser.add_argument(
        "--model-vocab", type=int, help="embedding rows (default: the tokenizer's size)"
    )
    args = parser.parse_args(argv)
    shape = Shape(
        hidden=args.hidden,
        layers=args.layers,
        heads=args.heads,
        kv_heads=args.kv_heads,
        intermediate=args.intermediate,
        model_vocab=args.model_vocab,
    )
    try:
        made = make(
            args.out, args.corpus or [SAMPLE], vocab=args.vocab, seed=args.seed, shape=shape
        )
    except TinyModelError as error:
        print(f"Error: {error}", file=sys.stderr)
        return 2
    print(f"{'made' if made else 'already there:'} tiny model {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
