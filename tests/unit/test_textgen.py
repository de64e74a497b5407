"""rlinfra_node.textgen, the text generation that the model server and Search-R1 inference share,
run for real on a tiny random Qwen2 (``rlinfra_node.tiny_model``): loading, the chat template,
generating, and stop strings, which straddle the boundaries between the text of one token and the
next; the two users, ``model_server`` (over its HTTP API) and ``search_infer``'s transformers
engine, cut at them each by its own rule."""

from __future__ import annotations

import itertools
import json
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from rlinfra_node import model_server, search_infer, textgen, tiny_model
from rlinfra_node.textgen import StopMatch

# The tiny model repeats the last token of its prompt (random weights, tied embeddings): greedy,
# this prompt gets " many many many ...", the same five characters from every token.
PROMPT = "How many"
NEW_TOKENS = 100
CHAT_TEMPLATE_RENDERING = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("models") / "hf_model"
    tiny_model.make(folder, [tiny_model.SAMPLE], hidden=32, layers=1, vocab=1000)
    return folder


@pytest.fixture(scope="module")
def generator(model_dir: Path) -> textgen.TextGenerator:
    return textgen.TextGenerator.load(model_dir)


@dataclass(frozen=True)
class Reference:
    """The greedy generation of PROMPT without stop strings, and the text each token adds."""

    prompt_ids: list[int]
    ids: tuple[int, ...]
    text: str
    chunks: list[str]

    def stop_across(self, first: int, last: int) -> tuple[str, int]:
        """The text from the last character that token ``first`` writes to the first that token
        ``last`` writes, and where it starts (its first place in the text)."""
        start = sum(len(chunk) for chunk in self.chunks[: first + 1]) - 1
        end = sum(len(chunk) for chunk in self.chunks[:last]) + 1
        stop = self.text[start:end]
        assert self.text.find(stop) == start, (stop, self.text)
        return stop, start


@pytest.fixture(scope="module")
def reference(generator: textgen.TextGenerator) -> Reference:
    prompt_ids = generator.encode(PROMPT)
    # The model server encodes a completion's prompt with special tokens, Search-R1 without
    # (the chat template writes them): this tokenizer adds none to plain text.
    assert generator.encode(PROMPT, special=False) == prompt_ids
    out = generator.generate(prompt_ids, NEW_TOKENS)
    assert len(out.ids) == NEW_TOKENS and out.stop is None and not out.ended
    texts = [generator.decode(out.ids[:count]) for count in range(NEW_TOKENS + 1)]
    chunks = []
    for before, after in itertools.pairwise(texts):
        assert after.startswith(before) and len(after) > len(before), (before, after)
        chunks.append(after[len(before) :])
    assert out.text == texts[-1] and textgen.REPLACEMENT not in out.text
    return Reference(prompt_ids, out.ids, out.text, chunks)


# Stop strings that straddle token boundaries: from the end of the first token's text into the
# second's, and across 71 tokens (347 characters: more than the last 64 tokens, or 32, hold).
STRADDLING = pytest.mark.parametrize(
    ("first", "last"), [(0, 1), (0, 70)], ids=["two-tokens", "71-tokens"]
)


# ----------------------------------------------------------------------- stop strings, pure


def test_the_first_stop_string_to_end_cuts_the_text() -> None:
    assert textgen.cut_at_stop("a.b.c", [".c", "."]) == ("a", True)
    assert textgen.cut_at_stop("abc", ["x"]) == ("abc", False)
    assert textgen.cut_at_stop("a.b.c", [".c", "."], keep=True) == ("a.", True)
    assert textgen.cut_at_stop("abc", [], keep=True) == ("abc", False)
    # "b" is complete before "abc" is: generation ends there, so "b" is the stop string.
    assert textgen.find_stop("xabc", ["abc", "b"]) == StopMatch(2, 3)
    assert textgen.cut_at_stop("xabc", ["abc", "b"]) == ("xa", True)
    # Two that end together: the longer one is left out whole.
    assert textgen.find_stop("ok</answer>", ["answer>", "</answer>"]) == StopMatch(2, 11)
    assert textgen.cut_at_stop("ok</answer> more", ["answer>", "</answer>"]) == ("ok", True)


def test_the_incremental_decoder_holds_back_a_partial_character(
    generator: textgen.TextGenerator,
) -> None:
    text = "5 € each"
    ids = generator.encode(text)
    decoder = textgen.IncrementalDecoder(generator.tokenizer)
    added = [decoder.add([token]) for token in ids]
    # The euro sign's three bytes are three tokens: the first two decode to a partial character.
    assert added == ["5", " ", "\ufffd", "\ufffd", "€", " each"]
    assert decoder.text == text == generator.decode(ids)
    decoder = textgen.IncrementalDecoder(generator.tokenizer)
    # Tokens that come together are held back together.
    assert [decoder.add(ids[:3]), decoder.text] == ["5 \ufffd", ""]
    assert [decoder.add(ids[3:5]), decoder.text] == ["5 €", "5 €"]


# ----------------------------------------------------------------------- loading, the template


