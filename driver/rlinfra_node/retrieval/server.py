"""One retrieval process serving the API over HTTP itself: the routes, batched searches, a bound.

This is what a replica runs (``serve_app``, the front routes to it) and what ``python -m
rlinfra_node.retrieval serve`` runs alone. The routes and their answers are those of
``api.create_app`` (the FastAPI app that Ray Serve's proxy path still uses), byte for byte:

- ``POST /retrieve``: checked by ``api.parse_request``, then searched through a ``Batcher``
  (``batching``): concurrent requests share one encoder call. When more than
  ``settings.max_queued_queries`` queries wait, the answer is 503 with ``Retry-After: 1`` at once.
- ``GET /`` (``Retriever.describe``) and ``GET /healthz``; other paths 404, other methods 405.

``ProcessServer`` runs it on an event loop thread of its own, so it keeps serving whatever the
hosting process's loop does (a Serve replica's loop runs Serve's own calls).
"""

from __future__ import annotations

from dataclasses import dataclass

from rlinfra_node.retrieval import api
from rlinfra_node.retrieval.batching import Batcher, Overloaded
from rlinfra_node.retrieval.wire import (
    LoopThread,
    Reply,
    Request,
    Server,
    error_reply,
    json_bytes,
    networks,
)

ROUTES = {"/retrieve": ("POST",), "/": ("GET", "HEAD"), "/healthz": ("GET", "HEAD")}


@dataclass
class RetrievalHandler:
    """The API's routes over one Retriever and its Batcher."""

    retriever: api.Retriever
    batcher: Batcher

    async def __call__(self, request: Request) -> Reply:
        methods = ROUTES.get(request.path)
        if methods is None:
            return error_reply(404, "Not Found")
        if request.method not in methods:
            return error_reply(405, "Method Not Allowed", (("allow", ", ".join(methods)),))
        if request.path == "/":
            return Reply(200, json_bytes(self.retriever.describe()))
        if request.path == "/healthz":
            return Reply(200, json_bytes({"status": "ok", "passages": self.retriever.passages}))
        try:
            queries, topk, return_scores = api.parse_request(request.body, self.retriever.settings)
        except api.BadRequest as exc:
            return error_reply(exc.status, exc.message)
        try:
            result = await self.batcher.search(queries, topk, return_scores)
        except Overloaded as exc:
            return error_reply(503, str(exc), (("retry-after", "1"),))
        return Reply(200, json_bytes({"result": result}))


def make_batcher(retriever: api.Retriever) -> Batcher:
    settings = retriever.settings
    return Batcher(retriever.search_batch, settings.max_batch_queries, settings.max_queued_queries)


class ProcessServer:
    """The API for ``retriever`` on ``host:port`` (0: a free port), on a loop thread of its own."""

    def __init__(
        self,
        retriever: api.Retriever,
        host: str,
        port: int = 0,
        allow: tuple[str, ...] | None = None,
    ) -> None:
        self.retriever = retriever
        self._allow = None if allow is None else networks(allow)
        self._thread = LoopThread("retrieval-http")
        self._batcher: Batcher | None = None
        self._server: Server | None = None
        self.host, self.port = self._thread.run(self._start(host, port), timeout=30)

    async def _start(self, host: str, port: int) -> tuple[str, int]:
        self._batcher = make_batcher(self.retriever)
        handler = RetrievalHandler(self.retriever, self._batcher)
        limit = api.max_body_bytes(self.retriever.settings)
        self._server = Server(handler, host, port, limit, name="replica", allow=self._allow)
        address = await self._server.start()
        self._batcher.start()
        return address

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def healthy(self) -> bool:
        """The loop runs, the socket listens and the batch worker (once started) lives."""
        server, batcher = self._server, self._batcher
        return bool(self._thread.alive and server and server.serving and batcher and batcher.alive)

    @property
    def queued_queries(self) -> int:
        """Queries waiting for a batch (not counting the batch that runs)."""
        return self._batcher.queued_queries if self._batcher is not None else 0

    @property
    def in_flight(self) -> int:
        return self._server.in_flight if self._server is not None else 0

    async def close_async(self, drain_s: float) -> None:
        """Stop accepting, drain requests in flight (at most ``drain_s``), stop the thread."""
        await self._thread.run_async(self._close(drain_s))
        self._thread.stop()

    def close(self, drain_s: float = 0.0) -> None:
        self._thread.run(self._close(drain_s), timeout=drain_s + 10)
        self._thread.stop()

    async def _close(self, drain_s: float) -> None:
        if self._server is not None:
            await self._server.close(drain_s)
        if self._batcher is not None:
            await self._batcher.close()

    def wait(self) -> None:
        """Block until the loop thread ends (the foreground ``serve`` command)."""
        self._thread.join()
