"""The driver's shape, before and after a change of its layout: import cycles, the largest
modules, repeated code, `rlinfra --help` start-up and render's cost in nodes.

    python bench/house.py --base REV [--runs N]

REV (the tree before the change) is checked out into a temporary git worktree; both trees are
measured in this one run, on this machine, one after the other (render only for this tree: its
API is this tree's). Writes bench/results/house.json and house.md; a hand-written
"## Notes" section of house.md is kept.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
NOTES = "## Notes"

# Run inside the measured tree's interpreter path: the import graph of its packages (grimp,
# which also counts imports inside functions and behind TYPE_CHECKING) and its cycles.
GRAPH = r"""
import json, sys
import grimp

graph = grimp.build_graph("rlinfra", "rlinfra_node", cache_dir=None)
modules = sorted(graph.modules)
edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in modules}
index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]
sys.setrecursionlimit(10000)


def visit(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on.add(v)
    for w in edges[v]:
        if w not in index:
            visit(w)
            low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop()
            on.discard(w)
            comp.append(w)
            if w == v:
                break
        if len(comp) > 1:
            sccs.append(sorted(comp))


for m in modules:
    if m not in index:
        visit(m)
print(json.dumps({"modules": len(modules), "imports": sum(map(len, edges.values())),
                  "cycles": sccs}))
"""


def _tree_env(driver: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(driver)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _json_from_tree(driver: Path, code: str, *args: str) -> dict[str, Any]:
    """What ``code`` prints as JSON, run by this interpreter on the tree's packages."""
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=_tree_env(driver),
        capture_output=True,
        text=True,
        check=True,
        cwd=tempfile.gettempdir(),
    )
    return dict(json.loads(done.stdout))


def import_graph(driver: Path) -> dict[str, Any]:
    return _json_from_tree(driver, GRAPH)


def largest_modules(driver: Path, most: int = 10) -> list[tuple[str, int]]:
    sizes = [
        (str(path.relative_to(driver)), len(path.read_text().splitlines()))
        for path in driver.rglob("*.py")
        if "__pycache__" not in path.parts
    ]
    return sorted(sizes, key=lambda row: -row[1])[:most]


