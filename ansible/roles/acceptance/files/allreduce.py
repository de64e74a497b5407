#!/usr/bin/env python3
"""Cluster acceptance check: an all-reduce through torch.distributed, and a GPU health measure.

Run it with the venv's interpreter, after sourcing the node contract (node.env):

    python allreduce.py [--sizes-mib 1,4,16] [--warmup 2] [--iters 5] [--timeout-s 600]
                        [--launcher ray|local] [--backend auto|gloo|nccl] [--local-ranks N]
                        [--health auto|off]

Two launchers start the ranks:

  * ray (the default, `rlinfra check`): on the head, against the running Ray cluster
    (ray.init(address="auto")). One actor per node on CPU clusters (gloo; a STRICT_SPREAD
    placement group puts one on each node) or one actor per GPU on GPU clusters (nccl; one GPU
    bundle per GPU, PACK). A task per node also reports torch.cuda.device_count() there (0,
    without importing torch, on a node with no NVIDIA device file); on CPU clusters only nodes
    whose actor saw an NVIDIA device file run it.
  * local: on one node, without Ray: one process per local GPU (nccl), or --local-ranks
    processes (gloo, default 1) on a CPU node. This checks a node's own GPUs and NCCL before, or
    without, a cluster.

Every rank joins one torch.distributed group (TCP rendezvous at rank 0) on the interface the
node exported in GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME, then for each size:

  * checks the numbers: rank r contributes a tensor full of r + 1; every element of the sum
    must be n (n + 1) / 2; a wrong value fails the check;
  * times `iters` all-reduces after `warmup` untimed ones (the slowest rank's mean counts); the
    checked all-reduce is the first untimed one, so it always runs, even with `--warmup 0`;
  * reports algbw = bytes / time and busbw = algbw * 2 (n - 1) / n (nccl-tests' definition,
    10^9 bytes per second). With one rank nothing crosses a link: busbw is null (undefined),
    never a made-up number, and "notes" says so.

On nccl, each rank then measures its GPU (--health auto): a bf16 matrix product (TFLOP/s, on
random data, checked against a float32 product of the same inputs) and a device-to-device copy
(GB/s, bytes read plus bytes written, checked for equality). The medians of CUDA-event timings
after warm-up count.

The result is one JSON document on stdout:

  {"launcher", "world_size", "backend", "iters", "results": [{"size_bytes", "time_s",
   "algbw_gbps", "busbw_gbps"}], "nodes": [{"ip", "gpus", "interface", "ranks"}],
   "gpus": [{"rank", "ip", "device", "name", "matmul_bf16_tflops", "copy_gbps", ...}],
   "versions", "collective_env", "notes", "ok", "problems", "phases_s"}

Exit status: 0 when ok; 1 when a check fails (the JSON says why, with "ok": false); 2 when the
check cannot run (cluster unreachable, actors not placed in time, a rank died).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import socket
import statistics
import sys
import time
from datetime import timedelta
from typing import Any

MIB = 1 << 20
# Relative error allowed for the bf16 product against float32 arithmetic on the same inputs
# (bf16 rounding of the output alone gives a few 1e-3).
MATMUL_REL_TOL = 2e-2
# Environment variables that steer the collectives, copied into the result.
COLLECTIVE_ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_", "TORCH_SYMM_MEM_", "NVSHMEM_", "GLOO_")


# ---- pure helpers (no torch, no Ray) ---------------------------------------------------------


def bus_factor(world: int) -> float | None:
    """nccl-tests' all-reduce bus factor 2 (n - 1) / n; None for one rank (undefined)."""
    if world < 1:
        raise ValueError(f"world size must be >= 1, got {world}")
    return 2 * (world - 1) / world if world > 1 else None


