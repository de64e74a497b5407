"""Search-R1 inference: a model answers questions, calling a search tool as it reasons.

    python -m rlinfra_node.search_infer --model DIR [--search local|google] [--max-turns N]
        [--retrieval-url URL/retrieve] [--topk K] [--question TEXT ...] [--questions FILE]
        [--out DIR] [--max-new-tokens N] [--engine auto|transformers|vllm] [--temperature T]
        [--seed S] [--retrieval-timeout S] [--google-port P] [--google-timeout S]
        [--scripted-turns FILE]

What Search-R1's ``infer.py`` does, for the model in ``--model`` (the original loads a hard-coded
model id and ignores MODEL_PATH). For each question:

1. The prompt tells the model to reason, to search with ``<search> query </search>`` (results
   come back inside ``<information> ... </information>``) and to give the final answer inside
   ``<answer> ... </answer>``. It is rendered with the tokenizer's chat template as one user
   message (with the generation prompt) when the tokenizer has a template, else used as it is.
2. The model generates until it writes ``</search>`` or ``</answer>``, an end-of-sequence token,
   or ``--max-new-tokens`` tokens (a turn).
3. A turn that ends in ``</search>``: the text of its last ``<search>`` is POSTed to the retrieval
   service (``{"queries": [q], "topk": K, "return_scores": true}``), the passages are written as
   Search-R1 writes them (``Doc 1(Title: <first line>) <rest>``, one line each) inside
   ``\\n\\n<information>...</information>\\n\\n`` after the turn, and the model goes on. A blank
   query is not sent; the model is told so in the same place.
4. The loop stops at an ``</answer>`` (the answer is the text of the last ``<answer>``), at a turn
   that ends without either tag (no answer), or when the model asks for search number
   ``--max-turns`` + 1: that search is not made, the model is told to answer now and gets one
   last turn; without an answer there, the question is recorded with answer null.

Questions: ``--question TEXT`` (repeatable) and/or ``--questions FILE`` (JSON lines:
``question``, optional ``id`` and ``golden_answers``, a list of strings, as in Search-R1's and
FlashRAG's datasets); without either, ``samples/search_questions.jsonl``, questions whose answers
are in the synthetic sample corpus that local hosts serve (``python -m rlinfra_node.retrieval
sample --passages 2000``, seed 0). Questions without an id are numbered ``q1``, ``q2``, ... in
the order given (the file's first, then ``--question``'s).

Search:

- ``local`` (default): the retrieval service at ``--retrieval-url`` (its ``/retrieve`` route;
  default ``$RETRIEVAL_SERVICE_URL/retrieve``, else ``http://127.0.0.1:8000/retrieve``).
- ``google``: refused (exit 2, before anything is loaded) unless ``GOOGLE_API_KEY`` and
  ``GOOGLE_CSE_ID`` are set. Runs ``python -m rlinfra_node.google_search --host 127.0.0.1
  --port P`` (``--google-port``, 8000) as a child with this environment, so the key travels only
  there, never on a command line; waits at most ``--google-timeout`` seconds for ``GET /`` to
  answer 200 (a child that exits first fails the run with the last line of its log); uses its
  ``/retrieve``; stops it when the run ends, however it ends. The child's output goes to
  ``OUT/google_search.log``.

A retrieval call is tried 3 times (network errors, timeouts, 429 and 5xx; 1 s then 2 s apart);
a call that still fails, answers another 4xx, or answers something other than the API's shape
ends that question: it is recorded with its error and the run goes on with the next one.

Engines (one small interface, ``Engine``): ``transformers`` (AutoModelForCausalLM, local files
only, on the GPU when CUDA is available, else on the CPU in float32; greedy unless
``--temperature`` > 0) and ``vllm`` (``vllm.LLM`` and ``SamplingParams(stop=[...],
include_stop_str_in_output=True)``). ``auto`` picks vllm when CUDA is available and vllm
imports, else transformers. The vllm engine is not exercised by this project's tests (they run
on machines without a GPU or vllm); it is kept to the calls above. Questions run one at a time.

``--scripted-turns FILE`` is for tests and dry runs only: a JSON list of strings that stand for
the model's outputs, replayed in order (across questions) instead of generating; each is cut at
the first stop string as an engine would cut it. Only the model's words are replaced: the
tokenizer still renders the prompt (the weights are not loaded), and the search calls, the
parsing and the files are the real ones. A script that runs out fails the run (exit 2).

Output, in ``--out`` (default ``$CHECKPOINT_DIR/search_infer`` when CHECKPOINT_DIR is set, else
``./search_infer_out``); both JSON-lines files are started empty by each run and get one line per
question, written, flushed and fsynced when the question is done, so a run that dies keeps the
questions it finished:

- ``answers.jsonl``: ``id``, ``question``, ``answer`` (string or null), ``golden_answers`` (or
  null), ``exact_match`` (normalised exact match against any golden answer; null without
  them), ``searches`` (search turns), ``turns`` (generations), ``stop`` (answer, eos, length,
  context, max_turns or error), ``error`` (null, or why the question failed), ``seconds``.
- ``trajectories.jsonl``: ``id``, ``question``, ``prompt`` (as rendered), ``text`` (prompt,
  every turn and every inserted block: what the model saw last), ``turns`` (each: ``text`` the
  model generated, ``finish`` stop|eos|length|context, and where it searched, ``search``:
  ``query``, ``topk``, ``passages`` exactly as the service returned them, ``information`` the
  text inserted; or ``limit: true`` for the search that was refused), ``answer``, ``error``.
- ``summary.json`` (temp file renamed into place, at the end): counts, settings, ``complete``.

Progress: one line per question on stdout (id, searches, answer or error). No environment
value is printed: a URL or folder taken from the environment is shown by its variable's name.

Exit codes: 0 every question ran (answered or not), 1 a question failed for retrieval or the
Google server did not start, 2 bad input (missing model folder, unreadable questions, missing
Google credentials, unknown engine, a script that ran out).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import string
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

from rlinfra_node import textgen

URL_ENV = "RETRIEVAL_SERVICE_URL"
CHECKPOINT_ENV = "CHECKPOINT_DIR"
GOOGLE_ENV = ("GOOGLE_API_KEY", "GOOGLE_CSE_ID")
DEFAULT_URL = "http://127.0.0.1:8000/retrieve"
ROUTE = "/retrieve"
SAMPLE_QUESTIONS = Path(__file__).with_name("samples") / "search_questions.jsonl"
ENGINES = ("auto", "transformers", "vllm")
SEARCHES = ("local", "google")

SEARCH_OPEN, SEARCH_CLOSE = "<search>", "</search>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
STOPS = (SEARCH_CLOSE, ANSWER_CLOSE)
INSTRUCTION = (
    "Answer the question below. Think it through step by step. Whenever you need a fact you do "
    "not have, search for it by writing <search> your query </search>: the best passages come "
    "back between <information> and </information>. You may search more than once. When you "
    "know the answer, write only the answer inside <answer> and </answer>, for example "
    "<answer> Paris </answer>.\n\nQuestion: {question}\n"
)
LIMIT_NOTICE = (
    "\n\n<information>No more searches are allowed. Give your final answer now, inside "
    "<answer> and </answer>.</information>\n\n"
)
BLANK_NOTICE = (
    "\n\n<information>The search was empty: write the query between <search> and </search>."
    "</information>\n\n"
)
NO_RESULTS = "No passages were found.\n"

RETRIEVAL_TRIES = 3
RETRY_PAUSE_S = 1.0
# The retrieval service takes queries of at most 4096 characters; longer ones are cut.
MAX_QUERY_CHARS = 2048


class SearchInferError(Exception):
    """A one-line error; ``exit_code`` 2 for bad input, 1 for a service that failed."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class RetrievalError(Exception):
    """A search that failed after its tries; the question is recorded as failed."""


