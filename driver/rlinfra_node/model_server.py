"""Serve the trained model on the head node, supervised by Ray and health-checked.

    python -m rlinfra_node.model_server deploy --engine vllm|transformers --model DIR --port 9090
        [--host 127.0.0.1] [--timeout-s 900] [-- EXTRA SERVER ARGS]
    python -m rlinfra_node.model_server status | stop
    python -m rlinfra_node.model_server serve-transformers --model DIR [--port 9090]
        [--host 127.0.0.1] [--dtype float32|bfloat16|float16|auto] [--served-model-name NAME]

``deploy`` (the last step of a training job) starts a detached Ray actor, ``rlinfra-model-server``
in namespace ``rlinfra``, pinned to the node it runs on. The actor runs the server as a child
process and keeps it alive: a server that exits is started again (with a growing pause, at most
30 s), and one that fails its health check (GET /health) three times in a row is killed and
started again. The actor itself is restarted by Ray if its process dies (max_restarts=-1), and
it starts the server anew; the server gets SIGTERM when its actor goes (PR_SET_PDEATHSIG). A
second ``deploy`` restarts the server so it loads the newly merged model. ``deploy`` returns once
the server answers its health check, or fails after ``--timeout-s``. EXTRA SERVER ARGS go to the
engine's command line after its own (``--served-model-name`` and ``--dtype`` mean the same to
both engines).

Engines:

- ``vllm`` runs ``vllm serve DIR --host H --port P``. It needs a GPU.
- ``transformers`` runs ``serve-transformers``: the model on the CPU with Hugging Face
  transformers (AutoModelForCausalLM and AutoTokenizer, local files only, no remote code), for
  clusters without GPUs and small models. The node's venv needs torch and transformers (and
  jinja2 for chat templates). It binds its port at once and answers /health with 503 until
  the model is loaded, then 200. It generates one request at a time (a lock: on a CPU,
  concurrent generations only slow each other down) and logs one line per generation, without
  the prompt.

The transformers server's HTTP API, in OpenAI's shapes (errors are
``{"error": {"message", "type", "param", "code"}}``: 400 for a bad request, 404 for an unknown
route or a ``model`` other than the one served, 405 for a GET of a POST route, 503 while
loading, 500 when generation fails):

- ``GET /health``: ``{"status": "ok"}`` once loaded.
- ``GET /v1/models``: one model: ``id`` (``--served-model-name``, else DIR as given, as vLLM
  names it), ``root`` (DIR), ``max_model_len`` and ``rlinfra_step`` (below).
- ``POST /v1/completions``: ``prompt`` (a string or a list of strings: one choice each),
  ``max_tokens`` (default 16, as OpenAI), ``temperature`` (0 to 2, default 1.0 as OpenAI; 0 is
  greedy decoding), ``top_p`` (default 1.0), ``stop`` (a string or up to 4), ``seed``, ``n``
  (1 only). Choices carry ``text`` and ``finish_reason`` ("stop": an end-of-sequence token or a
  stop string, which is left out of the text; "length": ``max_tokens`` reached).
- ``POST /v1/chat/completions``: ``messages`` (``role`` and ``content``: a string or text
  parts), rendered with the tokenizer's chat template (with the generation prompt); the same
  sampling fields, ``max_completion_tokens`` or ``max_tokens`` defaulting to the rest of the
  context. The choice carries ``message: {"role": "assistant", "content"}``.
- ``usage``: ``prompt_tokens`` (the prompt's tokens, or the rendered chat's), ``completion_tokens``
  (tokens generated, an end token included, up to the one that completed a stop string),
  ``total_tokens``; summed over the prompts of a list.

Sampling follows the request alone: the model folder's generation_config.json gives only its
end-of-sequence tokens (vLLM, by default, also takes its temperature, top_p, top_k and
repetition penalty as defaults). Fields that would change the answer and that the server cannot
honour (``stream``, ``n`` > 1, ``logprobs``, ``echo``, ``suffix``, penalties, ``logit_bias``,
``tools``, ``response_format``) are refused with 400, never ignored; other unknown fields are
ignored, as vLLM does.

The served model's step (``rlinfra_step`` in /v1/models, and the server's first log line): read
from ``DIR/.rlinfra-merge.json``, the record that ``rlinfra_node.after_training`` writes when it
merges a checkpoint (its ``step`` once its ``state`` is ``done``); else from the nearest
``global_step_N`` folder in DIR's path (a checkpoint's own ``global_step_N/actor/huggingface``);
else null.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from rlinfra_node import textgen

ACTOR = "rlinfra-model-server"
NAMESPACE = "rlinfra"
# The server's log (the supervisor appends to LOG_DIR/server.log).
LOG_DIR = Path(os.environ.get("RLINFRA_SERVING_LOG_DIR", "/opt/rlinfra/serving"))
HEALTH_FAILURES = 3
HEALTH_PERIOD_S = 5.0
# Health checks a starting server may fail (vLLM loads the model first): 10 minutes.
STARTUP_CHECKS = 120
MAX_BACKOFF_S = 30.0
ENGINES = ("vllm", "transformers")


@dataclass(frozen=True)
class ServerConfig:
    engine: str
    model: str
    host: str
    port: int
    extra_args: tuple[str, ...] = field(default=())

    def argv(self, python: str = sys.executable) -> list[str]:
        host = ["--host", self.host, "--port", str(self.port)]
        if self.engine == "vllm":
            vllm = str(Path(python).parent / "vllm")
            return [vllm, "serve", self.model, *host, *self.extra_args]
        if self.engine == "transformers":
            server = [python, "-m", "rlinfra_node.model_server", "serve-transformers"]
            return [*server, "--model", self.model, *host, *self.extra_args]
        raise ValueError(f"engine {self.engine!r}: not one of {', '.join(ENGINES)}")

    @property
    def health_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://{host}:{self.port}/health"


def healthy(url: str, timeout: float = 3.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    import ctypes

    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Supervisor:
    """Runs one server process and keeps it running (the body of the detached Ray actor)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = ServerConfig(**{**config, "extra_args": tuple(config.get("extra_args", ()))})
        self.restarts = 0
        self.last_exit: int | None = None
        self.failures = 0
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self.stopping = False
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        self._start()
        threading.Thread(target=self._watch, daemon=True).start()

    def _start(self) -> None:
        log = open(LOG_DIR / "server.log", "ab")  # noqa: SIM115 - the child owns it
        self.proc = subprocess.Popen(
            self.config.argv(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )
        log.close()
        self.failures = 0
        self.answered = False
        print(
            f"model_server: started pid {self.proc.pid}: {' '.join(self.config.argv())}", flush=True
        )

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def _watch(self) -> None:
        backoff = 1.0
        checked = time.monotonic()
        while not self.stopping:
            time.sleep(1.0)
            with self.lock:
                if self.stopping:
                    return
                if self.proc is None:
                    continue
                code = self.proc.poll()
                if code is not None:
                    self.last_exit = code
                    print(
                        f"model_server: pid {self.proc.pid} exited ({code}); restarting", flush=True
                    )
                    time.sleep(backoff)
                    backoff = min(backoff * 2, MAX_BACKOFF_S)
                    self.restarts += 1
                    self._start()
                    continue
                if time.monotonic() - checked < HEALTH_PERIOD_S:
                    continue
                checked = time.monotonic()
                if healthy(self.config.health_url):
                    self.answered = True
                    self.failures = 0
                    backoff = 1.0
                    continue
                self.failures += 1
                # A server still loading its model has not answered yet; one that answered and
                # then stops answering is hung.
                limit = HEALTH_FAILURES if self.answered else STARTUP_CHECKS
                if self.failures >= limit:
                    print(
                        f"model_server: {self.failures} failed health checks; restarting",
                        flush=True,
                    )
                    self._kill()
                    self.restarts += 1
                    self._start()

    def restart(self) -> int:
        with self.lock:
            self._kill()
            self.restarts += 1
            self._start()
            assert self.proc is not None
            return self.proc.pid

    def status(self) -> dict[str, Any]:
        proc = self.proc
        return {
            "config": asdict(self.config),
            "pid": proc.pid if proc else None,
            "running": bool(proc and proc.poll() is None),
            "healthy": healthy(self.config.health_url),
            "restarts": self.restarts,
            "last_exit": self.last_exit,
        }

    def shutdown(self) -> None:
        with self.lock:
            self.stopping = True
            self._kill()


def _actor(create: dict[str, Any] | None = None) -> Any:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    try:
        return ray.get_actor(ACTOR, namespace=NAMESPACE)
    except ValueError:
        if create is None:
            return None
    remote = ray.remote(Supervisor).options(
        name=ACTOR,
        namespace=NAMESPACE,
        lifetime="detached",
        max_restarts=-1,
        max_task_retries=-1,
        num_cpus=0,
        max_concurrency=4,
        scheduling_strategy=NodeAffinitySchedulingStrategy(
            ray.get_runtime_context().get_node_id(), soft=False
        ),
    )
    return remote.remote(create)


def deploy(config: ServerConfig, timeout_s: float) -> int:
    import ray

    ray.init(address="auto", namespace=NAMESPACE, log_to_driver=False)
    actor = _actor()
    wanted = asdict(config)
    if actor is not None:
        current = ray.get(actor.status.remote(), timeout=60)
        if current["config"] == {**wanted, "extra_args": list(config.extra_args)}:
            pid = ray.get(actor.restart.remote(), timeout=120)
            print(f"model_server: restarted the server (pid {pid}) to load {config.model}")
        else:
            ray.get(actor.shutdown.remote(), timeout=120)
            ray.kill(actor, no_restart=True)
            time.sleep(1)
            actor = None
    if actor is None:
        actor = _actor(create=wanted)
        print(f"model_server: started the supervisor for {config.engine} on port {config.port}")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = ray.get(actor.status.remote(), timeout=60)
        if status["healthy"]:
            print(f"model_server: healthy at {config.health_url} (pid {status['pid']})")
            return 0
        time.sleep(2)
    print(
        f"model_server: {config.health_url} did not answer within {timeout_s:.0f} s",
        file=sys.stderr,
    )
    return 1


def _status_or_stop(command: str) -> int:
    import ray

    ray.init(address="auto", namespace=NAMESPACE, log_to_driver=False)
    actor = _actor()
    if actor is None:
        print(json.dumps({"deployed": False}))
        return 0 if command == "stop" else 1
    if command == "stop":
        ray.get(actor.shutdown.remote(), timeout=120)
        ray.kill(actor, no_restart=True)
        print(json.dumps({"deployed": False, "stopped": True}))
        return 0
    print(json.dumps({"deployed": True, **ray.get(actor.status.remote(), timeout=60)}))
    return 0


# ---------------------------------------------------------------- the transformers server

# What the server reads a model's training step from (see the module docstring).
STEP_IN_PATH = re.compile(r"global_step_(\d+)")
# OpenAI's default max_tokens for /v1/completions; chat defaults to the rest of the context.
COMPLETION_MAX_TOKENS = 16
MAX_STOPS = 4
MAX_BODY_BYTES = 16 * 1024 * 1024
# OpenAI request fields whose other values this server cannot honour: refused, never ignored.
UNSUPPORTED: dict[str, tuple[Any, ...]] = {
    "stream": (None, False),
    "n": (None, 1),
    "best_of": (None, 1),
    "echo": (None, False),
    "suffix": (None, ""),
    "logprobs": (None, False),
    "top_logprobs": (None, 0),
    "presence_penalty": (None, 0),
    "frequency_penalty": (None, 0),
    "logit_bias": (None, {}),
    "tools": (None, []),
    "response_format": (None, {"type": "text"}),
}
ERROR_TYPES = {
    400: "invalid_request_error",
    404: "not_found_error",
    405: "invalid_request_error",
    500: "internal_error",
    503: "service_unavailable",
}


class RequestError(Exception):
    """A request the server refuses, with the HTTP status and the field at fault."""

    def __init__(self, message: str, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param

    def body(self) -> dict[str, Any]:
        kind = ERROR_TYPES.get(self.status, "invalid_request_error")
        return {"error": {"message": str(self), "type": kind, "param": self.param, "code": None}}


@dataclass(frozen=True)
class Sampling:
    """How to generate: OpenAI's fields and defaults. ``max_tokens`` None: to the context's end."""

    max_tokens: int | None = COMPLETION_MAX_TOKENS
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None


@dataclass(frozen=True)
class Generation:
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "stop" (an end token or a stop string) or "length" (max_tokens)


def served_step(model_dir: Path) -> tuple[int | None, str]:
    """The training step of the model in ``model_dir`` and where it was read ('' when unknown)."""
    from rlinfra_node.after_training import MARKER, read_record

    record = read_record(model_dir)
    step = record.get("step") if record else None
    if record and record.get("state") == "done" and type(step) is int:
        return step, str(model_dir / MARKER)
    for part in reversed(model_dir.absolute().parts):
        match = STEP_IN_PATH.fullmatch(part)
        if match:
            return int(match.group(1)), f"the path ({part})"
    return None, ""


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _check_common(body: Any, model_id: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise RequestError(f"the request body must be a JSON object, not {_kind(body)}")
    name = body.get("model")
    if name is not None and name != model_id:
        raise RequestError(
            f"the model {name!r} does not exist: this server serves {model_id!r}", 404, "model"
        )
    for field_name, allowed in UNSUPPORTED.items():
        if field_name in body and body[field_name] not in allowed:
            shown = " or ".join(json.dumps(value) for value in allowed)
            raise RequestError(
                f"{field_name!r}={json.dumps(body[field_name])} is not supported here "
                f"(give {shown}, or leave it out)",
                param=field_name,
            )
    return body


def _number(body: dict[str, Any], name: str, default: float, low: float, high: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestError(f"{name!r} must be a number, not {_kind(value)}", param=name)
    if not low <= value <= high:
        raise RequestError(f"{name!r} must be between {low} and {high}, not {value}", param=name)
    return float(value)


def _integer(body: dict[str, Any], name: str, low: int | None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"{name!r} must be an integer, not {_kind(value)}", param=name)
    if low is not None and value < low:
        raise RequestError(f"{name!r} must be at least {low}, not {value}", param=name)
    return value


def _sampling(
    body: dict[str, Any], max_tokens_fields: Sequence[str], default: int | None
) -> Sampling:
    max_tokens = default
    for name in max_tokens_fields:
        given = _integer(body, name, 1)
        if given is not None:
            max_tokens = given
            break
    top_p = _number(body, "top_p", 1.0, 0.0, 1.0)
    if top_p == 0:
        raise RequestError("'top_p' must be above 0 (use temperature 0 for greedy)", param="top_p")
    stop = body.get("stop")
    stops = [stop] if isinstance(stop, str) else stop if stop is not None else []
    if (
        not isinstance(stops, list)
        or len(stops) > MAX_STOPS
        or not all(isinstance(item, str) and item for item in stops)
    ):
        raise RequestError(
            f"'stop' must be a non-empty string or a list of at most {MAX_STOPS} of them",
            param="stop",
        )
    return Sampling(
        max_tokens=max_tokens,
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=top_p,
        stop=tuple(stops),
        seed=_integer(body, "seed", None),
    )


def parse_completion(body: Any, model_id: str) -> tuple[tuple[str, ...], Sampling]:
    """The prompts and sampling of a /v1/completions request; RequestError when it is bad."""
    body = _check_common(body, model_id)
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        prompts: tuple[str, ...] = (prompt,)
    elif isinstance(prompt, list) and prompt and all(isinstance(item, str) for item in prompt):
        prompts = tuple(prompt)
    else:
        raise RequestError(
            f"'prompt' must be a string or a non-empty list of strings, not {_kind(prompt)}",
            param="prompt",
        )
    return prompts, _sampling(body, ("max_tokens",), COMPLETION_MAX_TOKENS)


def parse_chat(body: Any, model_id: str) -> tuple[tuple[dict[str, str], ...], Sampling]:
    """The messages and sampling of a /v1/chat/completions request; RequestError when it is bad."""
    body = _check_common(body, model_id)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list of messages", param="messages")
    parsed = []
    for index, message in enumerate(messages):
        param = f"messages[{index}]"
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise RequestError(
                f"{param} must be an object with a 'role' and a 'content'", param=param
            )
        content = message.get("content")
        if isinstance(content, list):
            if not all(
                isinstance(part, dict)
                and part.get("type") == "text"
                and isinstance(part.get("text"), str)
                for part in content
            ):
                raise RequestError(f"{param}.content: only text parts are supported", param=param)
            content = "\n".join(part["text"] for part in content)
        if not isinstance(content, str):
            raise RequestError(
                f"{param}.content must be a string or a list of text parts, not {_kind(content)}",
                param=param,
            )
        parsed.append({"role": message["role"], "content": content})
    return tuple(parsed), _sampling(body, ("max_completion_tokens", "max_tokens"), None)


def _usage(results: Sequence[Generation]) -> dict[str, int]:
    prompt = sum(result.prompt_tokens for result in results)
    completion = sum(result.completion_tokens for result in results)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def completion_response(model_id: str, results: Sequence[Generation]) -> dict[str, Any]:
    choices = [
        {
            "index": index,
            "text": result.text,
            "logprobs": None,
            "finish_reason": result.finish_reason,
        }
        for index, result in enumerate(results)
    ]
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": model_id,
        "choices": choices,
        "usage": _usage(results),
    }


def chat_response(model_id: str, result: Generation) -> dict[str, Any]:
    message = {"role": "assistant", "content": result.text}
    choice = {
        "index": 0,
        "message": message,
        "logprobs": None,
        "finish_reason": result.finish_reason,
    }
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model_id,
        "choices": [choice],
        "usage": _usage([result]),
    }


class Engine:
    """A causal language model and its tokenizer on the CPU (``textgen.TextGenerator``),
    generating one request at a time.

    Sampling follows the request alone (OpenAI's fields and defaults): the model folder's
    generation_config.json gives only its end-of-sequence tokens.
    """

    def __init__(self, model: Any, tokenizer: Any) -> None:
        from transformers import GenerationConfig

        self.generator = textgen.TextGenerator(model, tokenizer)
        self.model = model
        self.context = self.generator.context
        model.generation_config = GenerationConfig(
            bos_token_id=model.generation_config.bos_token_id,
            eos_token_id=self.generator.eos or None,
            pad_token_id=self.generator.pad,
        )

    @classmethod
    def load(cls, model_dir: Path, dtype: str = "float32") -> Engine:
        tokenizer = textgen.load_tokenizer(model_dir)
        return cls(textgen.load_model(model_dir, dtype), tokenizer)

    def describe(self) -> str:
        params = sum(p.numel() for p in self.model.parameters())
        kind = type(self.model).__name__
        dtype = str(self.model.dtype).removeprefix("torch.")
        return f"{kind}, {params:,} parameters, {dtype}, context {self.context}"

    def encode(self, text: str, *, special: bool = True) -> list[int]:
        return self.generator.encode(text, special=special)

    def chat_prompt(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """The token ids of ``messages`` rendered by the tokenizer's chat template."""
        if not textgen.has_chat_template(self.generator.tokenizer):
            raise RequestError(
                "the model's tokenizer has no chat template: use /v1/completions", param="messages"
            )
        try:
            text = self.generator.render_chat(messages)
        except Exception as exc:  # the template's own errors (jinja2's, raise_exception())
            raise RequestError(
                f"the chat template refused the messages: {exc}", param="messages"
            ) from exc
        # The template writes the special tokens itself.
        return self.encode(text, special=False)

    def budget(self, prompt_ids: Sequence[int], max_tokens: int | None, param: str) -> int:
        """How many tokens to generate at most; RequestError when the context cannot hold them."""
        if not prompt_ids:
            raise RequestError("the prompt is empty: it has no tokens", param=param)
        if self.context is None:
            return COMPLETION_MAX_TOKENS if max_tokens is None else max_tokens
        room = self.context - len(prompt_ids)
        wanted = room if max_tokens is None else max_tokens
        if wanted > room or room < 1:
            raise RequestError(
                f"this model's context is {self.context} tokens: the prompt has "
                f"{len(prompt_ids)} and {wanted} more were asked for",
                param="max_tokens",
            )
        return wanted

    def generate(self, prompt_ids: Sequence[int], budget: int, sampling: Sampling) -> Generation:
        out = self.generator.generate(
            prompt_ids,
            budget,
            stops=sampling.stop,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            seed=sampling.seed,
        )
        # OpenAI's rule: the stop string is left out of the text.
        done = out.stop is not None or out.ended
        reason = "length" if len(out.ids) >= budget and not done else "stop"
        return Generation(out.cut(keep=False), len(prompt_ids), len(out.ids), reason)


class App:
    """The server's routes over one engine (None while the model loads)."""

    def __init__(self, model_id: str, root: str, step: int | None) -> None:
        self.model_id = model_id
        self.root = root
        self.step = step
        self.created = int(time.time())
        self.engine: Engine | None = None

    def _engine(self) -> Engine:
        if self.engine is None:
            raise RequestError("the model is still loading", 503)
        return self.engine

    def models(self) -> dict[str, Any]:
        engine = self._engine()
        card = {
            "id": self.model_id,
            "object": "model",
            "created": self.created,
            "owned_by": "rlinfra",
            "root": self.root,
            "max_model_len": engine.context,
            "rlinfra_step": self.step,
        }
        return {"object": "list", "data": [card]}

    def complete(self, body: Any) -> dict[str, Any]:
        prompts, sampling = parse_completion(body, self.model_id)
        engine = self._engine()
        encoded = [engine.encode(prompt) for prompt in prompts]
        budgets = [engine.budget(ids, sampling.max_tokens, "prompt") for ids in encoded]
        results = [
            engine.generate(ids, n, sampling) for ids, n in zip(encoded, budgets, strict=True)
        ]
        return completion_response(self.model_id, results)

    def chat(self, body: Any) -> dict[str, Any]:
        messages, sampling = parse_chat(body, self.model_id)
        engine = self._engine()
        ids = engine.chat_prompt(messages)
        result = engine.generate(ids, engine.budget(ids, sampling.max_tokens, "messages"), sampling)
        return chat_response(self.model_id, result)


def make_handler(app: App) -> type[BaseHTTPRequestHandler]:
    routes: dict[str, Callable[[Any], dict[str, Any]]] = {
        "/v1/completions": app.complete,
        "/v1/chat/completions": app.chat,
    }

    class Handler(BaseHTTPRequestHandler):
        server_version = "rlinfra-model-server"

        def log_message(self, format: str, *args: Any) -> None:
            return  # one line per generation is printed below; health checks are not logged

        def _send(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _path(self) -> str:
            return urllib.parse.urlsplit(self.path).path.rstrip("/") or "/"

        def do_GET(self) -> None:
            path = self._path()
            if path == "/health":
                loaded = app.engine is not None
                self._send(200 if loaded else 503, {"status": "ok" if loaded else "loading"})
            elif path == "/v1/models":
                try:
                    self._send(200, app.models())
                except RequestError as err:
                    self._send(err.status, err.body())
            elif path in routes:
                self._send(405, RequestError(f"use POST for {path}", 405).body())
            else:
                self._send(404, RequestError(f"no route GET {path}", 404).body())

        def do_POST(self) -> None:
            path = self._path()
            began = time.monotonic()
            try:
                route = routes.get(path)
                if route is None:
                    raise RequestError(f"no route POST {path}", 404)
                response = route(self._body())
            except RequestError as err:
                print(f"serve-transformers: POST {path}: {err.status}: {err}", flush=True)
                self._send(err.status, err.body())
                return
            except Exception as exc:
                print(f"serve-transformers: POST {path}: failed: {exc!r}", flush=True)
                self._send(500, RequestError(f"generation failed: {exc}", 500).body())
                return
            usage = response["usage"]
            print(
                f"serve-transformers: POST {path}: 200 in {time.monotonic() - began:.2f} s, "
                f"{usage['prompt_tokens']} prompt + {usage['completion_tokens']} completion tokens",
                flush=True,
            )
            self._send(200, response)

        def _body(self) -> Any:
            try:
                length = int(self.headers.get("Content-Length", ""))
            except ValueError:
                raise RequestError("send a JSON body with a Content-Length") from None
            if not 0 < length <= MAX_BODY_BYTES:
                raise RequestError(f"the body must hold 1 to {MAX_BODY_BYTES} bytes, not {length}")
            try:
                return json.loads(self.rfile.read(length))
            except ValueError as exc:
                raise RequestError(f"the body is not JSON: {exc}") from None

    return Handler


def _http_server(host: str, port: int, handler: type[BaseHTTPRequestHandler]) -> HTTPServer:
    class Server(ThreadingHTTPServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

    return Server((host, port), handler)


def serve_transformers(
    model_dir: Path,
    host: str,
    port: int,
    *,
    dtype: str = "float32",
    served_model_name: str | None = None,
) -> int:
    """Serve ``model_dir`` until SIGTERM; /health answers 200 once the model is loaded."""
    # Local files only: a node may have no way out, and a folder is never a Hub name.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if not (model_dir / "config.json").is_file():
        print(
            f"serve-transformers: {model_dir}: no config.json: not a Hugging Face model folder",
            file=sys.stderr,
        )
        return 2
    step, source = served_step(model_dir)
    app = App(served_model_name or str(model_dir), str(model_dir), step)
    shown_step = f"step {step} (from {source})" if step is not None else "step unknown"
    try:
        server = _http_server(host, port, make_handler(app))
    except OSError as exc:
        print(f"serve-transformers: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
        return 1
    print(f"serve-transformers: loading {model_dir}, {shown_step}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    failed: list[BaseException] = []
    where = f"[{host}]" if ":" in host else host

    def load() -> None:
        try:
            engine = Engine.load(model_dir, dtype)
        except Exception as exc:
            failed.append(exc)
            print(
                f"serve-transformers: cannot load {model_dir}: {exc}", file=sys.stderr, flush=True
            )
            server.shutdown()
            return
        print(
            f"serve-transformers: serving {app.model_id} ({engine.describe()}), "
            f"{shown_step}, on http://{where}:{port}",
            flush=True,
        )
        app.engine = engine  # from here on /health answers 200

    threading.Thread(target=load, name="load-model", daemon=True).start()
    server.serve_forever()
    server.server_close()
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in args_in:
        extra = args_in[args_in.index("--") + 1 :]
        args_in = args_in[: args_in.index("--")]
    parser = argparse.ArgumentParser(prog="model_server")
    sub = parser.add_subparsers(dest="command", required=True)
    dep = sub.add_parser("deploy")
    dep.add_argument("--engine", choices=ENGINES, required=True)
    dep.add_argument("--model", required=True)
    dep.add_argument("--host", default="127.0.0.1")
    dep.add_argument("--port", type=int, default=9090)
    dep.add_argument("--timeout-s", type=float, default=900.0)
    sub.add_parser("status")
    sub.add_parser("stop")
    srv = sub.add_parser("serve-transformers", help="serve DIR on the CPU with transformers")
    srv.add_argument("--model", type=Path, required=True, help="Hugging Face model folder")
    srv.add_argument("--host", default="127.0.0.1")
    srv.add_argument("--port", type=int, default=9090)
    srv.add_argument("--dtype", choices=textgen.DTYPES, default="float32")
    srv.add_argument("--served-model-name", default=None, help="the model's id (default: DIR)")
    args = parser.parse_args(args_in)
    if args.command == "deploy":
        config = ServerConfig(args.engine, args.model, args.host, args.port, tuple(extra))
        return deploy(config, args.timeout_s)
    if args.command == "serve-transformers":
        return serve_transformers(
            args.model,
            args.host,
            args.port,
            dtype=args.dtype,
            served_model_name=args.served_model_name,
        )
    return _status_or_stop(args.command)


if __name__ == "__main__":
    sys.exit(main())
