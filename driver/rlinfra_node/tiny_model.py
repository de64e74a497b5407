"""Make a tiny Qwen2-architecture model with random weights, and a tokenizer trained here.

    python -m rlinfra_node.tiny_model --out DIR [--corpus FILE ...] [--hidden 64] [--layers 2]
        [--vocab 512] [--seed 0]

For machines with no model hub: Verl's real trainer needs an HF folder that ``AutoTokenizer`` and
``AutoModelForCausalLM`` load offline. The tokenizer is a byte-level BPE trained with the
``tokenizers`` library on the corpus (default: the GSM8K-shaped sample this package ships; for
``.jsonl`` files the string fields of every row), so any text encodes and prompts take few
tokens. It has a ChatML chat template (Verl applies the chat template to every prompt),
``<|im_end|>`` as eos and ``<|endoftext|>`` as pad. The model is a ``Qwen2ForCausalLM`` with
tied embeddings, initialised from ``--seed``: the same arguments give the same files.

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


def build(out: Path, texts: Sequence[str], hidden: int, layers: int, vocab: int, seed: int):
    """Write tokenizer and model files into ``out`` (an existing empty folder)."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tokenizer = train_tokenizer(texts, vocab)
    heads = max(1, hidden // 16)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 4,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
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
) -> bool:
    """Make the model folder ``out``; False when a finished one with these arguments is there."""
    if hidden % 16 or hidden < 16 or layers < 1 or vocab < 300:
        raise TinyModelError("--hidden must be a multiple of 16, --layers >= 1, --vocab >= 300")
    missing = [str(path) for path in corpus if not path.is_file()]
    if missing:
        raise TinyModelError(f"no corpus file {', '.join(missing)}")
    texts = list(corpus_texts(corpus))
    digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16]
    wanted = {"hidden": hidden, "layers": layers, "vocab": vocab, "seed": seed, "corpus": digest}
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
        build(staging, texts, hidden, layers, vocab, seed)
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
    args = parser.parse_args(argv)
    try:
        made = make(
            args.out, args.corpus or [SAMPLE], args.hidden, args.layers, args.vocab, args.seed
        )
    except TinyModelError as error:
        print(f"Error: {error}", file=sys.stderr)
        return 2
    print(f"{'made' if made else 'already there:'} tiny model {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
