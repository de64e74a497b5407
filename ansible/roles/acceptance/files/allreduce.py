#!/usr/bin/env python3
"""Cluster acceptance check: an all-reduce across every node of the running Ray cluster.

Run it on the head with the venv's interpreter, after sourcing /opt/rlinfra/node.env:

    python allreduce.py [--sizes-mib 1,16,64] [--warmup 2] [--iters 5] [--timeout-s 600]

It connects to the cluster (ray.init(address="auto")) and starts one actor per node on CPU
clusters (gloo; a STRICT_SPREAD placement group puts one on each node) or one actor per GPU on
GPU clusters (nccl; one GPU bundle per GPU, PACK). Every actor joins one torch.distributed group
(TCP rendezvous at the rank 0 actor) on the interface its node exported in GLOO_SOCKET_IFNAME /
NCCL_SOCKET_IFNAME, then for each size:

  * checks the numbers: rank r contributes a tensor full of r + 1; every element of the sum
    must be n (n + 1) / 2; a wrong value fails the check;
  * times `iters` all-reduces after `warmup` untimed ones (the slowest rank's mean counts);
  * reports algbw = bytes / time and busbw = algbw * 2 (n - 1) / n (nccl-tests' definition,
    10^9 bytes per second); with one rank, busbw is 0.

One task per node also reports torch.cuda.device_count() there. The result is one JSON
document on stdout:

  {"world_size": n, "backend": "gloo", "results": [{"size_bytes", "time_s", "algbw_gbps",
   "busbw_gbps"}], "nodes": [{"ip", "gpus", "interface", "ranks"}], "ok": true}

Exit status: 0 when ok; 1 when the numeric check fails (the JSON says why, with "ok": false);
2 when the check cannot run (cluster unreachable, actors not placed in time).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from datetime import timedelta

MIB = 1 << 20


def _node_ip() -> str:
    import ray

    return ray.util.get_node_ip_address()


def _gpu_count() -> dict:
    """This node's IP and torch.cuda.device_count() (run as a Ray task on that node).

    Ray hides the GPUs (CUDA_VISIBLE_DEVICES="") from tasks that asked for none; this task runs
    in a worker process that has not touched CUDA yet, so dropping that setting before torch
    starts lets it count every device of the node.
    """
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "":
        del os.environ["CUDA_VISIBLE_DEVICES"]
    try:
        import torch

        gpus, error = (torch.cuda.device_count() if torch.cuda.is_available() else 0), ""
    except Exception as exc:  # reported, not raised: the check names the node
        gpus, error = -1, repr(exc)
    return {"ip": _node_ip(), "gpus": gpus, "error": error}


class Member:
    """One rank of the process group (a Ray actor)."""

    def __init__(self, backend: str) -> None:
        # Import torch now, in every actor at once, so that no rank is still importing it when
        # the others wait for it at the rendezvous.
        import torch.distributed  # noqa: F401

        self.backend = backend
        self.rank = -1
        self.world = 0

    def where(self) -> dict:
        import ray

        gpu_ids = ray.get_gpu_ids() if self.backend == "nccl" else []
        env_name = "NCCL_SOCKET_IFNAME" if self.backend == "nccl" else "GLOO_SOCKET_IFNAME"
        return {
            "ip": _node_ip(),
            "interface": os.environ.get(env_name, ""),
            "gpu": int(gpu_ids[0]) if gpu_ids else -1,
        }

    def free_port(self) -> int:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("", 0))
            return sock.getsockname()[1]

    def join(self, init_method: str, world: int, rank: int, timeout_s: float) -> bool:
        import torch
        import torch.distributed as dist

        self.rank, self.world = rank, world
        if self.backend == "nccl":
            torch.cuda.set_device(0)
        dist.init_process_group(
            self.backend,
            init_method=init_method,
            world_size=world,
            rank=rank,
            timeout=timedelta(seconds=timeout_s),
        )
        return True

    def _sync(self) -> None:
        import torch

        if self.backend == "nccl":
            torch.cuda.synchronize()

    def run(self, size_bytes: int, warmup: int, iters: int) -> dict:
        import torch
        import torch.distributed as dist

        device = "cuda" if self.backend == "nccl" else "cpu"
        numel = max(1, size_bytes // 4)
        expected = self.world * (self.world + 1) / 2
        check = torch.full((numel,), float(self.rank + 1), dtype=torch.float32, device=device)
        dist.all_reduce(check)
        self._sync()
        wrong = int((check != expected).sum().item())
        sample = float(check[0].item())
        del check
        buf = torch.zeros(numel, dtype=torch.float32, device=device)
        for _ in range(warmup):
            dist.all_reduce(buf)
        self._sync()
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf)
        self._sync()
        elapsed = (time.perf_counter() - start) / max(1, iters)
        return {"time_s": elapsed, "wrong": wrong, "sample": sample, "expected": expected}

    def leave(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def _parse_sizes(text: str | None, backend: str) -> list[int]:
    if not text:
        text = "64,256,1024" if backend == "nccl" else "1,16,64"
    sizes = [int(float(s) * MIB) for s in text.split(",") if s.strip()]
    if not sizes or min(sizes) <= 0:
        raise SystemExit(f"--sizes-mib needs positive sizes, got {text!r}")
    return sizes


def _node_order() -> list[str]:
    ips = os.environ.get("RLINFRA_NODE_IPS", "")
    return [ip.strip() for ip in ips.splitlines() if ip.strip()]


def check(args: argparse.Namespace) -> tuple[dict, int]:
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import (
        NodeAffinitySchedulingStrategy,
        PlacementGroupSchedulingStrategy,
    )

    phases: dict[str, float] = {}
    mark = time.monotonic()

    def phase(name: str) -> None:
        nonlocal mark
        now = time.monotonic()
        phases[name] = round(now - mark, 3)
        mark = now

    ray.init(address="auto", log_to_driver=False, logging_level="ERROR")
    phase("connect")
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    order = _node_order()
    rank_of = {ip: i for i, ip in enumerate(order)}
    nodes.sort(
        key=lambda n: (rank_of.get(n["NodeManagerAddress"], len(rank_of)), n["NodeManagerAddress"])
    )

    # Count each node's GPUs while the actors start (both import torch).
    count_task = ray.remote(num_cpus=0, max_retries=0)(_gpu_count)
    count_refs = [
        count_task.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
        ).remote()
        for n in nodes
    ]
    ray_gpus = [int(n.get("Resources", {}).get("GPU", 0)) for n in nodes]
    backend = args.backend
    if backend == "auto":
        backend = "nccl" if nodes and min(ray_gpus) > 0 else "gloo"

    if backend == "nccl":
        bundles = [{"GPU": 1} for _ in range(sum(ray_gpus))]
        strategy = "PACK"
        actor_options = {"num_gpus": 1, "num_cpus": 0}
    else:
        bundles = [{"CPU": 1} for _ in nodes]
        strategy = "STRICT_SPREAD"
        actor_options = {"num_cpus": 1}
    pg = placement_group(bundles, strategy=strategy)
    try:
        ray.get(pg.ready(), timeout=args.timeout_s)
    except ray.exceptions.GetTimeoutError:
        remove_placement_group(pg)
        raise RuntimeError(
            f"could not place {len(bundles)} x {bundles[0]} ({strategy}) within {args.timeout_s} s; "
            f"cluster resources: {ray.cluster_resources()}"
        ) from None

    phase("placement_group")
    member_cls = ray.remote(**actor_options)(Member)
    members = [
        member_cls.options(
            scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i)
        ).remote(backend)
        for i in range(len(bundles))
    ]
    try:
        places = ray.get([m.where.remote() for m in members], timeout=args.timeout_s)
        # Ranks in node order (head first), then GPU index.
        ordered = sorted(
            zip(members, places, strict=True),
            key=lambda mp: (rank_of.get(mp[1]["ip"], len(rank_of)), mp[1]["ip"], mp[1]["gpu"]),
        )
        phase("start_actors")
        members = [m for m, _ in ordered]
        places = [p for _, p in ordered]
        world = len(members)
        port = ray.get(members[0].free_port.remote(), timeout=args.timeout_s)
        init_method = f"tcp://{places[0]['ip']}:{port}"
        ray.get(
            [m.join.remote(init_method, world, r, args.timeout_s) for r, m in enumerate(members)],
            timeout=args.timeout_s + 30,
        )
        phase("rendezvous")
        results, problems = [], []
        for size in _parse_sizes(args.sizes_mib, backend):
            per_rank = ray.get(
                [m.run.remote(size, args.warmup, args.iters) for m in members],
                timeout=args.timeout_s,
            )
            for rank, res in enumerate(per_rank):
                if res["wrong"]:
                    problems.append(
                        f"size {size} B: rank {rank} ({places[rank]['ip']}) has {res['wrong']} wrong "
                        f"elements (e.g. {res['sample']}, expected {res['expected']})"
                    )
            time_s = max(r["time_s"] for r in per_rank)
            algbw = size / time_s / 1e9
            busbw = algbw * 2 * (world - 1) / world if world > 1 else 0.0
            results.append(
                {
                    "size_bytes": size,
                    "time_s": round(time_s, 6),
                    "algbw_gbps": round(algbw, 4),
                    "busbw_gbps": round(busbw, 4),
                }
            )
        phase("all_reduce")
        ray.get([m.leave.remote() for m in members], timeout=60)
    finally:
        for m in members:
            ray.kill(m)
        remove_placement_group(pg)

    counts = ray.get(count_refs, timeout=args.timeout_s)
    phase("count_gpus")
    by_ip: dict[str, dict] = {}
    for node, count, gpus in zip(nodes, counts, ray_gpus, strict=True):
        ip = node["NodeManagerAddress"]
        by_ip[ip] = {
            "ip": ip,
            "gpus": count["gpus"],
            "ray_gpus": gpus,
            "interface": "",
            "ranks": [],
        }
        if count["error"]:
            problems.append(f"node {ip}: counting GPUs failed: {count['error']}")
    for rank, place in enumerate(places):
        entry = by_ip.setdefault(
            place["ip"],
            {"ip": place["ip"], "gpus": -1, "ray_gpus": 0, "interface": "", "ranks": []},
        )
        entry["ranks"].append(rank)
        entry["interface"] = entry["interface"] or place["interface"]
        if place["interface"] != entry["interface"]:
            problems.append(f"node {place['ip']}: ranks use different interfaces")
    doc = {
        "world_size": world,
        "backend": backend,
        "iters": args.iters,
        "results": results,
        "nodes": list(by_ip.values()),
        "ok": not problems,
        "problems": problems,
        "phases_s": phases,
    }
    return doc, (0 if not problems else 1)


def main() -> int:
    parser = argparse.ArgumentParser(description="All-reduce acceptance check for a Ray cluster.")
    parser.add_argument("--sizes-mib", default="", help="comma-separated message sizes in MiB")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--timeout-s", type=float, default=600)
    parser.add_argument("--backend", choices=["auto", "gloo", "nccl"], default="auto")
    args = parser.parse_args()
    try:
        doc, status = check(args)
    except Exception as exc:  # report, as JSON, why the check could not run
        doc, status = {"ok": False, "problems": [f"check could not run: {exc!r}"]}, 2
    print(json.dumps(doc))
    if status:
        print("all-reduce check failed: " + "; ".join(doc["problems"]), file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