# ------------------------------------------------------------------------- the pure core


@dataclass(frozen=True)
class Question:
    id: str
    question: str
    golden_answers: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Generation:
    """One turn's text (cut after the first stop string, which it keeps) and why it ended:
    ``stop`` (a stop string), ``eos``, ``length`` (the turn's token limit) or ``context`` (the
    model's context is full)."""

    text: str
    finish: str


@dataclass
class Result:
    question: Question
    prompt: str
    text: str = ""
    turns: list[dict[str, Any]] = field(default_factory=list)
    answer: str | None = None
    searches: int = 0
    stop: str = ""
    error: str | None = None
    seconds: float = 0.0

    def answer_row(self) -> dict[str, Any]:
        golden = self.question.golden_answers
        return {
            "id": self.question.id,
            "question": self.question.question,
            "answer": self.answer,
            "golden_answers": list(golden) if golden is not None else None,
            "exact_match": exact_match(self.answer, golden),
            "searches": self.searches,
            "turns": len(self.turns),
            "stop": self.stop,
            "error": self.error,
            "seconds": round(self.seconds, 3),
        }

    def trajectory_row(self) -> dict[str, Any]:
        return {
            "id": self.question.id,
            "question": self.question.question,
            "prompt": self.prompt,
            "text": self.text,
            "turns": self.turns,
            "answer": self.answer,
            "error": self.error,
        }


