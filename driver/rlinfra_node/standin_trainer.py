"""A CPU stand-in for ``python -m verl.trainer.main_ppo`` on clusters without GPUs.

It stands in for Verl's trainer, not for RL: it takes the same Hydra ``key=value`` overrides,
trains a small linear model data-parallel across every node of the Ray cluster (one Ray task per
node computes the gradient of its shard; the driver averages them), and saves checkpoints in
Verl's layout, so everything around the trainer (job submission, logs, the bucket mount, resume,
merge, serving) runs for real on CPU hosts::

    <trainer.default_local_dir>/global_step_<N>/actor/model.pt
    <trainer.default_local_dir>/global_step_<N>/actor/huggingface/config.json
    <trainer.default_local_dir>/latest_checkpointed_iteration.txt   (written last, atomically)

Overrides it reads: trainer.default_local_dir, trainer.resume_mode (auto: resume from the
latest step), trainer.total_epochs, trainer.total_training_steps, trainer.save_freq,
trainer.nnodes, trainer.experiment_name, actor_rollout_ref.actor.optim.lr,
data.train_batch_size. Every other override is accepted and ignored (they were checked against
Verl's config before submission). ``RLINFRA_STANDIN_STEPS_PER_EPOCH`` (default 4) sets the
epoch length. Secrets are never printed: it reports which of the usual ones it was given, by
name only.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

LATEST_FILE = "latest_checkpointed_iteration.txt"
FEATURES = 16
SECRET_NAMES = ("WANDB_API_KEY", "HF_TOKEN")


def parse_overrides(argv: Sequence[str]) -> dict[str, str]:
    """``key=value`` items (Hydra's +/++ prefixes dropped); flags such as --config-name skipped."""
    out: dict[str, str] = {}
    for item in argv:
        if item.startswith("-") or "=" not in item:
            continue
        key, value = item.split("=", 1)
        out[key.lstrip("+~")] = value
    return out


def _int(overrides: dict[str, str], key: str, default: int) -> int:
    value = overrides.get(key, "")
    if value in ("", "null", "None"):
        return default
    try:
        return int(value)
    except ValueError:
        raise SystemExit(f"standin_trainer: {key}={value!r} is not an integer") from None


def latest_step(checkpoint_dir: Path) -> int:
    path = checkpoint_dir / LATEST_FILE
    if not path.is_file():
        return 0
    text = path.read_text().strip()
    return int(text) if text.isdigit() else 0


def count_rows(path: Path) -> int:
    """Rows of a parquet file of Verl's rows (its prompt column must be there)."""
    import pyarrow.parquet as pq

    if not path.is_file():
        raise SystemExit(f"standin_trainer: {path}: no such file (did the data step run?)")
    table = pq.read_table(path)
    if "prompt" not in table.column_names:
        raise SystemExit(f"standin_trainer: {path}: not Verl's rows (no 'prompt' column)")
    return int(table.num_rows)


def save_checkpoint(
    checkpoint_dir: Path, step: int, state: dict[str, Any], meta: dict[str, Any]
) -> None:
    """Verl's layout; the step file is replaced last, after the checkpoint is flushed to disk."""
    import torch

    actor = checkpoint_dir / f"global_step_{step}" / "actor"
    (actor / "huggingface").mkdir(parents=True, exist_ok=True)
    model = actor / "model.pt"
    torch.save(state, model)
    (actor / "huggingface" / "config.json").write_text(json.dumps(meta, indent=2) + "\n")
    for path in (model, actor / "huggingface" / "config.json"):
        with open(path, "rb") as handle:
            os.fsync(handle.fileno())
    tmp = checkpoint_dir / (LATEST_FILE + ".tmp")
    tmp.write_text(f"{step}\n")
    with open(tmp, "rb") as handle:
        os.fsync(handle.fileno())
    tmp.replace(checkpoint_dir / LATEST_FILE)


def _shard_gradient(weights: list[float], seed: int, batch: int) -> tuple[list[float], float, str]:
    """Gradient of the mean squared error on one node's shard (a Ray task runs this)."""
    import socket

    import torch

    generator = torch.Generator().manual_seed(seed)
    true_w = torch.linspace(-1.0, 1.0, FEATURES)
    x = torch.randn(batch, FEATURES, generator=generator)
    y = x @ true_w
    w = torch.tensor(weights, requires_grad=True)
    loss = ((x @ w - y) ** 2).mean()
    loss.backward()
    assert w.grad is not None
    return (
        w.grad.tolist(),
        float(loss),
        socket.gethostname() + "/" + os.environ.get("RLINFRA_NODE_RANK", "?"),
    )


def train(overrides: dict[str, str], log: Any = print) -> int:
    import ray
    import torch
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    checkpoint_dir = Path(overrides.get("trainer.default_local_dir", "checkpoints"))
    resume = overrides.get("trainer.resume_mode", "auto")
    nnodes = _int(overrides, "trainer.nnodes", 1)
    epochs = _int(overrides, "trainer.total_epochs", 1)
    steps_per_epoch = int(os.environ.get("RLINFRA_STANDIN_STEPS_PER_EPOCH", "4"))
    total = _int(overrides, "trainer.total_training_steps", epochs * steps_per_epoch)
    save_freq = _int(overrides, "trainer.save_freq", steps_per_epoch)
    lr = float(overrides.get("actor_rollout_ref.actor.optim.lr", "0.05") or "0.05")
    lr = max(lr, 0.05)  # the stand-in's model needs a visible step to show a falling loss
    batch = max(8, _int(overrides, "data.train_batch_size", 64) // max(nnodes, 1))

    for key in ("data.train_files", "data.val_files"):
        path = overrides.get(key)
        if path:
            log(f"standin_trainer: {key}: {count_rows(Path(path))} rows in {path}")

    given = [name for name in SECRET_NAMES if os.environ.get(name)]
    log(f"standin_trainer: secrets in the environment: {', '.join(given) or 'none'}")

    ray.init(address="auto", log_to_driver=False)
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    if len(nodes) < nnodes:
        raise SystemExit(
            f"standin_trainer: trainer.nnodes={nnodes} but the Ray cluster has {len(nodes)} "
            "alive node(s)"
        )
    nodes = sorted(nodes, key=lambda n: n["NodeManagerAddress"])[:nnodes]
    task = ray.remote(num_cpus=0)(_shard_gradient)

    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    step = latest_step(checkpoint_dir) if resume == "auto" else 0
    weights = torch.zeros(FEATURES)
    if step:
        state = torch.load(
            checkpoint_dir / f"global_step_{step}" / "actor" / "model.pt", weights_only=True
        )
        weights = state["weight"]
        log(f"standin_trainer: resumed from step {step} in {checkpoint_dir}")
    if step >= total:
        log(f"standin_trainer: step {step} of {total}: training is already complete")
        return 0
    log(
        f"standin_trainer: {nnodes} node(s), steps {step + 1}..{total}, save every {save_freq}, "
        f"checkpoints in {checkpoint_dir}"
    )
    while step < total:
        step += 1
        refs = [
            task.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
            ).remote(weights.tolist(), seed=step * 1000 + rank, batch=batch)
            for rank, node in enumerate(nodes)
        ]
        results = ray.get(refs, timeout=300)
        grad = torch.tensor([r[0] for r in results]).mean(dim=0)
        loss = sum(r[1] for r in results) / len(results)
        weights = weights - lr * grad
        where = ",".join(r[2] for r in results)
        log(f"step:{step} epoch:{(step - 1) // steps_per_epoch + 1} loss:{loss:.6f} nodes:{where}")
        if step % save_freq == 0 or step == total:
            meta = {
                "model_type": "rlinfra-standin-linear",
                "features": FEATURES,
                "step": step,
                "experiment": overrides.get("trainer.experiment_name", ""),
                "saved_at": time.time(),
            }
            save_checkpoint(checkpoint_dir, step, {"weight": weights}, meta)
            log(f"standin_trainer: saved global_step_{step}")
    log(f"standin_trainer: done at step {step}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    overrides = parse_overrides(sys.argv[1:] if argv is None else argv)
    return train(overrides, log=lambda text: print(text, flush=True))


if __name__ == "__main__":
    sys.exit(main())
