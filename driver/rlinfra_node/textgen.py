"""Text generation with Hugging Face transformers, for the model server's ``serve-transformers``
(``rlinfra_node.model_server``) and Search-R1 inference's ``transformers`` engine
(``rlinfra_node.search_infer``).

- Loading: ``AutoTokenizer`` and ``AutoModelForCausalLM`` from a model folder, local files only
  and no remote code, without progress bars (a log file is no terminal); the model in a dtype
  named ``float32``, ``bfloat16``, ``float16`` or ``auto`` (the folder's own), moved to a device
  when one is given, in eval mode.
- The chat template: messages rendered by the tokenizer's template, with the generation prompt.
- Generating (``TextGenerator``), one generation at a time: greedy at temperature 0, else
  sampling with the temperature and top_p given (top_k off); a seed holds for its own
  generation. The end-of-sequence tokens are the model's generation config's, else the
  tokenizer's; the pad token is the tokenizer's, else the first end token. Fields a call does not
  set come from the model's ``generation_config`` (transformers' rule): a caller that wants none
  of the folder's sampling defaults replaces it.
- Stop strings: generation ends with the token that completes one, and the text is cut at the
  stop string that ends first; the caller keeps it in the text or leaves it out.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DTYPES = ("float32", "bfloat16", "float16", "auto")
# What a byte-level tokenizer decodes a partial UTF-8 character to.
REPLACEMENT = "\ufffd"


# ------------------------------------------------------------------------- stop strings


@dataclass(frozen=True)
class StopMatch:
    """Where a stop string is in a text: ``text[start:end]``."""

    start: int
    end: int


def find_stop(text: str, stops: Sequence[str]) -> StopMatch | None:
    """The stop string in ``text`` that ends first (of two that end together, the longer).

    Generation ends as soon as a stop string is complete, so the one that ends first is the one
    that ended it; a stop string that starts earlier but ends later was never complete.
    """
    found = [(index + len(stop), index) for stop in stops if (index := text.find(stop)) >= 0]
    if not found:
        return None
    end, start = min(found)
    return StopMatch(start, end)


def cut_at_stop(text: str, stops: Sequence[str], *, keep: bool = False) -> tuple[str, bool]:
    """``text`` up to its first stop string (with it when ``keep``), and whether one was found."""
    match = find_stop(text, stops)
    if match is None:
        return text, False
    return text[: match.end if keep else match.start], True


class IncrementalDecoder:
    """The text of a token sequence that grows, decoding a few tokens at each step.

    Each step decodes the tokens from ``prefix`` on, with and without the unread ones, and takes
    the difference: a tokenizer may write a token differently at the start of a text (a
    SentencePiece word's leading space), so the tokens before the unread ones give the context.
    Text that ends in a partial UTF-8 character (which a later token completes) is held back:
    its tokens stay unread. Special tokens decode to nothing.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.text = ""  # the text of the read tokens
        self.prefix = 0  # the first token decoded for context
        self.read = 0  # how many tokens are read

    def _decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))

    def add(self, ids: Sequence[int]) -> str:
        """Take the next tokens; the text after ``text`` as it was: what the unread tokens
        decode to (read now, or held back when it ends in a partial character)."""
        self.ids.extend(ids)
        before = self._decode(self.ids[self.prefix : self.read])
        new = self._decode(self.ids[self.prefix :])[len(before) :]
        if new and not new.endswith(REPLACEMENT):
            self.text += new
            self.prefix, self.read = self.read, len(self.ids)
        return new


