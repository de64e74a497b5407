"""The model server: its request rules, the transformers engine as a real process on loopback
(against a tiny random Qwen2 made here, compared with transformers run in this process), and the
supervisor that keeps it running."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from rlinfra_node import model_server
from rlinfra_node.model_server import RequestError, Sampling

SENTENCES = [
    "The cluster trains the policy with Ray and Verl.",
    "A reward model scores each answer; the policy learns from the scores.",
    "Serve the merged model on the head node and ask it a question.",
    "What is two plus two? Two plus two is four.",
    "The quick brown fox jumps over the lazy dog.",
]
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
STEP = 8
# The node package as this test imports it, for the server processes.
NODE_PATH = str(Path(model_server.__file__).resolve().parents[1])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def node_env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": f"{NODE_PATH}{os.pathsep}{path}" if path else NODE_PATH}


def make_tiny_model(folder: Path) -> None:
    """A random Qwen2 (one layer, hidden size 32) and a byte-level BPE tokenizer trained here."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(SENTENCES, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=64,
        max_position_embeddings=128,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        # Larger than the default 0.02 so that logits are far apart and greedy picks are stable.
        initializer_range=0.5,
    )
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(folder)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("checkpoints") / "hf_model"
    folder.mkdir()
    make_tiny_model(folder)
    # What rlinfra_node.after_training leaves beside a finished merge.
    record = {"state": "done", "step": STEP, "program": "verl"}
    (folder / ".rlinfra-merge.json").write_text(json.dumps(record))
    return folder


@dataclass(frozen=True)
class Reference:
    """The same model and tokenizer, loaded in this process."""

    model: Any
    tokenizer: Any

    def greedy(self, ids: list[int], max_new_tokens: int) -> tuple[str, list[int]]:
        import torch

        input_ids = torch.tensor([ids])
        with torch.inference_mode():
            output = self.model.generate(
                input_ids=input_ids,
                attention_mask=torch.ones_like(input_ids),
                do_sample=False,
                max_new_tokens=max_new_tokens,
            )
        new = output[0, len(ids) :].tolist()
        return self.tokenizer.decode(new, skip_special_tokens=True), new


@pytest.fixture(scope="module")
def reference(model_dir: Path) -> Reference:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True).eval()
    return Reference(model, tokenizer)


