"""A dense retrieval service for search-tool workflows (Search-R1 style), as Verl's search tool
calls it.

``POST /retrieve`` takes ``{"queries": [...], "topk": n, "return_scores": bool}`` and answers
``{"result": [[{"document": {"id": ..., "contents": "title\\ntext"}, "score": s}, ...], ...]}``,
one list per query, best first. ``GET /`` and ``GET /healthz`` answer probes.

Modules:
    settings    what a server needs to know (corpus, index, model, limits), stdlib only
    corpus      fetching and reading JSONL corpora (optionally gzipped), build locks
    index       encoding passages and building, saving and loading the FAISS index
    api         request checks and the Retriever (batched search), shared by every way of
                serving; the FastAPI app of Serve's proxy path
    batching    concurrent requests of one process encoded and searched as one batch, with a
                bounded queue (503 when full)
    wire        the small HTTP/1.1 layer (asyncio) under the replicas and the front
    server      one process serving the API itself: a replica, or ``serve`` alone
    front       the endpoint on the head that routes to the replicas' own ports
    serve_app   Ray Serve: replicas and the front as Serve deployments, deploy and status
    sample      a synthetic corpus for demos and benchmarks

Run ``python -m rlinfra_node.retrieval --help`` for the command line (build, serve, deploy,
status, sample).
"""