def test_loading_takes_the_end_and_pad_tokens_and_the_context(
    generator: textgen.TextGenerator, model_dir: Path, tmp_path: Path
) -> None:
    import torch

    tokenizer = generator.tokenizer
    assert generator.eos == [tokenizer.convert_tokens_to_ids(tiny_model.IM_END)]
    assert generator.pad == tokenizer.convert_tokens_to_ids(tiny_model.PAD)
    assert generator.context == 2048
    model = generator.model
    assert not model.training and model.dtype == torch.float32 and model.device.type == "cpu"
    assert textgen.load_model(model_dir, "bfloat16").dtype == torch.bfloat16
    with pytest.raises(ValueError, match="'int8': not one of float32, bfloat16, float16, auto"):
        textgen.load_model(model_dir, "int8")
    # Local files only: a folder without a model is never looked up on the Hub.
    with pytest.raises(ValueError, match="Unrecognized model"):
        textgen.load_model(tmp_path)
    with pytest.raises((OSError, ValueError)):
        textgen.load_tokenizer(tmp_path)


def test_the_chat_template_renders_messages_with_the_generation_prompt(
    generator: textgen.TextGenerator, model_dir: Path
) -> None:
    messages = [{"role": "user", "content": "hi"}]
    assert textgen.has_chat_template(generator.tokenizer)
    assert generator.render_chat(messages) == CHAT_TEMPLATE_RENDERING
    assert textgen.render_chat(generator.tokenizer, messages) == CHAT_TEMPLATE_RENDERING
    plain = textgen.load_tokenizer(model_dir)
    plain.chat_template = None
    assert not textgen.has_chat_template(plain)
    # Search-R1's prompt is one user message of the template, else the instruction as it is.
    prompt = search_infer.render_prompt(generator.tokenizer, "Why?")
    assert prompt == textgen.render_chat(
        generator.tokenizer, [{"role": "user", "content": search_infer.instruction("Why?")}]
    )
    assert search_infer.render_prompt(plain, "Why?") == search_infer.instruction("Why?")


# ----------------------------------------------------------------------- generating


def test_greedy_generation_is_what_transformers_generate_gives(
    generator: textgen.TextGenerator, reference: Reference
) -> None:
    import torch

    input_ids = torch.tensor([reference.prompt_ids])
    with torch.inference_mode():
        output = generator.model.generate(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            do_sample=False,
            max_new_tokens=NEW_TOKENS,
        )
    assert tuple(output[0, len(reference.prompt_ids) :].tolist()) == reference.ids
    assert reference.text.startswith(" many many many")


def test_a_seed_repeats_its_sample_and_leaves_the_random_state(
    generator: textgen.TextGenerator, reference: Reference
) -> None:
    import torch

    state = torch.random.get_rng_state()
    seeded = [
        generator.generate(reference.prompt_ids, 24, temperature=1.0, seed=seed)
        for seed in (7, 7, 8)
    ]
    assert torch.equal(torch.random.get_rng_state(), state)
    assert seeded[0] == seeded[1]
    assert seeded[0].ids != seeded[2].ids
    # Sampling at temperature 1 is not the greedy text.
    assert seeded[0].ids != reference.ids[:24]


@STRADDLING
def test_a_straddling_stop_string_ends_generation_with_the_token_that_completes_it(
    generator: textgen.TextGenerator, reference: Reference, first: int, last: int
) -> None:
    stop, start = reference.stop_across(first, last)
    out = generator.generate(reference.prompt_ids, NEW_TOKENS, stops=["\x00", stop])
    assert out.ids == reference.ids[: last + 1]
    assert out.stop == StopMatch(start, start + len(stop))
    assert out.cut(keep=False) == reference.text[:start] == " man"
    assert out.cut(keep=True) == reference.text[: start + len(stop)]
    assert not out.ended


# ----------------------------------------------------------------------- the two users


@pytest.fixture(scope="module")
def server(model_dir: Path) -> Iterator[str]:
    """The model server's routes over its transformers engine, on a loopback port of this
    process; its base URL."""
    app = model_server.App("tiny", str(model_dir), None)
    app.engine = model_server.Engine.load(model_dir)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), model_server.make_handler(app))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        answer: dict[str, Any] = json.load(response)
    return answer


@STRADDLING
def test_the_model_server_leaves_a_straddling_stop_string_out(
    server: str, reference: Reference, first: int, last: int
) -> None:
    stop, start = reference.stop_across(first, last)
    body = {"prompt": PROMPT, "max_tokens": NEW_TOKENS, "temperature": 0, "stop": [stop]}
    answer = post(f"{server}/v1/completions", body)
    [choice] = answer["choices"]
    assert choice["text"] == reference.text[:start]
    assert choice["finish_reason"] == "stop"
    # Tokens up to the one that completed the stop string.
    assert answer["usage"]["completion_tokens"] == last + 1
    assert answer["usage"]["prompt_tokens"] == len(reference.prompt_ids)


@STRADDLING
def test_search_r1_inference_keeps_a_straddling_stop_string(
    model_dir: Path, reference: Reference, first: int, last: int
) -> None:
    stop, start = reference.stop_across(first, last)
    engine = search_infer.TransformersEngine.load(model_dir, temperature=0.0, seed=0)
    turn = engine.generate(PROMPT, NEW_TOKENS, ("\x00", stop))
    assert turn == search_infer.Generation(reference.text[: start + len(stop)], "stop")
    # Without a stop string in reach the turn runs to its token limit.
    assert engine.generate(PROMPT, 8, ("\x00",)) == search_infer.Generation(
        reference.text[: sum(len(chunk) for chunk in reference.chunks[:8])], "length"
    )