def instruction(question: str) -> str:
    return INSTRUCTION.format(question=question.strip())


def render_prompt(tokenizer: Any, question: str) -> str:
    """The first prompt: the chat template's rendering of one user message, else plain text."""
    text = instruction(question)
    if textgen.has_chat_template(tokenizer):
        return textgen.render_chat(tokenizer, [{"role": "user", "content": text}])
    return text


def _last_between(text: str, opening: str, closing: str) -> str:
    body = text[: text.rfind(closing)]
    start = body.rfind(opening)
    return (body[start + len(opening) :] if start >= 0 else "").strip()


def parse_turn(generation: Generation) -> tuple[str, str]:
    """("answer", text), ("search", query) or ("none", "") for a turn that asked for neither."""
    text = generation.text.rstrip()
    if text.endswith(ANSWER_CLOSE):
        return "answer", _last_between(text, ANSWER_OPEN, ANSWER_CLOSE)
    if text.endswith(SEARCH_CLOSE):
        return "search", _last_between(text, SEARCH_OPEN, SEARCH_CLOSE)[:MAX_QUERY_CHARS]
    return "none", ""


def format_passages(hits: Sequence[dict[str, Any]]) -> str:
    """Search-R1's ``_passages2string``: ``Doc i(Title: <first line>) <the rest>`` lines."""
    if not hits:
        return NO_RESULTS
    lines = []
    for number, hit in enumerate(hits, start=1):
        title, _, text = str(hit["document"]["contents"]).partition("\n")
        lines.append(f"Doc {number}(Title: {title}) {text}\n")
    return "".join(lines)


