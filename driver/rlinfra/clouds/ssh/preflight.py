"""Preflight of the `ssh` cloud: what each existing host must be before rlinfra changes anything.

One read-only probe per host (a POSIX shell script on SSH's standard input), all hosts at once;
its ``key=value`` lines are parsed (``parse_probe``) and judged (``judge``) without touching
anything, so both are unit-tested from text alone. Every problem of a host goes on one line.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rlinfra import layout

# Runs as the login user; reads only. Each fact on a line of its own, as key=value.
PROBE = r"""
export LC_ALL=C
echo "uid=$(id -u)"
if [ "$(id -u)" = 0 ]; then echo sudo=root
elif sudo -n true >/dev/null 2>&1; then echo sudo=yes
else echo sudo=no; fi
if [ -r /etc/os-release ]; then . /etc/os-release; fi
echo "os=${ID:-unknown}"
echo "os_like=${ID_LIKE:-}"
echo "os_version=${VERSION_ID:-}"
echo "python=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo none)"
d=/opt; [ -d /opt ] || d=/
echo "disk_free_kb=$(df -Pk "$d" 2>/dev/null | awk 'NR == 2 {print $4}')"
if command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')"
  echo "gpu_names=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | tr '\n' ';')"
else echo gpus=none; fi
echo "listening=$( { ss -Hltn 2>/dev/null || true; } | awk '{print $4}' | sed 's/.*://' | sort -un | tr '\n' ' ')"
# printf, not echo: sh's echo turns the contract's JSON escapes (\n, \") into characters.
printf 'contract=%s\n' "$( { tr -d '\n' < @CONTRACT@; } 2>/dev/null)"
echo "installed=$(ls -A @ROOT@ 2>/dev/null | tr '\n' ' ')"
echo "ray=$(ps -eo comm=,args= 2>/dev/null | awk '$1 == "raylet" || $1 == "gcs_server" {print $1 ":" $2}' | tr '\n' ' ')"
echo "clock=$(date +%s.%N)"
echo "probe=done"
""".replace("@CONTRACT@", layout.CONTRACT).replace("@ROOT@", layout.ROOT)

# What rlinfra's own Ray runs from; any other raylet or GCS is a Ray that rlinfra did not start.
RLINFRA_ROOT = f"{layout.ROOT}/"
# Ansible's modules need this Python on every host; `software.python: system` needs 3.10.
MIN_PYTHON = (3, 8)
MIN_SYSTEM_PYTHON = (3, 10)
SUPPORTED_OS = ("debian", "ubuntu")


@dataclass(frozen=True)
class Facts:
    """What the probe found on one host (None: not reported)."""

    uid: int | None = None
    sudo: str = ""
    os: str = ""
    os_like: str = ""
    os_version: str = ""
    python: tuple[int, int] | None = None
    disk_free_gb: float | None = None
    gpus: int | None = None
    # Each GPU's name as nvidia-smi gives it ("NVIDIA H100 80GB HBM3").
    gpu_names: tuple[str, ...] = ()
    listening: frozenset[int] = frozenset()
    # The cluster named by the host's node contract (/opt/rlinfra/node.json); "" when none.
    contract_cluster: str = ""
    installed: tuple[str, ...] = ()
    # (process name, executable) of each raylet and GCS server.
    ray: tuple[tuple[str, str], ...] = ()
    clock: float | None = None
    complete: bool = False


def _cluster_of(contract: str) -> str:
    """The cluster a node contract (node.json) names; "?" when it names none that can be read."""
    try:
        data = json.loads(contract)
    except ValueError:
        return "?"
    if not isinstance(data, dict):
        return "?"
    for key in ("RLINFRA_CLUSTER_INFO", "SKYPILOT_CLUSTER_INFO"):
        info = data.get(key)
        try:
            parsed = json.loads(info) if isinstance(info, str) else info
        except ValueError:
            continue
        if isinstance(parsed, dict) and parsed.get("cluster"):
            return str(parsed["cluster"])
    return "?"


def parse_probe(text: str) -> Facts:
    """The probe's output as Facts; lines it does not know are ignored."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.isidentifier():
            values[key] = value.strip()

    def number(key: str) -> float | None:
        try:
            return float(values[key])
        except (KeyError, ValueError):
            return None

    python = None
    major, _, minor = values.get("python", "").partition(".")
    if major.isdigit() and minor.isdigit():
        python = (int(major), int(minor))
    free_kb = number("disk_free_kb")
    gpus_text = values.get("gpus", "")
    ray = []
    for item in values.get("ray", "").split():
        name, _, exe = item.partition(":")
        ray.append((name, exe))
    contract = values.get("contract", "")
    uid = number("uid")
    return Facts(
        uid=int(uid) if uid is not None else None,
        sudo=values.get("sudo", ""),
        os=values.get("os", ""),
        os_like=values.get("os_like", ""),
        os_version=values.get("os_version", ""),
        python=python,
        disk_free_gb=free_kb / 2**20 if free_kb is not None else None,
        gpus=0 if gpus_text == "none" else int(gpus_text) if gpus_text.isdigit() else None,
        gpu_names=tuple(n.strip() for n in values.get("gpu_names", "").split(";") if n.strip()),
        listening=frozenset(int(p) for p in values.get("listening", "").split() if p.isdigit()),
        contract_cluster=_cluster_of(contract) if contract else "",
        installed=tuple(values.get("installed", "").split()),
        ray=tuple(ray),
        clock=number("clock"),
        complete=values.get("probe") == "done",
    )