def _stop_criterion(tokenizer: Any, start: int, stops: Sequence[str]) -> Any:
    """A transformers ``StoppingCriteria`` that ends generation once a stop string is complete
    in the text of the tokens after the first ``start``. It decides when to stop only: the text
    returned is decoded whole afterwards."""
    import torch
    from transformers import StoppingCriteria

    longest = max(len(stop) for stop in stops)

    class StopOnText(StoppingCriteria):
        def __init__(self) -> None:
            self.decoder = IncrementalDecoder(tokenizer)

        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            old = len(self.decoder.text)
            new = self.decoder.add(input_ids[0, start + len(self.decoder.ids) :].tolist())
            # The window checked: the newly decoded text, and before it as many characters as
            # the longest stop string has. A stop string that this step completes ends in the
            # new text and starts at most len(stop) - 1 characters before it, in text written by
            # any number of earlier tokens: stop strings straddle token boundaries, so the window
            # is counted in characters, never in tokens (a token decodes to several characters,
            # one or none). Text before the window was checked at the steps that wrote it, and a
            # stop string there would have ended generation then.
            window = self.decoder.text[max(0, old - longest) : old] + new
            done = any(stop in window for stop in stops)
            return torch.full(
                (input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device
            )

    return StopOnText()


# ------------------------------------------------------------------------- loading


def _quiet() -> None:
    from transformers.utils import logging

    logging.disable_progress_bar()  # type: ignore[no-untyped-call]


def load_tokenizer(model_dir: Path) -> Any:
    """The folder's tokenizer (``AutoTokenizer``, local files only)."""
    from transformers import AutoTokenizer

    _quiet()
    return AutoTokenizer.from_pretrained(model_dir, local_files_only=True)


def load_model(model_dir: Path, dtype: str = "float32", device: str | None = None) -> Any:
    """The folder's causal language model in ``dtype`` (one of DTYPES), on ``device`` when
    given, in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM

    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}: not one of {', '.join(DTYPES)}")
    _quiet()
    model: Any = AutoModelForCausalLM.from_pretrained(
        model_dir,
        local_files_only=True,
        dtype="auto" if dtype == "auto" else getattr(torch, dtype),
    )
    if device is not None:
        model.to(device)
    model.eval()
    return model


# ------------------------------------------------------------------------- the chat template


def has_chat_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def render_chat(tokenizer: Any, messages: Sequence[dict[str, str]]) -> str:
    """``messages`` rendered by the tokenizer's chat template, ending with the generation prompt
    (the assistant's turn). The template's own errors propagate (jinja2's, raise_exception())."""
    return str(
        tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
    )


# ------------------------------------------------------------------------- generating


@dataclass(frozen=True)
class Generated:
    """One generation: the new tokens (an end token included), their text (decoded whole), the
    first stop string in it (None when there is none) and whether the last token ends the
    sequence."""

    ids: tuple[int, ...]
    text: str
    stop: StopMatch | None
    ended: bool

    def cut(self, *, keep: bool) -> str:
        """The text up to the stop string, with it when ``keep``; all of it when none."""
        if self.stop is None:
            return self.text
        return self.text[: self.stop.end if keep else self.stop.start]


class TextGenerator:
    """A causal language model and its tokenizer, generating one text at a time."""

    def __init__(self, model: Any, tokenizer: Any) -> None:
        self.model = model
        self.tokenizer = tokenizer
        # Generations, and the tokenizer too: a fast tokenizer used from two threads at once
        # can fail ("Already borrowed").
        self.lock = threading.RLock()
        eos = model.generation_config.eos_token_id
        if eos is None:
            eos = tokenizer.eos_token_id
        self.eos: list[int] = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
        pad = tokenizer.pad_token_id
        self.pad: int | None = pad if pad is not None else (self.eos[0] if self.eos else None)
        self.context: int | None = getattr(model.config, "max_position_embeddings", None)

    @classmethod
    def load(
        cls, model_dir: Path, dtype: str = "float32", device: str | None = None
    ) -> TextGenerator:
        tokenizer = load_tokenizer(model_dir)
        return cls(load_model(model_dir, dtype, device), tokenizer)

    def encode(self, text: str, *, special: bool = True) -> list[int]:
        """The token ids of ``text``; ``special``: with the tokenizer's special tokens (a chat
        template writes its own)."""
        with self.lock:
            return list(self.tokenizer(text, add_special_tokens=special)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        with self.lock:
            return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))

    def render_chat(self, messages: Sequence[dict[str, str]]) -> str:
        with self.lock:
            return render_chat(self.tokenizer, messages)

    def generate(
        self,
        prompt_ids: Sequence[int],
        max_new_tokens: int,
        *,
        stops: Sequence[str] = (),
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
    ) -> Generated:
        """At most ``max_new_tokens`` tokens after ``prompt_ids``, ending early at an end token or
        with the token that completes one of ``stops``."""
        import torch
        from transformers import GenerationConfig, StoppingCriteriaList

        start = len(prompt_ids)
        options: dict[str, Any] = {
            "max_new_tokens": max_new_tokens,
            "do_sample": temperature > 0,
            "eos_token_id": self.eos or None,
            "pad_token_id": self.pad,
        }
        if temperature > 0:
            options.update(temperature=temperature, top_p=top_p, top_k=0)
        device = self.model.device
        input_ids = torch.tensor([list(prompt_ids)], dtype=torch.long, device=device)
        # A seed holds for its own generation: the random state is put back afterwards, so that
        # generations without one still differ.
        rng: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        if seed is not None:
            rng = torch.random.fork_rng(devices=[device] if device.type == "cuda" else [])
        with self.lock, torch.inference_mode(), rng:
            criteria = StoppingCriteriaList(
                [_stop_criterion(self.tokenizer, start, stops)] if stops else []
            )
            if seed is not None:
                torch.manual_seed(seed)
            output = self.model.generate(
                input_ids=input_ids,
                attention_mask=torch.ones_like(input_ids),
                generation_config=GenerationConfig(**options),  # type: ignore[no-untyped-call]
                stopping_criteria=criteria,
            )
            new = tuple(output[0, start:].tolist())
            text = str(self.tokenizer.decode(list(new), skip_special_tokens=True))
        ended = bool(new) and new[-1] in self.eos
        return Generated(new, text, find_stop(text, stops), ended)
