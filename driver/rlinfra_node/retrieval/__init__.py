"""A dense retrieval service for search-tool workflows (Search-R1 style), as Verl's search tool
calls it.

``POST /retrieve`` takes ``{"queries": [...], "topk": n, "return_scores": bool}`` and answers
``{"result": [[{"document": {"id": ..., "contents": "title\\ntext"}, "score": s}, ...], ...]}``,
one list per query, best first. ``GET /`` and ``GET /healthz`` answer probes.

Modules:
    settings    what a server needs to know (corpus, index, model, limits), stdlib only
    corpus      fetching and reading JSONL corpora (optionally gzipped), build locks
    index       encoding passages and building, saving and loading the FAISS index
    api         the FastAPI app (request checks, search) shared by every way of serving
    serve_app   the Ray Serve deployment that replicates the app behind one endpoint
    sample      a synthetic corpus for demos and benchmarks

Run ``python -m rlinfra_node.retrieval --help`` for the command line (build, serve, sample).
"""