def information(hits: Sequence[dict[str, Any]]) -> str:
    return f"\n\n<information>{format_passages(hits)}</information>\n\n"


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation (as Search-R1's exact match): lower case, no punctuation, no
    articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match(answer: str | None, golden: Sequence[str] | None) -> bool | None:
    if golden is None:
        return None
    if answer is None:
        return False
    return any(normalize_answer(answer) == normalize_answer(g) for g in golden)


class Engine(Protocol):
    """What the loop needs from a model: render the first prompt, generate one turn."""

    name: str

    def render(self, question: str) -> str: ...

    def generate(self, text: str, max_new_tokens: int, stops: Sequence[str]) -> Generation: ...


Search = Callable[[str], list[dict[str, Any]]]


def run_question(
    question: Question,
    engine: Engine,
    search: Search,
    *,
    max_turns: int,
    topk: int,
    max_new_tokens: int,
    clock: Callable[[], float] = time.monotonic,
) -> Result:
    """One question through the search loop (at most ``max_turns`` + 2 generations)."""
    started = clock()
    prompt = engine.render(question.question)
    result = Result(question=question, prompt=prompt, text=prompt)
    limited = False
    while True:
        generation = engine.generate(result.text, max_new_tokens, STOPS)
        result.text += generation.text
        turn: dict[str, Any] = {"text": generation.text, "finish": generation.finish}
        result.turns.append(turn)
        kind, payload = parse_turn(generation)
        if kind == "answer":
            result.answer, result.stop = payload, "answer"
            break
        if kind == "none":
            result.stop = "max_turns" if limited else generation.finish
            break
        if limited:
            result.stop = "max_turns"
            break
        if result.searches >= max_turns:
            turn["limit"] = True
            result.text += LIMIT_NOTICE
            limited = True
            continue
        result.searches += 1
        if not payload:
            turn["search"] = {
                "query": "",
                "topk": topk,
                "passages": [],
                "information": BLANK_NOTICE,
            }
            result.text += BLANK_NOTICE
            continue
        try:
            hits = search(payload)
        except RetrievalError as exc:
            turn["search"] = {"query": payload, "topk": topk, "passages": None, "information": None}
            result.error, result.stop = f"retrieval: {exc}", "error"
            break
        inserted = information(hits)
        turn["search"] = {"query": payload, "topk": topk, "passages": hits, "information": inserted}
        result.text += inserted
    result.seconds = clock() - started
    return result


def choose_engine(
    requested: str, cuda_available: Callable[[], bool], vllm_imports: Callable[[], bool]
) -> str:
    """``auto``: vllm when CUDA is available and vllm imports, else transformers."""
    if requested not in ENGINES:
        raise SearchInferError(f"--engine {requested!r}: not one of {', '.join(ENGINES)}")
    if requested == "vllm" and not vllm_imports():
        raise SearchInferError("--engine vllm: vllm does not import here; use transformers")
    if requested != "auto":
        return requested
    return "vllm" if cuda_available() and vllm_imports() else "transformers"


# ------------------------------------------------------------------------- inputs


def load_questions(path: Path | None, inline: Sequence[str]) -> list[Question]:
    """The questions of ``path`` (JSON lines) then ``inline``; ids ``q<N>`` where none is given."""
    rows: list[tuple[str | None, str, tuple[str, ...] | None]] = []
    if path is not None:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise SearchInferError(f"--questions {path}: cannot read: {reason}") from None
        for number, line in enumerate(lines, start=1):
            if line.strip():
                rows.append(_question_row(f"{path}:{number}", line))
        if not rows:
            raise SearchInferError(f"--questions {path}: no questions in the file")
    for text in inline:
        if not text.strip():
            raise SearchInferError("--question: a question is blank")
        rows.append((None, text, None))
    questions = [
        Question(ident if ident is not None else f"q{n}", text, golden)
        for n, (ident, text, golden) in enumerate(rows, start=1)
    ]
    seen: set[str] = set()
    for question in questions:
        if question.id in seen:
            raise SearchInferError(f"question id {question.id!r} is given twice")
        seen.add(question.id)
    return questions


def _question_row(where: str, line: str) -> tuple[str | None, str, tuple[str, ...] | None]:
    try:
        row = json.loads(line)
    except ValueError as exc:
        raise SearchInferError(f"{where}: not JSON: {exc}") from None
    if not isinstance(row, dict):
        raise SearchInferError(f"{where}: expected a JSON object with a 'question'")
    text = row.get("question")
    if not isinstance(text, str) or not text.strip():
        raise SearchInferError(f"{where}: 'question' must be a non-empty string")
    ident = row.get("id")
    if ident is not None and (isinstance(ident, bool) or not isinstance(ident, (str, int))):
        raise SearchInferError(f"{where}: 'id' must be a string or an integer")
    golden = row.get("golden_answers")
    if isinstance(golden, str):
        golden = [golden]
    if golden is not None and not (
        isinstance(golden, list) and all(isinstance(g, str) for g in golden)
    ):
        raise SearchInferError(f"{where}: 'golden_answers' must be a list of strings")
    return (
        None if ident is None else str(ident),
        text,
        None if golden is None else tuple(golden),
    )


def load_script(path: Path) -> list[str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise SearchInferError(f"--scripted-turns {path}: cannot read: {exc}") from None
    if not isinstance(data, list) or not all(isinstance(item, str) for item in data):
        raise SearchInferError(f"--scripted-turns {path}: expected a JSON list of strings")
    return data


@dataclass(frozen=True)
class Shown:
    """A value and how messages show it: itself, or the name of the variable it came from."""

    value: str
    label: str


def retrieval_url(given: str | None, environ: dict[str, str]) -> Shown:
    """Where /retrieve is: ``--retrieval-url``, else ``$RETRIEVAL_SERVICE_URL/retrieve``."""
    if given is not None:
        url, label, where = given.strip(), given.strip(), "--retrieval-url"
    elif environ.get(URL_ENV, "").strip():
        base = environ[URL_ENV].strip().rstrip("/")
        url = base if base.endswith(ROUTE) else base + ROUTE
        label, where = f"${URL_ENV}{ROUTE}", f"${URL_ENV}"
    else:
        return Shown(DEFAULT_URL, DEFAULT_URL)
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        shown = repr(url) if where == "--retrieval-url" else "its value"
        raise SearchInferError(f"{where}: {shown} is not an http(s) URL")
    return Shown(url, label)


def out_dir(given: Path | None, environ: dict[str, str]) -> Shown:
    if given is not None:
        return Shown(str(given), str(given))
    if environ.get(CHECKPOINT_ENV, "").strip():
        path = str(Path(environ[CHECKPOINT_ENV]) / "search_infer")
        return Shown(path, f"${CHECKPOINT_ENV}/search_infer")
    return Shown("search_infer_out", "search_infer_out")


# ------------------------------------------------------------------------- effects: retrieval


class Retriever:
    """POST ``{"queries": [q], "topk": K, "return_scores": true}`` to /retrieve, with retries."""

    def __init__(
        self, url: Shown, topk: int, timeout_s: float, pause_s: float = RETRY_PAUSE_S
    ) -> None:
        self.url = url
        self.topk = topk
        self.timeout_s = timeout_s
        self.pause_s = pause_s
        # No proxy: the retrieval service is on this node or in the cluster.
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def __call__(self, query: str) -> list[dict[str, Any]]:
        body = json.dumps({"queries": [query], "topk": self.topk, "return_scores": True})
        last = ""
        for attempt in range(1, RETRIEVAL_TRIES + 1):
            if attempt > 1:
                time.sleep(self.pause_s * (attempt - 1))
            request = urllib.request.Request(
                self.url.value,
                data=body.encode(),
                headers={"Content-Type": "application/json"},
                method="POST",
            )
            try:
                with self.opener.open(request, timeout=self.timeout_s) as response:
                    raw = response.read()
            except urllib.error.HTTPError as exc:
                detail = exc.read()[:200].decode("utf-8", "replace").strip()
                last = f"HTTP {exc.code}: {detail}" if detail else f"HTTP {exc.code}"
                if exc.code != 429 and exc.code < 500:
                    raise RetrievalError(f"POST {self.url.label} answered {last}") from None
                continue
            except (OSError, ValueError) as exc:  # URLError, timeouts, resets
                last = str(getattr(exc, "reason", None) or exc)
                continue
            return self._hits(raw)
        raise RetrievalError(f"POST {self.url.label} failed {RETRIEVAL_TRIES} times: {last}")

    def _hits(self, raw: bytes) -> list[dict[str, Any]]:
        try:
            data = json.loads(raw)
            hits = data["result"][0]
            if not isinstance(hits, list):
                raise TypeError("result[0] is not a list")
            for hit in hits:
                if not isinstance(hit["document"]["contents"], str):
                    raise TypeError("a document's contents is not a string")
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise RetrievalError(
                f"POST {self.url.label}: not the retrieval API's answer ({exc})"
            ) from None
        return hits


# ------------------------------------------------------------------------- effects: Google


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _redact(line: str, environ: dict[str, str]) -> str:
    for name in GOOGLE_ENV:
        value = environ.get(name, "")
        if value:
            line = line.replace(value, f"${name}")
    return line


def google_argv(port: int) -> list[str]:
    host = ["--host", "127.0.0.1", "--port", str(port)]
    return [sys.executable, "-m", "rlinfra_node.google_search", *host]


@contextlib.contextmanager
def google_server(port: int, log_path: Path, timeout_s: float) -> Iterator[Shown]:
    """The Google-backed retrieval server as a child, ready; stopped when the block ends."""
    with socket.socket() as probe:
        # As the server binds: a closed connection's TIME_WAIT does not make the port busy.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            raise SearchInferError(
                f"--google-port {port}: 127.0.0.1:{port} is in use; pick a free port", 1
            ) from None
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            google_argv(port),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )
    base = f"http://127.0.0.1:{port}"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            code = proc.poll()
            if code is not None:
                lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
                last = next((line for line in reversed(lines) if line.strip()), "no output")
                raise SearchInferError(
                    f"the Google search server exited ({code}) before it answered: "
                    f"{_redact(last.strip(), dict(os.environ))}",
                    1,
                )
            with (
                contextlib.suppress(OSError, ValueError),
                opener.open(base + "/", timeout=2) as got,
            ):
                if got.status == 200:
                    break
            if time.monotonic() > deadline:
                raise SearchInferError(
                    f"the Google search server did not answer GET {base}/ in {timeout_s:g} s "
                    f"(log: {log_path})",
                    1,
                )
            time.sleep(0.25)
        yield Shown(base + ROUTE, base + ROUTE)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# ------------------------------------------------------------------------- effects: engines


