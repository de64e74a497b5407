"""rlinfra_node.search_infer: the Search-R1 loop, run as the job runs it (a subprocess).

Retrieval is a real HTTP server on a thread of this process, with the API's shapes, a few
passages and a record of every request. The model is a tiny random Qwen2 made by
``python -m rlinfra_node.tiny_model``. A random model never writes ``<search>``, so the tests of
the loop replay the model's words with ``--scripted-turns`` (only those: the tokenizer renders
the prompt, and the HTTP calls, the parsing and the files are the program's own); one test lets
the tiny model generate for real.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from rlinfra_node import search_infer
from rlinfra_node.retrieval import sample

NODE_PATH = str(Path(search_infer.__file__).resolve().parents[1])
PASSAGES = [
    {"id": "0", "contents": '"Freedonia"\nFreedonia is a small country. Its capital is Fredville.'},
    {"id": "1", "contents": '"Fredville"\nFredville lies on the river Fred, in Freedonia.'},
    {"id": "2", "contents": '"River Fred"\nThe river Fred runs through Freedonia to the sea.'},
    {"id": "3", "contents": '"Sylvania"\nSylvania is the neighbour of Freedonia.\nIt has a king.'},
]
# Values that must never be printed.
SECRETS = {"GOOGLE_API_KEY": "key-sekrit-5e1f", "GOOGLE_CSE_ID": "cse-sekrit-77aa"}


@dataclass
class Retrieval:
    """What the test server saw: each POST's body, status and answer."""

    url: str
    calls: list[dict[str, Any]] = field(default_factory=list)

    def queries(self) -> list[str]:
        return [q for call in self.calls for q in call["body"]["queries"]]


def _search(query: str, topk: int) -> list[dict[str, Any]]:
    def words(text: str) -> set[str]:
        return {w.strip('.,"') for w in text.lower().split()}

    scored = [(len(words(query) & words(p["contents"])), p) for p in PASSAGES]
    scored.sort(key=lambda pair: -pair[0])
    return [{"document": dict(p), "score": float(s)} for s, p in scored[:topk]]


@pytest.fixture(scope="module")
def retrieval() -> Iterator[Retrieval]:
    """GET / answers 200; POST /retrieve answers 500 for a query with FAIL in it."""
    state = Retrieval(url="")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._send(200, {"status": "ok"})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path != "/retrieve":
                self._send(404, {"error": "no route", "status": 404})
                return
            if any("FAIL" in q for q in body["queries"]):
                state.calls.append({"body": body, "status": 500, "result": None})
                self._send(500, {"error": "the index is broken", "status": 500})
                return
            result = [_search(q, body["topk"]) for q in body["queries"]]
            state.calls.append({"body": body, "status": 200, "result": result})
            self._send(200, {"result": result})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Qwen2 with a tokenizer trained on the prompt's words and the passages."""
    folder = tmp_path_factory.mktemp("models")
    corpus = folder / "corpus.txt"
    lines = [search_infer.INSTRUCTION, *(p["contents"] for p in PASSAGES)]
    corpus.write_text("\n".join(lines) + "\n")
    model = folder / "hf_model"
    argv = [sys.executable, "-m", "rlinfra_node.tiny_model", "--out", str(model)]
    argv += ["--corpus", str(corpus), "--hidden", "32", "--layers", "1", "--vocab", "300"]
    subprocess.run(argv, env=node_env(), check=True, capture_output=True, timeout=120)
    return model


