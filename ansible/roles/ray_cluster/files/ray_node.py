#!/usr/bin/env python3
"""Inspect or stop the Ray processes of THIS node only.

`ray stop` kills every Ray process the kernel shows it, which on a machine that hosts several
nodes (network namespaces, containers sharing a PID namespace) stops the other nodes too. This
helper acts only on processes that share this process's network and mount namespaces, which on
an ordinary VM is every process, i.e. the same set `ray stop` acts on.

    ray_node.py status   -> JSON: {"raylets": [{"pid", "node_ip", "gcs_address"}], "gcs_servers": [pid],
                                   "processes": N}
    ray_node.py stop [--grace-s S]   -> JSON: {"stopped": N, "killed": N}; exit 0 when none is left
    ray_node.py start -- ARGS...
        -> runs `ray start ARGS` here, asking the GCS finely whether this node has registered
    ray_node.py join --gcs HOST:PORT --wait-s S -- ARGS...
        -> waits until the head at HOST:PORT has registered, then starts as `start` does
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

# (keyword, match on the executable name (True) or on the whole command line (False)), in the
# order `ray stop` stops them: raylet first, gcs_server last. This is Ray's own list
# (ray.autoscaler._private.constants.RAY_PROCESSES, Ray 2.60 on Linux), written out: importing
# Ray to read it costs about 0.7 CPU-seconds on every call. A unit test compares the two.
RAY_PROCESSES = [
    ("raylet", True),
    ("plasma_store", True),
    ("monitor.py", False),
    ("ray.util.client.server", False),
    ("default_worker.py", False),
    ("setup_worker.py", False),
    ("ray::", True),
    ("io.ray.runtime.runner.worker.DefaultWorker", False),
    ("log_monitor.py", False),
    ("ray::DashboardAgent", False),
    ("dashboard/dashboard.py", False),
    ("ray::RuntimeEnvAgent", False),
    ("ray_process_reaper.py", False),
    ("gcs_server", True),
]


def _ns(pid: int | str, kind: str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return None


def _local_processes() -> list[tuple[int, str, list[str]]]:
    """(pid, name, argv) of every process in this process's network and mount namespaces."""
    mine = (_ns("self", "net"), _ns("self", "mnt"))
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        if (_ns(pid, "net"), _ns(pid, "mnt")) != mine:
            continue
        try:
            with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as handle:
                name = handle.read().strip()
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                argv = [a.decode(errors="replace") for a in handle.read().split(b"\0") if a]
        except OSError:
            continue
        if argv:
            out.append((pid, name, argv))
    return out


def _matches(name: str, argv: list[str], keyword: str, by_name: bool) -> bool:
    return keyword in name if by_name else keyword in " ".join(argv)


def ray_processes() -> list[list[tuple[int, str, list[str]]]]:
    """This node's Ray processes, in three stop buckets: raylet, the rest, gcs_server."""
    procs = _local_processes()
    buckets: list[list[tuple[int, str, list[str]]]] = [[], [], []]
    seen: set[int] = set()
    for index, (keyword, by_name) in enumerate(RAY_PROCESSES):
        bucket = 0 if index == 0 else (2 if index == len(RAY_PROCESSES) - 1 else 1)
        for proc in procs:
            if proc[0] not in seen and _matches(proc[1], proc[2], keyword, by_name):
                seen.add(proc[0])
                buckets[bucket].append(proc)
    return buckets


def _flag(argv: list[str], *names: str) -> str | None:
    for index, arg in enumerate(argv):
        for name in names:
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
            if arg == name and index + 1 < len(argv):
                return argv[index + 1]
    return None


def status() -> dict:
    raylets, rest, gcs = ray_processes()
    return {
        "raylets": [
            {
                "pid": pid,
                "node_ip": _flag(argv, "--node_ip_address", "--node-ip-address"),
                "gcs_address": _flag(argv, "--gcs-address", "--gcs_address"),
            }
            for pid, _, argv in raylets
        ],
        "gcs_servers": [pid for pid, _, _ in gcs],
        "processes": len(raylets) + len(rest) + len(gcs),
    }


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return handle.read().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def stop(grace_s: float) -> dict:
    stopped = killed = 0
    for bucket in ray_processes():
        pids = [pid for pid, _, _ in bucket]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s / 3
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.1)
        for pid in pids:
            if _alive(pid):
                killed += 1
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            else:
                stopped += 1
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(ray_processes()):
        time.sleep(0.2)
    left = [pid for bucket in ray_processes() for pid, _, _ in bucket]
    if not left:
        _forget_cluster_address()
    return {"stopped": stopped, "killed": killed, "left": left}


def _forget_cluster_address() -> None:
    """Remove this node's record of the last cluster it joined, as `ray stop` does.

    `ray start --head` refuses to start when that record names its own address and any raylet
    the kernel shows still points there (on a shared PID namespace: another node's worker).
    """
    try:
        from ray._common.utils import reset_ray_address
    except Exception:  # pragma: no cover - other Ray layouts
        path = os.path.join(os.environ.get("RAY_TMPDIR", "/tmp"), "ray", "ray_current_cluster")
        with contextlib.suppress(OSError):
            os.remove(path)
        return
    reset_ray_address()