@dataclass(frozen=True)
class Expect:
    """What the plan asks of every host."""

    cluster: str
    gpus_per_node: int
    min_free_gb: float
    max_clock_skew_s: float
    # Ports every node's Ray needs, and those only the head's services need.
    ports: tuple[int, ...]
    head_ports: tuple[int, ...] = ()
    system_python: bool = False
    take_over: bool = False


@dataclass(frozen=True)
class Verdict:
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _version(value: tuple[int, int]) -> str:
    return f"{value[0]}.{value[1]}"


def judge(facts: Facts, expect: Expect, head: bool, sent: float, answered: float) -> Verdict:
    """The problems (refusals) and notes of one host. ``sent``/``answered``: this machine's clock
    when the probe was started and when its answer came (the host's clock must fall between,
    give or take the allowed skew)."""
    problems: list[str] = []
    notes: list[str] = []
    if not facts.complete:
        return Verdict(["the probe did not finish (a shell without sh, df or ps?)"])
    if facts.uid != 0 and facts.sudo != "yes":
        problems.append("not root and no passwordless sudo (`sudo -n true` fails)")
    family = {facts.os, *facts.os_like.split()}
    if not family & set(SUPPORTED_OS):
        problems.append(
            f"OS {facts.os or 'unknown'} {facts.os_version} is not supported "
            f"({', '.join(SUPPORTED_OS)} and their derivatives are)"
        )
    need = MIN_SYSTEM_PYTHON if expect.system_python else MIN_PYTHON
    if facts.python is None:
        problems.append(f"no python3 (needs {_version(need)} or newer)")
    elif facts.python < need:
        why = " for software.python: system" if expect.system_python else ""
        problems.append(
            f"python3 is {_version(facts.python)}, needs {_version(need)} or newer{why}"
        )
    if facts.disk_free_gb is None:
        problems.append("free disk under /opt unknown (df failed)")
    elif facts.disk_free_gb < expect.min_free_gb:
        problems.append(
            f"{facts.disk_free_gb:.1f} GB free under /opt, needs {expect.min_free_gb:g} GB "
            "(ssh.min_free_gb)"
        )
    if facts.gpus is None:
        problems.append("nvidia-smi is there but its GPU count could not be read")
    elif expect.gpus_per_node and facts.gpus != expect.gpus_per_node:
        problems.append(
            f"{facts.gpus} GPU(s) seen by nvidia-smi, the profile declares "
            f"{expect.gpus_per_node} per node"
        )
    elif not expect.gpus_per_node and facts.gpus:
        notes.append(
            f"{facts.gpus} GPU(s) seen; the profile declares none (resources.accelerators), "
            "so the cluster does not use them"
        )
    ours = facts.contract_cluster == expect.cluster
    other = facts.contract_cluster and not ours
    foreign_ray = [exe for _, exe in facts.ray if not exe.startswith(RLINFRA_ROOT)]
    if other and not expect.take_over:
        problems.append(
            f"runs rlinfra cluster {facts.contract_cluster!r} (node contract "
            "/opt/rlinfra/node.json); `up --take-over` takes the host over"
        )
    if foreign_ray and not expect.take_over:
        problems.append(
            f"runs a Ray that rlinfra did not start ({foreign_ray[0]}); "
            "`up --take-over` stops it and takes the host over"
        )
    if not ours and not expect.take_over:
        wanted = set(expect.ports) | (set(expect.head_ports) if head else set())
        busy = sorted(wanted & facts.listening)
        if busy:
            problems.append(
                "port(s) " + ", ".join(str(p) for p in busy) + " already in use (the cluster's "
                "Ray and service ports, network.ray and serving)"
            )
    if facts.clock is None:
        problems.append("clock unknown (date failed)")
    else:
        skew = max(sent - facts.clock, facts.clock - answered, 0.0)
        if skew > expect.max_clock_skew_s:
            ahead = "ahead of" if facts.clock > answered else "behind"
            problems.append(
                f"clock {skew:.1f} s {ahead} this machine's (at most "
                f"{expect.max_clock_skew_s:g} s, ssh.max_clock_skew_s): sync it (NTP)"
            )
    return Verdict(problems, notes)


@dataclass(frozen=True)
class Answer:
    """One host's probe run: its output, or why there is none, and this machine's clock."""

    output: str
    sent: float
    answered: float
    error: str = ""


def probe_host(argv: list[str], timeout: float = 30.0) -> Answer:
    """Run the probe with ``argv`` (ssh ... host 'sh -s'); never raises for the host's sake."""
    sent = time.time()
    try:
        done = subprocess.run(
            argv, input=PROBE, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return Answer("", sent, time.time(), f"no answer within {timeout:g} s")
    answered = time.time()
    if done.returncode == 255:
        reason = (done.stderr.strip().splitlines() or ["ssh failed"])[-1]
        return Answer("", sent, answered, f"unreachable over SSH ({reason})")
    return Answer(done.stdout, sent, answered)


def check_hosts(
    names: list[str], ask: Callable[[int], Answer], expect: Expect
) -> tuple[list[str], list[str]]:
    """Every host probed at once; (one line per failing host, one per note)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(32, max(1, len(names)))) as pool:
        answers = list(pool.map(ask, range(len(names))))
    failing: list[str] = []
    notes: list[str] = []
    for index, (name, answer) in enumerate(zip(names, answers, strict=True)):
        if answer.error:
            failing.append(f"{name}: {answer.error}")
            continue
        verdict = judge(
            parse_probe(answer.output), expect, index == 0, answer.sent, answer.answered
        )
        if verdict.problems:
            failing.append(f"{name}: " + "; ".join(verdict.problems))
        notes += [f"{name}: {note}" for note in verdict.notes]
    return failing, notes