def _load_tokenizer(model: Path) -> Any:
    try:
        return textgen.load_tokenizer(model)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SearchInferError(f"--model {model}: no tokenizer could be loaded: {first}") from None


class TransformersEngine:
    """Hugging Face transformers (``textgen.TextGenerator``): AutoModelForCausalLM on the GPU if
    there is one, else the CPU."""

    name = "transformers"

    def __init__(self, model: Any, tokenizer: Any, temperature: float, seed: int) -> None:
        self.generator = textgen.TextGenerator(model, tokenizer)
        self.tokenizer = tokenizer
        self.temperature = temperature
        self.seed = seed
        # The chat template writes its own special tokens; plain prompts get the tokenizer's.
        self.special = not textgen.has_chat_template(tokenizer)

    @classmethod
    def load(cls, model_dir: Path, temperature: float, seed: int) -> TransformersEngine:
        import torch

        tokenizer = _load_tokenizer(model_dir)
        gpu = torch.cuda.is_available()
        try:
            model = textgen.load_model(
                model_dir, "auto" if gpu else "float32", "cuda" if gpu else "cpu"
            )
        except (OSError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise SearchInferError(f"--model {model_dir}: not a model folder: {first}") from None
        torch.manual_seed(seed)
        return cls(model, tokenizer, temperature, seed)

    def render(self, question: str) -> str:
        return render_prompt(self.tokenizer, question)

    def generate(self, text: str, max_new_tokens: int, stops: Sequence[str]) -> Generation:
        ids = self.generator.encode(text, special=self.special)
        budget = max_new_tokens
        if self.generator.context is not None:
            budget = min(budget, self.generator.context - len(ids))
        if budget < 1:
            return Generation("", "context")
        out = self.generator.generate(ids, budget, stops=stops, temperature=self.temperature)
        # Search-R1's rule: the stop string stays in the text (the loop reads the tag).
        cut = out.cut(keep=True)
        if out.stop is not None:
            return Generation(cut, "stop")
        if out.ended:
            return Generation(cut, "eos")
        return Generation(cut, "length" if len(out.ids) >= budget else "eos")


class VllmEngine:
    """vLLM's offline ``LLM``. Not tested by this project (no GPU or vllm where tests run): kept
    to ``LLM(model, seed)``, ``SamplingParams(temperature, max_tokens, stop,
    include_stop_str_in_output=True, seed)`` and ``LLM.generate``."""

    name = "vllm"

    def __init__(self, llm: Any, temperature: float, seed: int) -> None:
        self.llm = llm
        self.tokenizer = llm.get_tokenizer()
        self.temperature = temperature
        self.seed = seed

    @classmethod
    def load(cls, model_dir: Path, temperature: float, seed: int) -> VllmEngine:
        from vllm import LLM

        return cls(LLM(model=str(model_dir), seed=seed), temperature, seed)

    def render(self, question: str) -> str:
        return render_prompt(self.tokenizer, question)

    def generate(self, text: str, max_new_tokens: int, stops: Sequence[str]) -> Generation:
        from vllm import SamplingParams

        params = SamplingParams(
            temperature=self.temperature,
            max_tokens=max_new_tokens,
            stop=list(stops),
            include_stop_str_in_output=True,
            seed=self.seed,
        )
        out = self.llm.generate([text], params, use_tqdm=False)[0].outputs[0]
        if out.finish_reason == "length":
            return Generation(out.text, "length")
        return Generation(out.text, "stop" if isinstance(out.stop_reason, str) else "eos")


class ScriptedEngine:
    """Test and dry-run only: replays ``outputs`` as the model's turns; the tokenizer is real."""

    name = "scripted"

    def __init__(self, tokenizer: Any, outputs: Sequence[str], source: Path) -> None:
        self.tokenizer = tokenizer
        self.outputs = list(outputs)
        self.source = source
        self.used = 0

    def render(self, question: str) -> str:
        return render_prompt(self.tokenizer, question)

    def generate(self, text: str, max_new_tokens: int, stops: Sequence[str]) -> Generation:
        if self.used >= len(self.outputs):
            raise SearchInferError(
                f"--scripted-turns {self.source}: all {len(self.outputs)} outputs are used and "
                "the run asks for another"
            )
        cut, stopped = textgen.cut_at_stop(self.outputs[self.used], stops, keep=True)
        self.used += 1
        return Generation(cut, "stop" if stopped else "eos")


ENGINE_LOADERS: dict[str, Callable[[Path, float, int], Engine]] = {
    "transformers": TransformersEngine.load,
    "vllm": VllmEngine.load,
}


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def _vllm_imports() -> bool:
    try:
        import vllm  # noqa: F401
    except Exception:  # a broken install fails in many ways; it is "not there" for auto
        return False
    return True


# ------------------------------------------------------------------------- effects: files


class Outputs:
    """answers.jsonl and trajectories.jsonl, one line per question (flushed and fsynced)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.answers: IO[str] = open(folder / "answers.jsonl", "w", encoding="utf-8")  # noqa: SIM115
        self.trajectories: IO[str] = open(  # noqa: SIM115
            folder / "trajectories.jsonl", "w", encoding="utf-8"
        )

    def write(self, result: Result) -> None:
        for handle, row in (
            (self.answers, result.answer_row()),
            (self.trajectories, result.trajectory_row()),
        ):
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def close(self, summary: dict[str, Any]) -> None:
        self.answers.close()
        self.trajectories.close()
        tmp = self.folder / ".summary.json.tmp"
        tmp.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, self.folder / "summary.json")


# ------------------------------------------------------------------------- the command


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m rlinfra_node.search_infer",
        description="Search-R1 inference: answer questions with a model that calls a search tool.",
    )
    parser.add_argument("--model", type=Path, required=True, help="the HF model folder to load")
    parser.add_argument("--search", choices=SEARCHES, default="local")
    parser.add_argument("--max-turns", type=int, default=2, help="searches per question (2)")
    parser.add_argument(
        "--retrieval-url",
        help=f"the service's /retrieve URL (default ${URL_ENV}{ROUTE}, else {DEFAULT_URL})",
    )
    parser.add_argument("--topk", type=int, default=3, help="passages per search (3)")
    parser.add_argument("--question", action="append", default=[], help="a question (repeat)")
    parser.add_argument(
        "--questions",
        type=Path,
        help=f"JSON lines with 'question' (default {SAMPLE_QUESTIONS.name})",
    )
    parser.add_argument(
        "--out", type=Path, help=f"output folder (default ${CHECKPOINT_ENV}/search_infer)"
    )
    parser.add_argument("--max-new-tokens", type=int, default=1024, help="tokens per turn")
    parser.add_argument("--engine", choices=ENGINES, default="auto")
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--retrieval-timeout", type=float, default=30.0, help="seconds per call")
    parser.add_argument("--google-port", type=int, default=8000)
    parser.add_argument("--google-timeout", type=float, default=60.0, help="seconds to start")
    parser.add_argument(
        "--scripted-turns",
        type=Path,
        help="tests and dry runs only: a JSON list of model outputs replayed instead of generating",
    )
    args = parser.parse_args(argv)
    checks = [
        (args.max_turns >= 0, "--max-turns must be 0 or more"),
        (1 <= args.topk <= 100, "--topk must be between 1 and 100"),
        (args.max_new_tokens >= 1, "--max-new-tokens must be at least 1"),
        (args.temperature >= 0, "--temperature must be 0 or more"),
        (args.retrieval_timeout > 0, "--retrieval-timeout must be more than 0"),
        (args.google_timeout > 0, "--google-timeout must be more than 0"),
        (1 <= args.google_port <= 65535, "--google-port must be between 1 and 65535"),
    ]
    for ok, message in checks:
        if not ok:
            raise SearchInferError(message)
    return args


def _short(answer: str | None) -> str:
    if answer is None:
        return "none"
    return repr(answer if len(answer) <= 80 else answer[:77] + "...")


def run(args: argparse.Namespace, environ: dict[str, str]) -> int:
    default = args.questions is None and not args.question
    questions = load_questions(SAMPLE_QUESTIONS if default else args.questions, args.question)
    if not args.model.is_dir():
        raise SearchInferError(f"--model {args.model}: no such folder")
    if args.search == "google":
        unset = [name for name in GOOGLE_ENV if not environ.get(name, "").strip()]
        if unset:
            raise SearchInferError(
                f"--search google needs {' and '.join(GOOGLE_ENV)} in the environment; "
                f"not set: {', '.join(unset)}"
            )
        if args.retrieval_url is not None:
            print("search_infer: --retrieval-url is not used with --search google", file=sys.stderr)
        url = None
    else:
        url = retrieval_url(args.retrieval_url, environ)
    script = load_script(args.scripted_turns) if args.scripted_turns else None
    folder = out_dir(args.out, environ)
    try:
        Path(folder.value).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SearchInferError(f"--out {folder.label}: cannot create: {exc.strerror}") from None

    with contextlib.ExitStack() as stack:
        if url is None:
            log = Path(folder.value) / "google_search.log"
            print(
                f"search_infer: starting the Google search server on port {args.google_port}",
                flush=True,
            )
            url = stack.enter_context(google_server(args.google_port, log, args.google_timeout))
        engine: Engine
        if script is not None:
            engine = ScriptedEngine(_load_tokenizer(args.model), script, args.scripted_turns)
        else:
            name = choose_engine(args.engine, _cuda_available, _vllm_imports)
            print(f"search_infer: loading {args.model} with {name}", flush=True)
            engine = ENGINE_LOADERS[name](args.model, args.temperature, args.seed)
        retriever = Retriever(url, args.topk, args.retrieval_timeout)
        print(
            f"search_infer: {len(questions)} question(s), engine {engine.name}, search "
            f"{args.search} ({url.label}), topk {args.topk}, max turns {args.max_turns}",
            flush=True,
        )
        outputs = Outputs(Path(folder.value))
        results: list[Result] = []
        started = time.monotonic()
        try:
            for number, question in enumerate(questions, start=1):
                result = run_question(
                    question,
                    engine,
                    retriever,
                    max_turns=args.max_turns,
                    topk=args.topk,
                    max_new_tokens=args.max_new_tokens,
                )
                outputs.write(result)
                results.append(result)
                status = (
                    f"FAILED {result.error}" if result.error else f"answer {_short(result.answer)}"
                )
                print(
                    f"search_infer: [{number}/{len(questions)}] {question.id}: "
                    f"searches {result.searches}, turns {len(result.turns)}, {status}",
                    flush=True,
                )
        finally:
            failed = sum(1 for r in results if r.error)
            outputs.close(
                {
                    "complete": len(results) == len(questions),
                    "questions": len(questions),
                    "done": len(results),
                    "answered": sum(1 for r in results if r.answer is not None),
                    "exact_match": sum(1 for r in results if r.answer_row()["exact_match"]),
                    "failed": failed,
                    "model": str(args.model),
                    "engine": engine.name,
                    "search": args.search,
                    "retrieval_url": url.label,
                    "topk": args.topk,
                    "max_turns": args.max_turns,
                    "max_new_tokens": args.max_new_tokens,
                    "seconds": round(time.monotonic() - started, 3),
                }
            )
    answered = sum(1 for r in results if r.answer is not None)
    print(
        f"search_infer: {len(results)} question(s), {answered} answered, {failed} failed; "
        f"wrote answers.jsonl and trajectories.jsonl in {folder.label}"
    )
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    def _terminate(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)  # so that the Google server child is stopped

    signal.signal(signal.SIGTERM, _terminate)
    try:
        return run(parse_args(argv), dict(os.environ))
    except SearchInferError as error:
        print(f"Error: {error}", file=sys.stderr)
        return error.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
