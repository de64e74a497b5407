"""The retrieval HTTP API: request checks, search, and the probe routes.

Request (what Verl's search tool sends, ``verl/tools/utils/search_r1_like_utils.py``)::

    POST /retrieve  {"queries": ["q1", ...], "topk": 3, "return_scores": true}

Response: one list per query, best passage first. Verl reads ``result[i][j]["document"]
["contents"]`` and splits it into the title (first line) and the text::

    {"result": [[{"document": {"id": "17", "contents": "Title\\ntext"}, "score": 0.83}, ...], ...]}

``score`` is there when ``return_scores`` is true (Verl always asks for it); ``topk`` and
``return_scores`` may be left out (defaults: the server's top-k, false). Every malformed request
gets a 4xx answer ``{"error": "...", "status": N}`` and leaves the server as it was: 400 for a
body that is not a JSON object, 413 for too many queries or too large a body, 422 for a field of
the wrong type or out of range.

``create_app`` is the FastAPI app that Serve's proxy path (``serve_app``, router
``serve-proxy``) runs in each replica. The default path serves the same routes with the same
answers from ``server`` (a lighter HTTP layer, with batched searches).
"""

import json
import threading
import time
from collections.abc import Callable
from typing import Any

from rlinfra_node.retrieval.batching import Query
from rlinfra_node.retrieval.settings import Settings

SERVICE = "rlinfra-retrieval"
REQUEST_KEYS = ("queries", "topk", "return_scores")


class BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Retriever:
    """A corpus, its index and the encoder, loaded once per process; searches are serialised.

    One search at a time per process keeps the encoder's threads from fighting each other.
    ``search_batch`` answers several requests with one encoder call and one index search (see
    ``batching``, which feeds it); ``search`` is a batch of one.
    """

    def __init__(self, settings: Settings, build: bool = True) -> None:
        from rlinfra_node.retrieval import index as index_mod

        started = time.monotonic()
        self.settings = settings
        self.encoder = index_mod.Encoder(settings)
        if build:
            index_mod.ensure(settings, self.encoder)
        loaded = index_mod.load(settings, self.encoder)
        self.corpus = loaded.corpus
        self.index = loaded.index
        self.meta = loaded.meta
        self._exact = index_mod.ExactSearch(loaded.index)
        if settings.threads:
            # FAISS runs OpenMP on every core by default: next to other replicas on the same
            # cores its threads spin and wait on each other. Give it the encoder's share.
            import faiss

            faiss.omp_set_num_threads(settings.threads)
        self._lock = threading.Lock()
        self.load_s = round(time.monotonic() - started, 3)

    @property
    def passages(self) -> int:
        return len(self.corpus)

    def search(
        self, queries: list[str], topk: int, return_scores: bool
    ) -> list[list[dict[str, Any]]]:
        return self.search_batch([Query(queries, topk, return_scores)])[0]

    def search_batch(self, requests: list[Query]) -> list[list[list[dict[str, Any]]]]:
        """Each request's result, from one encoder call and one index search for all of them."""
        texts = [text for request in requests for text in request.queries]
        k = min(max(request.topk for request in requests), self.passages)
        with self._lock:
            vectors = self.encoder.encode_queries(
                texts, self.settings.query_prefix, self.settings.batch_size
            )
            scores, rows = self._exact.search(vectors, k)
        all_scores: list[list[float]] = scores.tolist()
        all_rows: list[list[int]] = rows.tolist()
        out: list[list[list[dict[str, Any]]]] = []
        start = 0
        for request in requests:
            end = start + len(request.queries)
            out.append(
                [
                    self._hits(query_scores, query_rows, request.topk, request.return_scores)
                    for query_scores, query_rows in zip(
                        all_scores[start:end], all_rows[start:end], strict=True
                    )
                ]
            )
            start = end
        return out

    def _hits(
        self, scores: list[float], rows: list[int], topk: int, return_scores: bool
    ) -> list[dict[str, Any]]:
        hits: list[dict[str, Any]] = []
        for score, row in zip(scores[:topk], rows[:topk], strict=True):
            if row < 0:
                continue
            hit: dict[str, Any] = {"document": self.corpus.document(row)}
            if return_scores:
                hit["score"] = float(score)
            hits.append(hit)
        return hits

    def describe(self) -> dict[str, Any]:
        return {
            "service": SERVICE,
            "status": "ok",
            "model": self.settings.model,
            "query_encoder": self.encoder.query_path,
            "passages": self.passages,
            "dimension": int(self.index.d),
            "default_topk": self.settings.default_topk,
            "max_topk": self.settings.max_topk,
            "max_queries": self.settings.max_queries,
            "load_s": self.load_s,
        }


