"""Figures of a bench/gpu/verl/run.sh run, from the files it left in OUT:

    python bench/gpu/verl/summarise.py OUT [--cpu CPU_LOG] > bench/gpu/verl/results.json

Verl's console step lines (``step:N - key:value - ...``) of the first job (job.txt) and of the
resume (resume.txt); the peak of the GPU memory sampled each second (gpu_mem.csv); the NaN
diagnosis (nan_check.txt); the merged model's load check (load.txt). ``--cpu`` adds the step
time of the same config on CPU from that run's log.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

KEYS = (
    "timing_s/step",
    "timing_s/gen",
    "timing_s/update_actor",
    "timing_s/update_critic",
    "perf/throughput",
    "perf/max_memory_allocated_gb",
    "perf/max_memory_reserved_gb",
    "perf/mfu/actor",
    "actor/grad_norm",
    "critic/grad_norm",
    "critic/vf_loss",
    "actor/entropy",
    "response_length/mean",
    "perf/total_num_tokens",
)


def steps(text: str) -> dict[int, dict[str, float]]:
    found: dict[int, dict[str, float]] = {}
    for match in re.finditer(r"step:(\d+) - (.*)", text):
        pairs = re.findall(
            r"([\w/@.-]+):(?:np\.float\d+\()?(-?[0-9.]+(?:e[-+]?\d+)?|nan)", match[2]
        )
        found[int(match[1])] = {key: float(value) for key, value in pairs}
    return found


def _median(rows: list[dict[str, float]], key: str) -> float | None:
    values = [row[key] for row in rows if key in row]
    return statistics.median(values) if values else None


def summary(rows: dict[int, dict[str, float]], skip_first: bool = True) -> dict[str, object]:
    ordered = [rows[n] for n in sorted(rows)]
    timed = ordered[1:] if skip_first and len(ordered) > 1 else ordered
    return {
        "steps": sorted(rows),
        "median_excluding_step_1": {key: _median(timed, key) for key in KEYS},
        "finite_grad_norm_steps": sum(
            1
            for row in ordered
            if row.get("actor/grad_norm") == row.get("actor/grad_norm")
            and row.get("critic/grad_norm") == row.get("critic/grad_norm")
        ),
        "critic_vf_loss_first_last": [
            ordered[0].get("critic/vf_loss"),
            ordered[-1].get("critic/vf_loss"),
        ]
        if ordered
        else None,
    }


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--cpu", type=Path)
    args = parser.parse_args()
    out: Path = args.out
    result: dict[str, object] = {"env": _read(out / "env.txt").strip().splitlines()}
    for name in ("job", "resume"):
        text = _read(out / f"{name}.txt")
        result[name] = {
            **summary(steps(text)),
            "runner": [line for line in text.splitlines() if line.startswith("job_runner:")],
            "exit": [line for line in text.splitlines() if re.match(r"(job|resume) rc=", line)],
            "resumed_from": re.findall(r"Resuming from (\S+)", text)[:1]
            or re.findall(r"Load from checkpoint folder: (\S+)", text)[:1],
        }
    used = [
        float(line.split(",")[1])
        for line in _read(out / "gpu_mem.csv").splitlines()
        if line.count(",") == 1 and line.split(",")[1].strip().isdigit()
    ]
    result["gpu_memory_used_peak_mib"] = max(used) if used else None
    result["nan_check"] = [
        json.loads(line)
        for line in _read(out / "nan_check.txt").splitlines()
        if line.startswith("{")
    ]
    result["load_check"] = _read(out / "load.txt").strip().splitlines()[-3:]
    if args.cpu:
        result["cpu_same_config"] = summary(steps(_read(args.cpu)), skip_first=False)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