@pytest.fixture(scope="module")
def supervisor(
    model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[model_server.Supervisor]:
    """``serve-transformers`` run by the supervisor on a free loopback port: one for the module
    (each start imports torch and transformers, about 10 s of CPU). Tests wait for it to be
    healthy and count what they change, not from zero."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(model_server, "LOG_DIR", tmp_path_factory.mktemp("serving"))
        patch.setenv("PYTHONPATH", node_env()["PYTHONPATH"])
        config = {
            "engine": "transformers",
            "model": str(model_dir),
            "host": "127.0.0.1",
            "port": free_port(),
        }
        sup = model_server.Supervisor(config)
        try:
            wait_healthy(sup.config.health_url)
            yield sup
        finally:
            sup.shutdown()


@pytest.fixture
def server(supervisor: model_server.Supervisor) -> str:
    """The supervised server's base URL, once it answers."""
    wait_healthy(supervisor.config.health_url)
    return supervisor.config.health_url.removesuffix("/health")


def wait_healthy(url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if model_server.healthy(url):
            return
        time.sleep(0.3)
    log = model_server.LOG_DIR / "server.log"
    shown = log.read_text() if log.is_file() else ""
    raise AssertionError(f"{url} not healthy within {timeout} s; the server's log:\n{shown}")


def server_log() -> str:
    return (model_server.LOG_DIR / "server.log").read_text()


def call(url: str, body: Any = None, raw: bytes | None = None) -> tuple[int, dict[str, Any]]:
    """(status, JSON body) of a GET (no body) or a POST."""
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as err:
        with err:
            return err.code, json.load(err)


# ---------------------------------------------------------------- pure: no model, no process


def test_vllm_argv_is_the_reference_command() -> None:
    config = model_server.ServerConfig("vllm", "/checkpoints/hf_model", "0.0.0.0", 9090, ("--x",))
    assert config.argv("/opt/rlinfra/venv/bin/python") == [
        "/opt/rlinfra/venv/bin/vllm",
        "serve",
        "/checkpoints/hf_model",
        "--host",
        "0.0.0.0",
        "--port",
        "9090",
        "--x",
    ]
    assert config.health_url == "http://127.0.0.1:9090/health"


def test_transformers_argv_runs_this_module_and_unknown_engines_are_refused() -> None:
    extra = ("--dtype", "bfloat16")
    config = model_server.ServerConfig("transformers", "/m", "127.0.0.1", 9090, extra)
    assert config.argv("/venv/bin/python") == [
        "/venv/bin/python",
        "-m",
        "rlinfra_node.model_server",
        "serve-transformers",
        "--model",
        "/m",
        "--host",
        "127.0.0.1",
        "--port",
        "9090",
        "--dtype",
        "bfloat16",
    ]
    with pytest.raises(ValueError, match="'standin': not one of vllm, transformers"):
        model_server.ServerConfig("standin", "/m", "127.0.0.1", 9090).argv()
    with pytest.raises(SystemExit) as exit_info:
        model_server.main(["deploy", "--engine", "standin", "--model", "/m"])
    assert exit_info.value.code == 2


def test_the_step_comes_from_the_merge_record_else_the_path(tmp_path: Path) -> None:
    merged = tmp_path / "global_step_40" / "actor" / "huggingface"
    merged.mkdir(parents=True)
    assert model_server.served_step(merged) == (40, "the path (global_step_40)")
    record = merged / ".rlinfra-merge.json"
    record.write_text(json.dumps({"state": "done", "step": 12}))
    assert model_server.served_step(merged) == (12, str(record))
    # A merge that has not finished says nothing about the folder's model.
    record.write_text(json.dumps({"state": "merging", "step": 12}))
    assert model_server.served_step(merged)[0] == 40
    plain = tmp_path / "hf_model"
    plain.mkdir()
    assert model_server.served_step(plain) == (None, "")


def test_requests_take_openai_defaults() -> None:
    prompts, sampling = model_server.parse_completion({"prompt": "hi"}, "m")
    assert prompts == ("hi",)
    assert sampling == Sampling(max_tokens=16, temperature=1.0, top_p=1.0, stop=(), seed=None)
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]}]}
    messages, sampling = model_server.parse_chat(body, "m")
    assert messages == ({"role": "user", "content": "a"},)
    assert sampling.max_tokens is None  # the rest of the context
    body = {**body, "model": "m", "max_tokens": 5, "max_completion_tokens": 3, "stop": "x"}
    assert model_server.parse_chat(body, "m")[1] == Sampling(max_tokens=3, stop=("x",))


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ([1, 2], 400, None),
        ({}, 400, "prompt"),
        ({"prompt": 7}, 400, "prompt"),
        ({"prompt": []}, 400, "prompt"),
        ({"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
        ({"prompt": "x", "max_tokens": True}, 400, "max_tokens"),
        ({"prompt": "x", "temperature": 2.5}, 400, "temperature"),
        ({"prompt": "x", "temperature": "hot"}, 400, "temperature"),
        ({"prompt": "x", "top_p": 0}, 400, "top_p"),
        ({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, 400, "stop"),
        ({"prompt": "x", "stop": [""]}, 400, "stop"),
        ({"prompt": "x", "n": 2}, 400, "n"),
        ({"prompt": "x", "stream": True}, 400, "stream"),
        ({"prompt": "x", "logprobs": 1}, 400, "logprobs"),
        ({"prompt": "x", "model": "other"}, 404, "model"),
    ],
)
def test_bad_completion_requests_are_refused(body: Any, status: int, param: str | None) -> None:
    with pytest.raises(RequestError) as err:
        model_server.parse_completion(body, "m")
    assert (err.value.status, err.value.param) == (status, param)
    assert err.value.body()["error"]["message"] == str(err.value)


def test_a_server_still_loading_answers_503() -> None:
    app = model_server.App("m", "/m", None)
    server = ThreadingHTTPServer(("127.0.0.1", 0), model_server.make_handler(app))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert call(f"{base}/health") == (503, {"status": "loading"})
        assert not model_server.healthy(f"{base}/health")
        assert call(f"{base}/v1/models")[0] == 503
        status, body = call(f"{base}/v1/completions", {"prompt": "x"})
        assert status == 503 and body["error"]["type"] == "service_unavailable"
    finally:
        server.shutdown()
        server.server_close()


def test_a_folder_that_is_not_a_model_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = model_server.main(["serve-transformers", "--model", str(tmp_path), "--port", "1"])
    assert code == 2
    assert "no config.json: not a Hugging Face model folder" in capsys.readouterr().err


# ---------------------------------------------------------------- the real server


def test_health_and_models_name_the_model_and_its_step(server: str, model_dir: Path) -> None:
    assert call(f"{server}/health") == (200, {"status": "ok"})
    status, body = call(f"{server}/v1/models")
    assert status == 200 and body["object"] == "list"
    [card] = body["data"]
    assert card["id"] == str(model_dir) and card["object"] == "model"
    assert card["rlinfra_step"] == STEP and card["max_model_len"] == 128
    log = server_log()
    assert f"serve-transformers: loading {model_dir}, step {STEP} (from {model_dir}/" in log, log
    assert "Qwen2ForCausalLM" in log and "Loading weights" not in log, log


def test_greedy_completions_are_what_generate_gives_in_process(
    server: str, model_dir: Path, reference: Reference
) -> None:
    prompts = ["The policy learns", "What is two plus two?"]
    body = {"model": str(model_dir), "prompt": prompts, "max_tokens": 12, "temperature": 0}
    status, answer = call(f"{server}/v1/completions", body)
    assert status == 200, answer
    assert answer["object"] == "text_completion" and answer["model"] == str(model_dir)
    assert answer["id"].startswith("cmpl-") and isinstance(answer["created"], int)
    prompt_tokens = completion_tokens = 0
    for index, (prompt, choice) in enumerate(zip(prompts, answer["choices"], strict=True)):
        ids = reference.tokenizer(prompt)["input_ids"]
        text, new = reference.greedy(ids, 12)
        assert choice["index"] == index and choice["text"] == text, (prompt, choice, text)
        ended = new[-1] == reference.tokenizer.eos_token_id
        assert choice["finish_reason"] == ("stop" if ended else "length")
        prompt_tokens += len(ids)
        completion_tokens += len(new)
    assert answer["usage"] == {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def test_a_stop_string_ends_the_text_before_it(server: str, reference: Reference) -> None:
    prompt = "Serve the merged model"
    ids = reference.tokenizer(prompt)["input_ids"]
    text, _ = reference.greedy(ids, 24)
    assert len(text) >= 6, text
    stop = text[3:5]
    body = {"prompt": prompt, "max_tokens": 24, "temperature": 0, "stop": [stop, "\x00"]}
    status, answer = call(f"{server}/v1/completions", body)
    assert status == 200, answer
    [choice] = answer["choices"]
    assert choice["text"] == text[: text.index(stop)]
    assert choice["finish_reason"] == "stop"
    assert answer["usage"]["completion_tokens"] < 24


def test_chat_completions_apply_the_chat_template(server: str, reference: Reference) -> None:
    messages = [
        {"role": "system", "content": "You answer questions."},
        {"role": "user", "content": "What is two plus two?"},
    ]
    body = {"messages": messages, "max_tokens": 10, "temperature": 0}
    status, answer = call(f"{server}/v1/chat/completions", body)
    assert status == 200, answer
    assert answer["object"] == "chat.completion" and answer["id"].startswith("chatcmpl-")
    rendered = reference.tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )
    assert rendered.endswith("<|im_start|>assistant\n")
    ids = reference.tokenizer(rendered, add_special_tokens=False)["input_ids"]
    text, new = reference.greedy(ids, 10)
    [choice] = answer["choices"]
    assert choice["message"] == {"role": "assistant", "content": text}
    assert answer["usage"]["prompt_tokens"] == len(ids)
    assert answer["usage"]["completion_tokens"] == len(new)


def test_sampling_repeats_with_a_seed_and_only_then(server: str) -> None:
    body = {"prompt": "The cluster", "max_tokens": 32, "temperature": 2.0, "top_p": 0.95}
    seeded = [call(f"{server}/v1/completions", {**body, "seed": 7}) for _ in range(2)]
    assert seeded[0][0] == 200, seeded[0]
    assert seeded[0][1]["choices"] == seeded[1][1]["choices"]
    # A seed holds for its own request only: two without one differ (32 tokens at temperature 2).
    free = [call(f"{server}/v1/completions", body)[1]["choices"][0]["text"] for _ in range(2)]
    assert free[0] != free[1], free


def test_bad_requests_get_400_and_the_server_goes_on(server: str, model_dir: Path) -> None:
    status, body = call(f"{server}/v1/completions", raw=b"not json")
    assert status == 400 and "not JSON" in body["error"]["message"]
    assert body["error"]["type"] == "invalid_request_error"
    status, body = call(f"{server}/v1/completions", {"prompt": "x", "max_tokens": 500})
    assert (status, body["error"]["param"]) == (400, "max_tokens")
    assert "context is 128 tokens" in body["error"]["message"]
    status, body = call(f"{server}/v1/completions", {"prompt": ""})
    assert (status, body["error"]["param"]) == (400, "prompt")
    status, body = call(f"{server}/v1/chat/completions", {"messages": [{"content": "x"}]})
    assert (status, body["error"]["param"]) == (400, "messages[0]")
    assert call(f"{server}/v1/completions", {"prompt": "x", "model": "gpt-4"})[0] == 404
    assert call(f"{server}/v1/embeddings", {"input": "x"})[0] == 404
    assert call(f"{server}/v1/completions")[0] == 405
    assert call(f"{server}/health") == (200, {"status": "ok"})


# ---------------------------------------------------------------- the supervisor


def test_a_killed_server_is_started_again(supervisor: model_server.Supervisor) -> None:
    wait_healthy(supervisor.config.health_url)
    before = supervisor.status()
    served = server_log().count("serve-transformers: serving ")
    os.kill(before["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        status = supervisor.status()
        if status["pid"] != before["pid"] and status["healthy"]:
            break
        time.sleep(0.5)
    status = supervisor.status()
    assert status["pid"] != before["pid"] and status["healthy"], status
    assert status["restarts"] == before["restarts"] + 1
    assert status["last_exit"] == -signal.SIGKILL
    assert server_log().count("serve-transformers: serving ") == served + 1, server_log()


def test_restart_loads_the_model_again(supervisor: model_server.Supervisor) -> None:
    wait_healthy(supervisor.config.health_url)
    before = supervisor.status()
    served = server_log().count("serve-transformers: serving ")
    old = supervisor.proc
    second = supervisor.restart()
    assert second != before["pid"]
    assert old is not None and old.returncode == 0  # SIGTERM: a clean shutdown, not a kill
    wait_healthy(supervisor.config.health_url)
    assert supervisor.status()["restarts"] == before["restarts"] + 1
    assert server_log().count("serve-transformers: serving ") == served + 1, server_log()