def wait_for_head(
    host: str, port: int, deadline: float, head_alive: Callable[[], bool], poll_s: float = 0.1
) -> str | None:
    """Wait until the GCS at host:port accepts connections and head_alive() says yes.

    Returns None when both came before the deadline (time.monotonic()), else what was missing.
    """
    while True:
        try:
            with socket.create_connection((host, port), timeout=2):
                break
        except OSError as exc:
            if time.monotonic() >= deadline:
                return f"the GCS at {host}:{port} did not answer ({exc})"
            time.sleep(poll_s)
    while True:
        try:
            if head_alive():
                return None
        except Exception as exc:  # an internal API of another Ray version: let `ray start` try
            return f"could not ask the GCS at {host}:{port} for its head node ({exc!r})"
        if time.monotonic() >= deadline:
            return f"the head node did not register with the GCS at {host}:{port}"
        time.sleep(poll_s)


def _gcs_alive(address: str, **selected: Any) -> Callable[[], bool]:
    """A query of whether the GCS at address has an alive node matching selected (a field of
    GetAllNodeInfoRequest.NodeSelector: is_head_node=True, node_id=bytes), through Ray's own
    GCS client."""
    from ray._raylet import GcsClient
    from ray.core.generated.gcs_pb2 import GcsNodeInfo
    from ray.core.generated.gcs_service_pb2 import GetAllNodeInfoRequest

    selector = GetAllNodeInfoRequest.NodeSelector(**selected)
    client: list[Any] = []

    def alive() -> bool:
        if not client:
            client.append(GcsClient(address=address))
        infos = client[0].get_all_node_info(timeout=2, node_selectors=[selector]).values()
        return any(info.state == GcsNodeInfo.GcsNodeState.ALIVE for info in infos)

    return alive


def _gcs_head_alive(address: str) -> Callable[[], bool]:
    return _gcs_alive(address, is_head_node=True)


def _gcs_node_alive(address: str, node_id: str) -> Callable[[], bool]:
    return _gcs_alive(address, node_id=bytes.fromhex(node_id))


def patient_get_node(
    get_node: Callable[[str, str], Any],
    node_alive: Callable[[str, str], Callable[[], bool]],
    wait_s: float = 30.0,
    poll_s: float = 0.1,
) -> Callable[[str, str], Any]:
    """Ray's get_node(gcs_address, node_id), called once node_alive says the node registered.

    `ray start` starts the raylet, waits 0.1 s and asks the GCS for the node's record; finding
    none, Ray's C++ accessor sleeps a whole second before it asks again, and a raylet needs a
    little more than that 0.1 s to register. Polling every poll_s first saves most of that second
    on every node. Whatever goes wrong in the poll (another Ray's internals), and past wait_s,
    Ray's own call decides.
    """

    def patient(gcs_address: str, node_id: str) -> Any:
        try:
            registered = node_alive(gcs_address, node_id)
            deadline = time.monotonic() + wait_s
            while not registered() and time.monotonic() < deadline:
                time.sleep(poll_s)
        except Exception:  # Ray's own get_node reports what is wrong
            pass
        return get_node(gcs_address, node_id)

    return patient


def start(start_args: list[str]) -> int:
    """`ray start start_args` in this process, with Ray's node lookup made patient."""
    import ray._private.services as services
    from ray.scripts.scripts import main as ray_main

    services.get_node = patient_get_node(services.get_node, _gcs_node_alive)
    sys.argv = ["ray", "start", *start_args]
    return int(ray_main() or 0)


def join(gcs: str, wait_s: float, start_args: list[str]) -> int:
    """`ray start start_args` on a worker, once the head at gcs has registered.

    A worker's `ray start` reads the head node's record from the GCS and, finding none yet,
    sleeps two seconds before asking again: a worker started with a new head loses up to that
    much on every miss. Here the wait polls finely; Ray's import, the slow part of `ray start`,
    happens first, while the head is still starting. Then it starts as `start` does.
    """
    import ray.scripts.scripts  # noqa: F401 - the slow import, while the head starts

    deadline = time.monotonic() + wait_s
    host, _, port = gcs.rpartition(":")
    missing = wait_for_head(host.strip("[]"), int(port), deadline, _gcs_head_alive(gcs))
    if missing:
        # `ray start` then tries on its own and says what failed.
        print(f"rlinfra-ray-node: {missing} (waited up to {wait_s:g} s)", file=sys.stderr)
    return start(start_args)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("status")
    stop_parser = sub.add_parser("stop")
    stop_parser.add_argument("--grace-s", type=float, default=15.0)
    start_parser = sub.add_parser("start")
    start_parser.add_argument("start_args", nargs=argparse.REMAINDER)
    join_parser = sub.add_parser("join")
    join_parser.add_argument("--gcs", required=True, help="the head's GCS, HOST:PORT")
    join_parser.add_argument("--wait-s", type=float, default=60.0)
    join_parser.add_argument("start_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.command in ("start", "join"):
        start_args = args.start_args[1:] if args.start_args[:1] == ["--"] else args.start_args
        if args.command == "start":
            return start(start_args)
        return join(args.gcs, args.wait_s, start_args)
    if args.command == "status":
        print(json.dumps(status()))
        return 0
    result = stop(args.grace_s)
    print(json.dumps(result))
    return 1 if result["left"] else 0


if __name__ == "__main__":
    sys.exit(main())