def parse_request(body: bytes, settings: Settings) -> tuple[list[str], int, bool]:
    """Check a /retrieve body; returns (queries, topk, return_scores) or raises BadRequest."""
    if len(body) > max_body_bytes(settings):
        raise BadRequest(413, f"request body is larger than {max_body_bytes(settings)} bytes")
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(400, f"request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequest(400, "request body must be a JSON object with a 'queries' list")
    unknown = sorted(set(data) - set(REQUEST_KEYS))
    if unknown:
        raise BadRequest(
            422, f"unknown field(s) {', '.join(unknown)}; known: {', '.join(REQUEST_KEYS)}"
        )
    if "queries" not in data:
        raise BadRequest(422, "'queries' is missing: give a list of query strings")
    queries = data["queries"]
    if not isinstance(queries, list):
        raise BadRequest(422, f"'queries' must be a list of strings, not {_kind(queries)}")
    if not queries:
        raise BadRequest(422, "'queries' is empty: give at least one query")
    if len(queries) > settings.max_queries:
        raise BadRequest(
            413, f"'queries' has {len(queries)} items; at most {settings.max_queries} per request"
        )
    for position, query in enumerate(queries):
        if not isinstance(query, str):
            raise BadRequest(422, f"queries[{position}] must be a string, not {_kind(query)}")
        if not query.strip():
            raise BadRequest(422, f"queries[{position}] is blank")
        if len(query) > settings.max_query_chars:
            raise BadRequest(
                422,
                f"queries[{position}] has {len(query)} characters; "
                f"at most {settings.max_query_chars}",
            )
    topk = data.get("topk", settings.default_topk)
    if topk is None:
        topk = settings.default_topk
    if isinstance(topk, bool) or not isinstance(topk, int):
        raise BadRequest(422, f"'topk' must be an integer, not {_kind(topk)}")
    if not 1 <= topk <= settings.max_topk:
        raise BadRequest(422, f"'topk' is {topk}; it must be between 1 and {settings.max_topk}")
    return_scores = data.get("return_scores", False)
    if not isinstance(return_scores, bool):
        raise BadRequest(422, f"'return_scores' must be true or false, not {_kind(return_scores)}")
    return queries, topk, return_scores


def max_body_bytes(settings: Settings) -> int:
    # Room for every query at its longest as 4-byte UTF-8 (or \\u escapes), plus the envelope.
    return settings.max_queries * (settings.max_query_chars * 6 + 16) + 4096


def _kind(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    names.update({list: "a list", dict: "an object", type(None): "null"})
    return names.get(type(value), type(value).__name__)


def create_app(provider: Callable[[], Retriever | None]) -> Any:
    """The FastAPI app. ``provider`` gives this process's Retriever (None while it loads)."""
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException as StarletteHTTPException

    app = FastAPI(title="rlinfra retrieval", docs_url=None, redoc_url=None, openapi_url=None)

    def error(status: int, message: str) -> JSONResponse:
        return JSONResponse({"error": message, "status": status}, status_code=status)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error(exc.status_code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        return error(422, str(exc.errors()))

    @app.get("/")
    async def root() -> JSONResponse:
        retriever = provider()
        if retriever is None:
            return JSONResponse({"service": SERVICE, "status": "loading"}, status_code=503)
        return JSONResponse(retriever.describe())

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        retriever = provider()
        if retriever is None:
            return JSONResponse({"status": "loading"}, status_code=503)
        return JSONResponse({"status": "ok", "passages": retriever.passages})

    @app.post("/retrieve")
    async def retrieve(request: Request) -> JSONResponse:
        retriever = provider()
        if retriever is None:
            return error(503, "the index is still loading")
        declared = request.headers.get("content-length")
        limit = max_body_bytes(retriever.settings)
        if declared and declared.isdigit() and int(declared) > limit:
            return error(413, f"request body is larger than {limit} bytes")
        try:
            queries, topk, return_scores = parse_request(await request.body(), retriever.settings)
        except BadRequest as exc:
            return error(exc.status, exc.message)
        result = await run_in_threadpool(retriever.search, queries, topk, return_scores)
        return JSONResponse({"result": result})

    return app


# ---------------------------------------------------------------- one Retriever per process

_PROCESS: dict[str, Retriever] = {}


def process_retriever() -> Retriever | None:
    """This process's Retriever, set by whoever loaded it (a Serve replica, `serve`)."""
    return _PROCESS.get("retriever")


def set_process_retriever(retriever: Retriever) -> None:
    _PROCESS["retriever"] = retriever