def duplicate_pairs(driver: Path) -> str | None:
    """The first line of the `duplicates` tool's report on the driver (None without the tool)."""
    tool = shutil.which("duplicates")
    if tool is None:
        return None
    done = subprocess.run(
        [tool, "--repo", str(driver), "--most", "1", "--seconds", "120"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.splitlines()[0] if done.stdout else None


def help_ms(driver: Path, runs: int) -> dict[str, float]:
    """`rlinfra --help` as a new process, the tree's CLI, median and minimum of ``runs``."""
    code = "import sys; sys.argv = ['rlinfra', '--help']; from rlinfra.cli import main; main()"
    env = _tree_env(driver)
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            capture_output=True,
            check=False,
            cwd=tempfile.gettempdir(),
        )
        samples.append(time.perf_counter() - start)
    return {"median_ms": statistics.median(samples) * 1e3, "min_ms": min(samples) * 1e3}


RENDER = r"""
import json, statistics, sys, time
from pathlib import Path

from rlinfra.clouds.planning import make_plan
from rlinfra.context import Context, Controller
from rlinfra.profile import Overrides, apply_overrides, load_profile
from rlinfra.render import render

ctx = Context(Path("/srv/bench"), Path("/srv"), Path("/srv/cache"), "ssh-ed25519 AAAA bench",
              "bench", Controller("/usr/bin/uv", "/usr/bin/python3", None))
out = {}
for cloud, name in (("local", "local"), ("aws", "h100x2"), ("gcp", "h100x8-gcp")):
    row = {}
    for nodes in (1, 8, 64):
        profile, source = load_profile(name)
        profile, _ = apply_overrides(
            profile, Overrides(num_nodes=nodes, cloud=cloud if cloud == "aws" else None), source)
        samples = []
        for _ in range(int(sys.argv[1])):
            start = time.perf_counter()
            render(make_plan(profile, source), ctx)
            samples.append(time.perf_counter() - start)
        row[str(nodes)] = statistics.median(samples) * 1e3
    row["ratio_64_vs_1"] = row["64"] / row["1"]
    out[cloud] = row
print(json.dumps(out))
"""


def render_ms(driver: Path, runs: int) -> dict[str, Any]:
    return _json_from_tree(driver, RENDER, str(runs))


def measure(driver: Path, runs: int, render: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "graph": import_graph(driver),
        "largest": largest_modules(driver),
        "duplicates": duplicate_pairs(driver),
        "help": help_ms(driver, runs),
    }
    if render:
        out["render_ms"] = render_ms(driver, runs)
    return out


def markdown(results: dict[str, Any], notes: str) -> str:
    before, after = results["before"], results["after"]
    lines = [
        "# The driver's layout, before and after",
        "",
        f"Measured {results['date']} on {results['machine']} ({results['cpus']} CPUs); before "
        f"is {results['base']}, after is {results['head']}. Both in this one run.",
        "",
        "| | before | after |",
        "|---|---|---|",
        f"| modules (rlinfra + rlinfra_node) | {before['graph']['modules']} | "
        f"{after['graph']['modules']} |",
        f"| import cycles (strongly connected groups) | {len(before['graph']['cycles'])} | "
        f"{len(after['graph']['cycles'])} |",
        f"| modules in a cycle | {sum(map(len, before['graph']['cycles']))} | "
        f"{sum(map(len, after['graph']['cycles']))} |",
        f"| `rlinfra --help`, median ms | {before['help']['median_ms']:.0f} | "
        f"{after['help']['median_ms']:.0f} |",
        f"| `duplicates` on driver/ | {before['duplicates']} | {after['duplicates']} |",
        "",
        "Cycles before: " + ("; ".join(" - ".join(c) for c in before["graph"]["cycles"]) or "none"),
        "",
        "Cycles after: " + ("; ".join(" - ".join(c) for c in after["graph"]["cycles"]) or "none"),
        "",
        "## The largest modules",
        "",
        "| before | lines | after | lines |",
        "|---|---|---|---|",
    ]
    for (b_name, b_lines), (a_name, a_lines) in zip(
        before["largest"], after["largest"], strict=False
    ):
        lines.append(f"| {b_name} | {b_lines} | {a_name} | {a_lines} |")
    lines += ["", "## render (after), ms per plan + render", "", "| cloud | 1 | 8 | 64 | 64/1 |"]
    lines.append("|---|---|---|---|---|")
    for cloud, row in after["render_ms"].items():
        lines.append(
            f"| {cloud} | {row['1']:.1f} | {row['8']:.1f} | {row['64']:.1f} | "
            f"{row['ratio_64_vs_1']:.2f}x |"
        )
    text = "\n".join(lines) + "\n"
    return text + ("\n" + notes if notes else "")


def _kept_notes(path: Path) -> str:
    if not path.is_file():
        return ""
    text = path.read_text()
    return text[text.index(NOTES) :] if NOTES in text else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the commit to compare with")
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="rlinfra-house-") as tmp:
        base = Path(tmp) / "base"
        subprocess.run(
            ["git", "worktree", "add", "--detach", "-q", str(base), args.base],
            cwd=REPO,
            check=True,
        )
        try:
            results = {
                "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                "machine": platform.platform(),
                "cpus": os.cpu_count(),
                "base": args.base,
                "head": head,
                "before": measure(base / "driver", args.runs, render=False),
                "after": measure(REPO / "driver", args.runs, render=True),
            }
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(base)], cwd=REPO, check=False
            )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "house.json").write_text(json.dumps(results, indent=2) + "\n")
    md = RESULTS / "house.md"
    md.write_text(markdown(results, _kept_notes(md)))
    sys.stdout.write(md.read_text())


if __name__ == "__main__":
    main()
