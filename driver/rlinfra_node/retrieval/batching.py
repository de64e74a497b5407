"""Micro-batching: the concurrent /retrieve calls of one process, encoded and searched together.

Encoding dominates a search, and a transformer encodes a batch of short queries for little more
than one: with all-MiniLM-L6-v2 on one thread, 32 queries together cost about a tenth of 32 one
at a time (bench/results/retrieval.md). So a process serves requests in batches:

- Requests wait in one FIFO queue. One worker thread takes everything that is waiting (up to
  ``max_batch_queries`` queries; a larger request goes alone) and runs it as one
  ``Retriever.search_batch``. There is no timer: a lone request starts at once (nothing is
  gained by waiting at one client), and under load the next batch fills while the current one
  runs, so batches grow with the load and throughput rises with it instead of falling.
- The queue is bounded by queries, not requests (``max_queued_queries``). A request that would
  overflow it is refused at once with ``Overloaded`` (the HTTP layer answers 503 with
  ``Retry-After``), so latency under overload stays about (queue / batch + 1) batch times
  instead of growing without bound, and the process never spends its CPU on requests whose
  clients have given up.

Each result is the same as that of a search on its own (the same encoder and exact index; the
batch is searched with the largest top-k it holds and each request keeps its own first k).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

Result = list[list[dict[str, Any]]]


@dataclass(frozen=True)
class Query:
    """One request's queries and options."""

    queries: list[str]
    topk: int
    return_scores: bool


SearchBatch = Callable[[list[Query]], list[Result]]


class Overloaded(Exception):
    """The queue is full: try again later (HTTP 503)."""


@dataclass
class _Waiting:
    query: Query
    future: asyncio.Future[Result]


class Batcher:
    """Runs ``search_batch`` on batches of the requests waiting; one batch at a time.

    Create and use it on one event loop; ``search_batch`` runs on a worker thread of its own.
    """

    def __init__(
        self, search_batch: SearchBatch, max_batch_queries: int, max_queued_queries: int
    ) -> None:
        if max_batch_queries < 1 or max_queued_queries < 1:
            raise ValueError("max_batch_queries and max_queued_queries must be at least 1")
        self._search_batch = search_batch
        self.max_batch_queries = max_batch_queries
        self.max_queued_queries = max_queued_queries
        self._waiting: deque[_Waiting] = deque()
        self.queued_queries = 0
        self._wake = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="retrieval-batch")
        self._task: asyncio.Task[None] | None = None
        # The batch on the worker thread, and whether close() ran: neither may leave a request
        # waiting on a future that nothing will resolve.
        self._running: list[_Waiting] = []
        self._closed = False
        # Counters for tests and the replica's health check.
        self.batches = 0
        self.largest_batch = 0

    @property
    def alive(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start the batch worker on the running loop (the first search does it otherwise)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def search(self, queries: list[str], topk: int, return_scores: bool) -> Result:
        """This request's result, computed in the next batch; ``Overloaded`` if the queue is full."""
        if self._closed:
            raise Overloaded("the server is stopping")
        self.start()
        if self.queued_queries + len(queries) > self.max_queued_queries and self._waiting:
            raise Overloaded(
                f"{self.queued_queries} queries are waiting (at most "
                f"{self.max_queued_queries}); retry later"
            )
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._waiting.append(_Waiting(Query(queries, topk, return_scores), future))
        self.queued_queries += len(queries)
        self._wake.set()
        return await future

    def _take(self) -> list[_Waiting]:
        batch: list[_Waiting] = []
        size = 0
        while self._waiting:
            item = self._waiting[0]
            count = len(item.query.queries)
            if batch and size + count > self.max_batch_queries:
                break
            self._waiting.popleft()
            self.queued_queries -= count
            if item.future.done():  # cancelled while it waited
                continue
            batch.append(item)
            size += count
        return batch

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._waiting:
                batch = self._take()
                if not batch:
                    continue
                queries = [item.query for item in batch]
                self._running = batch  # close() answers these if it stops the worker mid-batch
                try:
                    results = await loop.run_in_executor(
                        self._executor, self._search_batch, queries
                    )
                    if len(results) != len(batch):
                        raise RuntimeError(
                            f"search_batch answered {len(results)} of {len(batch)} requests"
                        )
                except Exception as exc:  # a failed batch fails its requests, not the worker
                    self._running = []
                    for item in batch:
                        if not item.future.done():
                            item.future.set_exception(exc)
                    continue
                self._running = []
                self.batches += 1
                self.largest_batch = max(self.largest_batch, sum(len(q.queries) for q in queries))
                for item, result in zip(batch, results, strict=True):
                    if not item.future.done():
                        item.future.set_result(result)

    async def close(self) -> None:
        """Stop the worker; requests still waiting, those of the batch that runs and any that
        come later get ``Overloaded`` (HTTP 503: the front passes them to another replica)."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        stopping = [*self._running, *self._waiting]
        self._running = []
        self._waiting.clear()
        for item in stopping:
            if not item.future.done():
                item.future.set_exception(Overloaded("the server is stopping"))
        self.queued_queries = 0
        self._executor.shutdown(wait=False)