def node_env(**extra: str) -> dict[str, str]:
    """This environment without the variables the program reads, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in ("CHECKPOINT_DIR", "PYTHONPATH")}
    for name in ("RETRIEVAL_SERVICE_URL", "GOOGLE_API_KEY", "GOOGLE_CSE_ID"):
        env.pop(name, None)
    return {**env, "PYTHONPATH": NODE_PATH, **extra}


def infer(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "rlinfra_node.search_infer", *args]
    return subprocess.run(
        argv, cwd=cwd, env=env or node_env(), capture_output=True, text=True, timeout=timeout
    )


def rows(path: Path) -> dict[str, dict[str, Any]]:
    return {row["id"]: row for row in map(json.loads, path.read_text().splitlines())}


# ----------------------------------------------------------------- the loop, scripted words

QUESTIONS = [
    {"id": "cap", "question": "What is the capital of Freedonia?", "golden_answers": ["Fredville"]},
    {"id": "loop", "question": "Which river never ends?"},
    {"id": "fail", "question": "What does the broken index hold?"},
    {"id": 7, "question": "What is six times seven?", "golden_answers": ["42"]},
]
SCRIPT = [
    # cap: two searches, then the answer. Text after a stop string is cut, as an engine cuts it.
    "I should look this up. <search> capital Freedonia </search> and words after the stop",
    "Where is it? <search>river Fred</search>",
    "The passages agree. <answer> Fredville </answer>",
    # loop: searches and searches; --max-turns 2 lets two through, then asks for the answer.
    "<search> loop one </search>",
    "<search> loop two </search>",
    "<search> loop three </search>",
    "<search> loop four </search>",
    # fail: the service answers 500.
    "<search> FAIL please </search>",
    # 7: answers at once.
    "<answer>42</answer>",
    # q5 (from --question): ends without a tag.
    "I do not know.",
]


@dataclass(frozen=True)
class Run:
    proc: subprocess.CompletedProcess[str]
    out: Path
    checkpoint_dir: Path
    calls: list[dict[str, Any]]
    answers: dict[str, dict[str, Any]]
    trajectories: dict[str, dict[str, Any]]


@pytest.fixture(scope="module")
def scripted(
    retrieval: Retrieval, model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Run:
    """One run over five questions; the service's URL and the output folder come from the
    environment (RETRIEVAL_SERVICE_URL, CHECKPOINT_DIR), as on a node."""
    work = tmp_path_factory.mktemp("scripted")
    questions = work / "questions.jsonl"
    questions.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    script = work / "script.json"
    script.write_text(json.dumps(SCRIPT))
    checkpoints = work / "checkpoints"
    before = len(retrieval.calls)
    proc = infer(
        "--model", str(model_dir), "--search", "local", "--max-turns", "2", "--topk", "2",
        "--questions", str(questions), "--question", "Who rules Sylvania?",
        "--scripted-turns", str(script),
        cwd=work,
        env=node_env(RETRIEVAL_SERVICE_URL=retrieval.url + "/", CHECKPOINT_DIR=str(checkpoints)),
    )  # fmt: skip
    out = checkpoints / "search_infer"
    return Run(
        proc,
        out,
        checkpoints,
        retrieval.calls[before:],
        rows(out / "answers.jsonl"),
        rows(out / "trajectories.jsonl"),
    )


def test_scripted_searches_are_real_calls_with_the_scripted_queries_and_topk(
    scripted: Run,
) -> None:
    bodies = [call["body"] for call in scripted.calls]
    # One query per call, topk as given, scores asked for as Verl's tool asks; the failing
    # query is tried 3 times; the refused third "loop" search is never sent.
    assert [b["queries"] for b in bodies] == [
        ["capital Freedonia"],
        ["river Fred"],
        ["loop one"],
        ["loop two"],
        ["FAIL please"],
        ["FAIL please"],
        ["FAIL please"],
    ]
    assert {(b["topk"], b["return_scores"]) for b in bodies} == {(2, True)}


def test_the_trajectory_holds_the_exact_passages_returned(scripted: Run) -> None:
    trajectory = scripted.trajectories["cap"]
    turns = trajectory["turns"]
    assert [t["finish"] for t in turns] == ["stop", "stop", "stop"]
    assert turns[0]["text"] == "I should look this up. <search> capital Freedonia </search>"
    for turn, call in zip(turns[:2], scripted.calls[:2], strict=True):
        assert turn["search"]["query"] == call["body"]["queries"][0]
        assert turn["search"]["topk"] == 2
        assert turn["search"]["passages"] == call["result"][0]
    first = scripted.calls[0]["result"][0]
    assert [hit["document"]["id"] for hit in first] == ["0", "1"]
    # Search-R1's layout: "Doc i(Title: <first line>) <the rest>", inside <information>.
    assert turns[0]["search"]["information"] == (
        '\n\n<information>Doc 1(Title: "Freedonia") Freedonia is a small country. Its capital '
        'is Fredville.\nDoc 2(Title: "Fredville") Fredville lies on the river Fred, in '
        "Freedonia.\n</information>\n\n"
    )
    # The full text is the prompt, then every turn and what was inserted after it.
    pieces = [trajectory["prompt"]]
    for turn in turns:
        pieces += [turn["text"], turn.get("search", {}).get("information") or ""]
    assert trajectory["text"] == "".join(pieces)


def test_the_prompt_is_rendered_with_the_chat_template(scripted: Run) -> None:
    prompt = scripted.trajectories["cap"]["prompt"]
    assert prompt.startswith("<|im_start|>user\n")
    assert prompt.endswith("<|im_end|>\n<|im_start|>assistant\n")
    for needed in ("<search>", "</search>", "<information>", "<answer>", "</answer>"):
        assert needed in prompt
    assert "Question: What is the capital of Freedonia?" in prompt


def test_the_answer_is_parsed_and_scored(scripted: Run) -> None:
    cap = scripted.answers["cap"]
    assert cap["answer"] == "Fredville"
    assert cap["exact_match"] is True
    assert (cap["searches"], cap["turns"], cap["stop"], cap["error"]) == (2, 3, "answer", None)
    assert cap["golden_answers"] == ["Fredville"]
    assert isinstance(cap["seconds"], float)
    seven = scripted.answers["7"]
    assert (seven["answer"], seven["exact_match"], seven["searches"]) == ("42", True, 0)
    inline = scripted.answers["q5"]
    assert inline["question"] == "Who rules Sylvania?"
    assert (inline["answer"], inline["exact_match"], inline["stop"]) == (None, None, "eos")


def test_the_turn_limit_stops_a_model_that_keeps_searching(scripted: Run) -> None:
    loop = scripted.answers["loop"]
    assert (loop["answer"], loop["searches"], loop["turns"], loop["stop"]) == (
        None,
        2,
        4,
        "max_turns",
    )
    turns = scripted.trajectories["loop"]["turns"]
    assert [t.get("search", {}).get("query") for t in turns] == ["loop one", "loop two", None, None]
    assert turns[2]["limit"] is True
    assert search_infer.LIMIT_NOTICE in scripted.trajectories["loop"]["text"]


def test_a_retrieval_500_fails_its_question_and_the_run_goes_on_then_exits_1(
    scripted: Run,
) -> None:
    assert scripted.proc.returncode == 1, scripted.proc.stderr
    fail = scripted.answers["fail"]
    assert fail["stop"] == "error"
    assert fail["answer"] is None
    assert "HTTP 500" in fail["error"] and "failed 3 times" in fail["error"]
    assert scripted.trajectories["fail"]["turns"][0]["search"]["passages"] is None
    # The questions after it ran.
    assert list(scripted.answers) == ["cap", "loop", "fail", "7", "q5"]
    summary = json.loads((scripted.out / "summary.json").read_text())
    assert (summary["complete"], summary["failed"], summary["answered"]) == (True, 1, 2)


def test_progress_lines_and_no_environment_value_printed(
    scripted: Run, retrieval: Retrieval
) -> None:
    out = scripted.proc.stdout
    progress = [line for line in out.splitlines() if "] " in line]
    assert len(progress) == 5
    assert "[1/5] cap: searches 2, turns 3, answer 'Fredville'" in progress[0]
    assert "[3/5] fail: searches 1, turns 1, FAILED retrieval:" in progress[2]
    assert "$RETRIEVAL_SERVICE_URL/retrieve" in out
    assert "$CHECKPOINT_DIR/search_infer" in out
    for value in (retrieval.url, str(scripted.checkpoint_dir)):
        assert value not in out + scripted.proc.stderr


# ----------------------------------------------------------------- the tiny model, generating


def test_the_tiny_model_generates_with_transformers_on_cpu(
    retrieval: Retrieval, model_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    proc = infer(
        "--model", str(model_dir), "--engine", "transformers", "--max-new-tokens", "12",
        "--max-turns", "1", "--retrieval-url", retrieval.url + "/retrieve",
        "--question", "What is the capital of Freedonia?", "--out", str(out),
        cwd=tmp_path, env=node_env(CUDA_VISIBLE_DEVICES=""),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert f"loading {model_dir} with transformers" in proc.stdout
    answer = rows(out / "answers.jsonl")["q1"]
    trajectory = rows(out / "trajectories.jsonl")["q1"]
    turns = trajectory["turns"]
    assert answer["turns"] == len(turns) >= 1
    assert turns[0]["finish"] in ("length", "eos", "stop")
    # What the model wrote is in the file, after the prompt (the answer may well be null).
    assert turns[0]["text"] or turns[0]["finish"] == "eos"
    assert trajectory["text"].startswith(trajectory["prompt"] + turns[0]["text"])
    assert answer["answer"] is None or isinstance(answer["answer"], str)


# ----------------------------------------------------------------- Google, and bad input


def test_google_without_credentials_exits_2_before_loading_anything(
    model_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    for env, unset in (
        (node_env(), "GOOGLE_API_KEY, GOOGLE_CSE_ID"),
        (node_env(GOOGLE_API_KEY=SECRETS["GOOGLE_API_KEY"]), "not set: GOOGLE_CSE_ID"),
        (node_env(GOOGLE_CSE_ID=SECRETS["GOOGLE_CSE_ID"], GOOGLE_API_KEY=""), "GOOGLE_API_KEY"),
    ):
        proc = infer(
            "--model", str(model_dir), "--search", "google", "--out", str(out),
            cwd=tmp_path, env=env, timeout=30,
        )  # fmt: skip
        assert proc.returncode == 2
        assert proc.stdout == ""
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("Error: --search google")
        assert unset in proc.stderr
        assert not any(value in proc.stderr for value in SECRETS.values())
        assert not out.exists()


def test_google_on_a_busy_port_exits_1_without_starting_a_server(
    model_dir: Path, tmp_path: Path
) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = infer(
            "--model", str(model_dir), "--search", "google", "--google-port", str(port),
            "--out", str(tmp_path / "out"),
            cwd=tmp_path, env=node_env(**SECRETS), timeout=30,
        )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        f"Error: --google-port {port}: 127.0.0.1:{port} is in use; pick a free port"
    )
    assert not any(value in proc.stdout + proc.stderr for value in SECRETS.values())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


GOOGLE_ITEMS = [
    {
        "title": "Fredville - Wikipedia",
        "snippet": "Fredville is the capital.",
        "link": "https://a/",
    },
    {"title": "Freedonia  facts", "snippet": " A small country. ", "link": "https://b/"},
    {"title": "Third", "snippet": "Not asked for.", "link": "https://c/"},
]


@pytest.fixture
def fake_google() -> Iterator[tuple[str, list[dict[str, list[str]]]]]:
    """The Custom Search JSON API's shape on loopback; records each request's query string."""
    seen: list[dict[str, list[str]]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            seen.append(urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query))
            data = json.dumps({"items": GOOGLE_ITEMS}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/customsearch/v1", seen
    server.shutdown()
    server.server_close()


def test_google_search_runs_its_server_as_a_child_and_stops_it(
    fake_google: tuple[str, list[dict[str, list[str]]]], model_dir: Path, tmp_path: Path
) -> None:
    """The real rlinfra_node.google_search, pointed at a fake Google by GOOGLE_CSE_ENDPOINT
    (scripted words, as above); the key reaches Google through the child's environment only."""
    endpoint, seen = fake_google
    script = _write(
        tmp_path / "s.json",
        json.dumps(["<search> Freedonia </search>", "<answer>Fredville</answer>"]),
    )
    port = free_port()
    out = tmp_path / "out"
    proc = infer(
        "--model", str(model_dir), "--search", "google", "--google-port", str(port),
        "--topk", "2", "--question", "What is the capital of Freedonia?",
        "--scripted-turns", str(script), "--out", str(out),
        cwd=tmp_path, env=node_env(**SECRETS, GOOGLE_CSE_ENDPOINT=endpoint), timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert [(q["q"], q["num"], q["key"], q["cx"]) for q in seen] == [
        (["Freedonia"], ["2"], [SECRETS["GOOGLE_API_KEY"]], [SECRETS["GOOGLE_CSE_ID"]])
    ]
    trajectory = rows(out / "trajectories.jsonl")["q1"]
    assert trajectory["turns"][0]["search"]["passages"] == [
        {
            "document": {
                "id": "https://a/",
                "contents": "Fredville - Wikipedia\nFredville is the capital.",
            },
            "score": 1.0,
        },
        {
            "document": {"id": "https://b/", "contents": "Freedonia facts\nA small country."},
            "score": 0.5,
        },
    ]
    assert rows(out / "answers.jsonl")["q1"]["answer"] == "Fredville"
    printed = proc.stdout + proc.stderr + (out / "google_search.log").read_text()
    assert not any(value in printed for value in SECRETS.values())
    # The child is gone: nothing listens on its port.
    with socket.socket() as sock, pytest.raises(ConnectionRefusedError):
        sock.connect(("127.0.0.1", port))


def test_a_google_server_that_exits_fails_the_run_with_its_last_line(
    model_dir: Path, tmp_path: Path
) -> None:
    proc = infer(
        "--model", str(model_dir), "--search", "google", "--google-port", str(free_port()),
        "--out", str(tmp_path / "out"),
        cwd=tmp_path, env=node_env(**SECRETS, GOOGLE_CSE_ENDPOINT="ftp://nowhere"), timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr == (
        "Error: the Google search server exited (2) before it answered: "
        "Error: GOOGLE_CSE_ENDPOINT: 'ftp://nowhere' is not an http(s) URL\n"
    )
    assert "loading" not in proc.stdout


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("no-model", "--model {tmp}/nowhere: no such folder"),
        ("no-questions", "--questions {tmp}/missing.jsonl: cannot read: No such file or directory"),
        ("questions-folder", "--questions {tmp}: cannot read: Is a directory"),
        ("not-json", "{tmp}/q.jsonl:2: not JSON"),
        ("no-question", "{tmp}/q.jsonl:1: 'question' must be a non-empty string"),
        ("same-id", "question id 'a' is given twice"),
        ("bad-script", "--scripted-turns {tmp}/s.json: expected a JSON list of strings"),
        ("bad-url", "--retrieval-url: 'localhost:8000' is not an http(s) URL"),
        ("bad-turns", "--max-turns must be 0 or more"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    case: str, expected: str, model_dir: Path, tmp_path: Path
) -> None:
    model = str(model_dir)
    good = _write(tmp_path / "good.jsonl", '{"question": "Why?"}\n')
    argv = {
        "no-model": ["--model", str(tmp_path / "nowhere"), "--questions", str(good)],
        "no-questions": ["--model", model, "--questions", str(tmp_path / "missing.jsonl")],
        "questions-folder": ["--model", model, "--questions", str(tmp_path)],
        "not-json": ["--model", model, "--questions", str(tmp_path / "q.jsonl")],
        "no-question": ["--model", model, "--questions", str(tmp_path / "q.jsonl")],
        "same-id": ["--model", model, "--questions", str(tmp_path / "q.jsonl")],
        "bad-script": ["--model", model, "--scripted-turns", str(tmp_path / "s.json")],
        "bad-url": ["--model", model, "--retrieval-url", "localhost:8000"],
        "bad-turns": ["--model", model, "--max-turns", "-1"],
    }[case]
    questions = {
        "not-json": '{"question": "fine"}\n{"question": \n',
        "no-question": '{"id": "x", "question": "  "}\n',
        "same-id": '{"id": "a", "question": "one"}\n{"id": "a", "question": "two"}\n',
    }
    if case in questions:
        _write(tmp_path / "q.jsonl", questions[case])
    _write(tmp_path / "s.json", '{"not": "a list"}')
    proc = infer(*argv, "--out", str(tmp_path / "out"), cwd=tmp_path, timeout=30)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("Error: " + expected.format(tmp=tmp_path))
    assert not (tmp_path / "out").exists()


def test_the_sample_questions_are_answered_by_the_sample_corpus() -> None:
    """The shipped questions name passages of the local hosts' corpus (2000 passages, seed 0)."""
    questions = search_infer.load_questions(search_infer.SAMPLE_QUESTIONS, [])
    by_title = {}
    for row in sample.passages(2000, seed=0):
        title, _, text = row["contents"].partition("\n")
        by_title[title.strip('"')] = text.rstrip(".").split()
    assert len(questions) >= 5
    for question in questions:
        title = question.question.split('"')[1]
        words = by_title[title]
        wanted = words[0] if "begin with" in question.question else words[-1]
        assert question.golden_answers == (wanted,)