def bandwidth_row(size_bytes: int, time_s: float, world: int) -> dict[str, Any]:
    """One size's result: algbw = bytes / time, busbw = algbw * bus factor (GB/s, 10^9)."""
    if time_s <= 0:
        raise ValueError(f"time must be > 0, got {time_s}")
    algbw = size_bytes / time_s / 1e9
    factor = bus_factor(world)
    return {
        "size_bytes": size_bytes,
        "time_s": round(time_s, 6),
        "algbw_gbps": round(algbw, 4),
        "busbw_gbps": None if factor is None else round(algbw * factor, 4),
    }


def parse_sizes(text: str | None, backend: str) -> list[int]:
    if not text:
        text = "64,256,1024" if backend == "nccl" else "1,4,16"
    sizes = [int(float(s) * MIB) for s in text.split(",") if s.strip()]
    if not sizes or min(sizes) <= 0:
        raise SystemExit(f"--sizes-mib needs positive sizes, got {text!r}")
    return sizes


def wrong_sum_problems(size: int, per_rank: list[dict], places: list[dict]) -> list[str]:
    return [
        f"size {size} B: rank {rank} ({places[rank]['ip']}) has {res['wrong']} wrong "
        f"elements (e.g. {res['sample']}, expected {res['expected']})"
        for rank, res in enumerate(per_rank)
        if res["wrong"]
    ]


def health_problems(gpus: list[dict]) -> list[str]:
    problems = []
    for g in gpus:
        where = f"rank {g['rank']} ({g['ip']}, cuda:{g['device']})"
        if g.get("error"):
            problems.append(f"{where}: GPU health measure failed: {g['error']}")
            continue
        if not g["matmul_rel_err"] < MATMUL_REL_TOL:
            problems.append(
                f"{where}: bf16 matmul relative error {g['matmul_rel_err']} above {MATMUL_REL_TOL}"
            )
        if not g["copy_ok"]:
            problems.append(f"{where}: device-to-device copy gave different bytes")
    return problems


def notes_for(world: int, backend: str, health: bool) -> list[str]:
    notes = []
    if world == 1:
        notes.append(
            "one rank: the all-reduce crosses no link, so busbw is undefined (null). algbw is "
            f"size / time of a one-rank all-reduce, which moves no data ({backend} returns at "
            "once, in place): its time is the call's overhead (on a GPU, the launch latency), "
            "and algbw is no bandwidth of anything"
        )
    if backend != "nccl":
        notes.append("no GPU health measure: it runs on nccl (GPU) ranks only")
    elif not health:
        notes.append("GPU health measure turned off (--health off)")
    return notes


def collective_env() -> dict[str, str]:
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(COLLECTIVE_ENV_PREFIXES)}


def _node_ip_from_contract() -> str:
    ips = _node_order()
    rank = os.environ.get("RLINFRA_NODE_RANK", "")
    if rank.isdigit() and int(rank) < len(ips):
        return ips[int(rank)]
    return "127.0.0.1"


def _node_order() -> list[str]:
    ips = os.environ.get("RLINFRA_NODE_IPS", "")
    return [ip.strip() for ip in ips.splitlines() if ip.strip()]


# ---- on the ranks ----------------------------------------------------------------------------


def _node_ip() -> str:
    import ray

    return ray.util.get_node_ip_address()


def _nvidia_device_files(dev: str = "/dev") -> list[str]:
    """The GPU device files of the NVIDIA driver here (nvidia0, nvidia1, ...)."""
    try:
        names = os.listdir(dev)
    except OSError:
        return []
    return sorted(n for n in names if n.startswith("nvidia") and n[len("nvidia") :].isdigit())


def _gpu_count() -> dict:
    """This node's IP and torch.cuda.device_count() (run as a Ray task on that node).

    Ray hides the GPUs (CUDA_VISIBLE_DEVICES="") from tasks that asked for none; this task runs
    in a worker process that has not touched CUDA yet, so dropping that setting before torch
    starts lets it count every device of the node.
    """
    if not _nvidia_device_files():
        # No NVIDIA device file: no driver can show a GPU here, and importing torch in this
        # extra process only to hear so costs seconds of CPU on every CPU node.
        return {"ip": _node_ip(), "gpus": 0, "error": ""}
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "":
        del os.environ["CUDA_VISIBLE_DEVICES"]
    try:
        import torch

        gpus, error = (torch.cuda.device_count() if torch.cuda.is_available() else 0), ""
    except Exception as exc:  # reported, not raised: the check names the node
        gpus, error = -1, repr(exc)
    return {"ip": _node_ip(), "gpus": gpus, "error": error}


def _versions() -> dict[str, str]:
    import torch

    out = {"torch": str(torch.__version__), "cuda": str(torch.version.cuda or "")}
    if torch.cuda.is_available():
        nccl = torch.cuda.nccl.version()
        out["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    return out


def _median_ms(torch: Any, fn: Any, warmup: int, iters: int) -> float:
    """Median CUDA-event time of fn() in ms, after warm-up."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _measure_matmul(torch: Any, dev: Any, gen: Any, n: int, iters: int) -> dict[str, Any]:
    """bf16 n x n x n product on random data: TFLOP/s, and its error on 64 rows vs float32."""
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16, generator=gen)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16, generator=gen)
    c = torch.full_like(a, float("nan"))  # poisoned: an unwritten output fails the check
    torch.matmul(a, b, out=c)
    ref = a[:64].float() @ b.float()
    rel_err = float((c[:64].float() - ref).norm() / ref.norm())
    ms = _median_ms(torch, lambda: torch.matmul(a, b, out=c), warmup=3, iters=iters)
    return {
        "matmul_rel_err": rel_err,
        "matmul_ms": round(ms, 4),
        "matmul_bf16_tflops": round(2 * n**3 / (ms / 1e3) / 1e12, 2),
    }


def _measure_copy(torch: Any, dev: Any, gen: Any, numel: int, iters: int) -> dict[str, Any]:
    """Device-to-device copy of numel float32: GB/s counting bytes read plus bytes written."""
    src = torch.randn(numel, device=dev, dtype=torch.float32, generator=gen)
    dst = torch.full_like(src, float("nan"))
    dst.copy_(src)
    copy_ok = bool(torch.equal(dst, src))
    ms = _median_ms(torch, lambda: dst.copy_(src), warmup=3, iters=iters)
    return {
        "copy_ok": copy_ok,
        "copy_ms": round(ms, 4),
        "copy_gbps": round(2 * numel * 4 / (ms / 1e3) / 1e9, 1),
    }


def open_store(host: str, port: int, timeout_s: float, serve: bool = False) -> Any:
    """The TCP key-value store the ranks meet at: served (port 0 picks a free one) or joined."""
    import torch.distributed as dist

    timeout = timedelta(seconds=timeout_s)
    if serve:
        # The store listens on every address of its node, as torch's own tcp:// rendezvous does;
        # ranks come to it at the node's collective IP.
        return dist.TCPStore(host, port, None, True, timeout, wait_for_workers=False)
    return dist.TCPStore(host, port, None, False, timeout)


class Member:
    """One rank of the process group (a Ray actor, or a local process)."""

    def __init__(self, backend: str, device: int = 0, ip: str = "") -> None:
        # Import torch now, in every rank at once, so that no rank is still importing it when
        # the others wait for it at the rendezvous.
        import torch.distributed  # noqa: F401

        self.backend = backend
        self.device = device
        self.ip = ip
        self.rank = -1
        self.world = 0
        self._store: Any = None

    def where(self) -> dict:
        env_name = "NCCL_SOCKET_IFNAME" if self.backend == "nccl" else "GLOO_SOCKET_IFNAME"
        if self.ip:  # local launcher
            ip, gpu = self.ip, (self.device if self.backend == "nccl" else -1)
            return {"ip": ip, "interface": os.environ.get(env_name, ""), "gpu": gpu}
        import ray

        gpu_ids = ray.get_gpu_ids() if self.backend == "nccl" else []
        return {
            "ip": _node_ip(),
            "interface": os.environ.get(env_name, ""),
            "gpu": int(gpu_ids[0]) if gpu_ids else -1,
            "node_id": ray.get_runtime_context().get_node_id(),
            "nvidia_device_files": len(_nvidia_device_files()),
        }

    def serve_store(self, timeout_s: float) -> int:
        """Start the rendezvous store here (rank 0's place) and return the port it listens on.

        The store is up before any rank connects to it: a rank that finds no store retries after
        a back-off of up to about half a second, which a rendezvous would otherwise often pay.
        """
        self._store = open_store("127.0.0.1", 0, timeout_s, serve=True)
        return int(self._store.port)

    def join(self, host: str, port: int, world: int, rank: int, timeout_s: float) -> bool:
        import torch
        import torch.distributed as dist

        self.rank, self.world = rank, world
        store = self._store if self._store is not None else open_store(host, port, timeout_s)
        kwargs: dict[str, Any] = {}
        if self.backend == "nccl":
            torch.cuda.set_device(self.device)
            # Binds the group to this GPU, so NCCL sets up its communicator here and now
            # (a failure shows in the rendezvous phase, not in the first all-reduce).
            kwargs["device_id"] = torch.device("cuda", self.device)
        dist.init_process_group(
            self.backend,
            store=store,
            world_size=world,
            rank=rank,
            timeout=timedelta(seconds=timeout_s),
            **kwargs,
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
        # The checked all-reduce is the first untimed one; the others reuse its buffer, zeroed
        # (so no value can grow out of range however many iterations run).
        buf = torch.full((numel,), float(self.rank + 1), dtype=torch.float32, device=device)
        dist.all_reduce(buf)
        self._sync()
        wrong = int((buf != expected).sum().item())
        sample = float(buf[0].item())
        buf.zero_()
        for _ in range(warmup - 1):
            dist.all_reduce(buf)
        self._sync()
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf)
        self._sync()
        elapsed = (time.perf_counter() - start) / max(1, iters)
        return {"time_s": elapsed, "wrong": wrong, "sample": sample, "expected": expected}

    def health(self, matmul_n: int, copy_mib: int, iters: int) -> dict:
        """bf16 matmul TFLOP/s and copy GB/s on this rank's GPU (random data, checked)."""
        import torch

        dev = torch.device("cuda", torch.cuda.current_device())
        out: dict[str, Any] = {
            "rank": self.rank,
            "device": dev.index,
            "name": torch.cuda.get_device_name(dev),
            "matmul_n": matmul_n,
            "copy_bytes": copy_mib * MIB,
            "iters": iters,
            "error": "",
        }
        try:
            gen = torch.Generator(device=dev).manual_seed(1234 + max(self.rank, 0))
            out.update(_measure_matmul(torch, dev, gen, matmul_n, iters))
            out.update(_measure_copy(torch, dev, gen, copy_mib * MIB // 4, iters))
        except Exception as exc:  # reported per GPU: the check names it
            out["error"] = repr(exc)
            out.setdefault("matmul_rel_err", float("nan"))
            out.setdefault("copy_ok", False)
        torch.cuda.empty_cache()
        return out

    def leave(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def _want_health(args: argparse.Namespace, backend: str) -> bool:
    return backend == "nccl" and args.health != "off"


def _finish(
    doc: dict[str, Any], problems: list[str], world: int, backend: str, health: bool
) -> tuple[dict, int]:
    doc["problems"] = problems
    doc["notes"] = notes_for(world, backend, health)
    doc["collective_env"] = collective_env()
    doc["ok"] = not problems
    return doc, (0 if not problems else 1)


# ---- the Ray launcher ------------------------------------------------------------------------


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

    ray_gpus = [int(n.get("Resources", {}).get("GPU", 0)) for n in nodes]
    backend = args.backend
    if backend == "auto":
        backend = "nccl" if nodes and min(ray_gpus) > 0 else "gloo"
    health = _want_health(args, backend)

    # Each node's GPU count, from torch in a task of its own (Ray hides the GPUs from tasks that
    # asked for none). On GPU clusters it runs while the actors start (both import torch).
    # With gloo there is one actor per node, which tells whether the node has any NVIDIA device
    # file: only nodes that do need the task, and the others spare a worker process.
    count_task = ray.remote(num_cpus=0, max_retries=0)(_gpu_count)

    def count_on(node: dict) -> Any:
        return count_task.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
        ).remote()

    count_refs: list[Any] = [count_on(n) for n in nodes] if backend == "nccl" else []

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
    gpus: list[dict] = []
    try:
        places = ray.get([m.where.remote() for m in members], timeout=args.timeout_s)
        # Ranks in node order (head first), then GPU index.
        ordered = sorted(
            zip(members, places, strict=True),
            key=lambda mp: (rank_of.get(mp[1]["ip"], len(rank_of)), mp[1]["ip"], mp[1]["gpu"]),
        )
        phase("start_actors")
        if backend != "nccl":
            devices = {p.get("node_id"): p.get("nvidia_device_files", 1) for p in places}
            count_refs = [
                count_on(n)
                if devices.get(n["NodeID"], 1)
                else {"ip": n["NodeManagerAddress"], "gpus": 0, "error": ""}
                for n in nodes
            ]
        members = [m for m, _ in ordered]
        places = [p for _, p in ordered]
        world = len(members)
        port = ray.get(members[0].serve_store.remote(args.timeout_s), timeout=args.timeout_s)
        host = places[0]["ip"]
        ray.get(
            [m.join.remote(host, port, world, r, args.timeout_s) for r, m in enumerate(members)],
            timeout=args.timeout_s + 30,
        )
        phase("rendezvous")
        results, problems = [], []
        for size in parse_sizes(args.sizes_mib, backend):
            per_rank = ray.get(
                [m.run.remote(size, args.warmup, args.iters) for m in members],
                timeout=args.timeout_s,
            )
            problems += wrong_sum_problems(size, per_rank, places)
            results.append(bandwidth_row(size, max(r["time_s"] for r in per_rank), world))
        phase("all_reduce")
        if health:
            gpus = ray.get(
                [m.health.remote(args.matmul_n, args.copy_mib, args.health_iters) for m in members],
                timeout=args.timeout_s,
            )
            for g in gpus:
                # The node's GPU index (Ray's id), not the actor's cuda:0.
                g["ip"] = places[g["rank"]]["ip"]
                g["device"] = places[g["rank"]]["gpu"]
            problems += health_problems(gpus)
            phase("gpu_health")
        ray.get([m.leave.remote() for m in members], timeout=60)
    finally:
        for m in members:
            ray.kill(m)
        remove_placement_group(pg)

    pending = [ref for ref in count_refs if not isinstance(ref, dict)]
    got = iter(ray.get(pending, timeout=args.timeout_s) if pending else [])
    counts = [ref if isinstance(ref, dict) else next(got) for ref in count_refs]
    phase("count_gpus")
    by_ip: dict[str, dict] = {}
    for node, count, ngpus in zip(nodes, counts, ray_gpus, strict=True):
        ip = node["NodeManagerAddress"]
        by_ip[ip] = {
            "ip": ip,
            "gpus": count["gpus"],
            "ray_gpus": ngpus,
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
        "launcher": "ray",
        "world_size": world,
        "backend": backend,
        "iters": args.iters,
        "results": results,
        "nodes": list(by_ip.values()),
        "gpus": gpus,
        "phases_s": phases,
    }
    return _finish(doc, problems, world, backend, health)


# ---- the local launcher ----------------------------------------------------------------------


def _local_rank(
    rank: int, world: int, backend: str, ip: str, port: int, args: dict, out: Any
) -> None:
    """One local rank: join, all-reduce every size, measure the GPU; report through `out`."""
    report: dict[str, Any] = {"rank": rank}
    try:
        member = Member(backend, device=rank if backend == "nccl" else 0, ip=ip)
        report["place"] = member.where()
        member.join("127.0.0.1", port, world, rank, args["timeout_s"])
        out.put({"rank": rank, "event": "joined"})
        report["runs"] = [member.run(size, args["warmup"], args["iters"]) for size in args["sizes"]]
        out.put({"rank": rank, "event": "ran"})
        if args["health"]:
            report["health"] = member.health(
                args["matmul_n"], args["copy_mib"], args["health_iters"]
            )
        member.leave()
    except BaseException as exc:  # reported to the parent, which names the rank
        report["error"] = repr(exc)
    out.put({"rank": rank, "event": "done", "report": report})


def local_check(args: argparse.Namespace) -> tuple[dict, int]:
    import multiprocessing

    import torch

    phases: dict[str, float] = {}
    mark = time.monotonic()

    def phase(name: str) -> None:
        nonlocal mark
        now = time.monotonic()
        phases[name] = round(now - mark, 3)
        mark = now

    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    backend = args.backend
    if backend == "auto":
        backend = "nccl" if visible > 0 else "gloo"
    if backend == "nccl":
        if visible == 0:
            raise RuntimeError("--backend nccl needs a GPU, and torch sees none on this node")
        world = args.local_ranks or visible
        if world > visible:
            # NCCL needs one GPU per rank: two ranks on one GPU is not a valid communicator.
            raise RuntimeError(
                f"--local-ranks {world} > {visible} GPU(s): NCCL needs a GPU per rank"
            )
    else:
        world = args.local_ranks or 1
    health = _want_health(args, backend)
    ip = _node_ip_from_contract()
    # This process serves the rendezvous store, up before any rank starts (see serve_store).
    store = open_store("127.0.0.1", 0, args.timeout_s, serve=True)
    sizes = parse_sizes(args.sizes_mib, backend)
    rank_args = {
        "timeout_s": args.timeout_s,
        "warmup": args.warmup,
        "iters": args.iters,
        "sizes": sizes,
        "health": health,
        "matmul_n": args.matmul_n,
        "copy_mib": args.copy_mib,
        "health_iters": args.health_iters,
    }
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(
            target=_local_rank,
            args=(r, world, backend, ip, int(store.port), rank_args, out),
            daemon=True,
        )
        for r in range(world)
    ]
    for p in procs:
        p.start()
    reports: dict[int, dict] = {}
    seen: dict[str, set[int]] = {"joined": set(), "ran": set()}
    deadline = time.monotonic() + args.timeout_s * (2 + len(sizes))
    try:
        while len(reports) < world:
            try:
                msg = out.get(timeout=1.0)
            except queue.Empty:
                dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
                dead = [r for r in dead if r not in reports]
                if dead:
                    raise RuntimeError(
                        f"local rank(s) {dead} died (exit {[procs[r].exitcode for r in dead]})"
                    ) from None
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"local ranks did not finish within {args.timeout_s} s per step "
                        f"(joined: {sorted(seen['joined'])}, ran: {sorted(seen['ran'])})"
                    ) from None
                continue
            if msg["event"] == "done":
                reports[msg["rank"]] = msg["report"]
            else:
                seen[msg["event"]].add(msg["rank"])
                if msg["event"] == "joined" and len(seen["joined"]) == world:
                    phase("start_and_rendezvous")
                if msg["event"] == "ran" and len(seen["ran"]) == world:
                    phase("all_reduce")
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    if health:
        phase("gpu_health")
    errors = [
        f"local rank {r}: {rep['error']}" for r, rep in sorted(reports.items()) if "error" in rep
    ]
    if errors:
        raise RuntimeError("; ".join(errors))
    places = [reports[r]["place"] for r in range(world)]
    problems: list[str] = []
    results = []
    for i, size in enumerate(sizes):
        per_rank = [reports[r]["runs"][i] for r in range(world)]
        problems += wrong_sum_problems(size, per_rank, places)
        results.append(bandwidth_row(size, max(r["time_s"] for r in per_rank), world))
    gpus = []
    if health:
        for r in range(world):
            g = reports[r]["health"]
            g["ip"] = ip
            gpus.append(g)
        problems += health_problems(gpus)
    interfaces = sorted({p["interface"] for p in places})
    doc = {
        "launcher": "local",
        "host": socket.gethostname(),
        "world_size": world,
        "backend": backend,
        "iters": args.iters,
        "results": results,
        "nodes": [
            {"ip": ip, "gpus": visible, "interface": interfaces[0], "ranks": list(range(world))}
        ],
        "gpus": gpus,
        "versions": _versions(),
        "phases_s": phases,
    }
    return _finish(doc, problems, world, backend, health)


# ---- one check at a time -------------------------------------------------------------------


def _is_check(pid: int) -> bool:
    """``pid`` is a running copy of this script (not a reused pid of something else)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = handle.read().split(b"\0")
    except OSError:
        return False
    name = os.path.basename(__file__).encode()
    return any(os.path.basename(arg) == name for arg in argv[:3])


def stop_previous(pidfile: str, grace_s: float = 10.0) -> int | None:
    """End the check whose pid ``pidfile`` holds, if it still runs; its pid, else None.

    A check outlives an interrupted or killed controller (SSH without a terminal sends no
    hangup), so the controller stops it through this, and every new check stops an old one.
    """
    try:
        with open(pidfile) as handle:
            pid = int(handle.read().strip() or 0)
    except (OSError, ValueError):
        return None
    if pid <= 0 or pid == os.getpid() or not _is_check(pid):
        return None
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and _is_check(pid):
        time.sleep(0.1)
    if _is_check(pid):
        os.kill(pid, signal.SIGKILL)
    return pid


def _claim(pidfile: str) -> None:
    stop_previous(pidfile)
    os.makedirs(os.path.dirname(pidfile) or ".", exist_ok=True)
    with open(pidfile, "w") as handle:
        handle.write(f"{os.getpid()}\n")

    def on_term(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)  # unwinds through the launchers' cleanup

    signal.signal(signal.SIGTERM, on_term)


def _release(pidfile: str) -> None:
    try:
        with open(pidfile) as handle:
            mine = handle.read().strip() == str(os.getpid())
        if mine:
            os.unlink(pidfile)
    except OSError:
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description="All-reduce acceptance check.")
    parser.add_argument(
        "--pidfile", default="", help="record this check's pid here; an older check there is ended"
    )
    parser.add_argument(
        "--stop", action="store_true", help="only end the check recorded in --pidfile, then exit"
    )
    parser.add_argument("--sizes-mib", default="", help="comma-separated message sizes in MiB")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--timeout-s", type=float, default=600)
    parser.add_argument("--backend", choices=["auto", "gloo", "nccl"], default="auto")
    parser.add_argument("--launcher", choices=["ray", "local"], default="ray")
    parser.add_argument(
        "--local-ranks", type=int, default=0, help="local launcher: ranks (0: one per GPU, or 1)"
    )
    parser.add_argument("--health", choices=["auto", "off"], default="auto")
    parser.add_argument("--matmul-n", type=int, default=8192, help="GPU health: matmul size")
    parser.add_argument("--copy-mib", type=int, default=2048, help="GPU health: copy size")
    parser.add_argument("--health-iters", type=int, default=20)
    args = parser.parse_args()
    if args.stop:
        if not args.pidfile:
            parser.error("--stop needs --pidfile")
        stopped = stop_previous(args.pidfile)
        print(f"stopped the check with pid {stopped}" if stopped else "no check was running")
        return 0
    if args.pidfile:
        _claim(args.pidfile)
    try:
        doc, status = local_check(args) if args.launcher == "local" else check(args)
    except Exception as exc:  # report, as JSON, why the check could not run
        doc, status = {"ok": False, "problems": [f"check could not run: {exc!r}"]}, 2
    finally:
        if args.pidfile:
            _release(args.pidfile)
    print(json.dumps(doc))
    if status:
        print("all-reduce check failed: " + "; ".join(doc["problems"]), file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
