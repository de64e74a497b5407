"""After training: merge the latest FSDP checkpoint into a Hugging Face model (and push it).

    python -m rlinfra_node.after_training --checkpoint-dir DIR --target DIR
        [--program verl] [--tie-word-embedding] [--hf-upload-path REPO]

Reads ``DIR/latest_checkpointed_iteration.txt`` (Verl writes the last saved step there), then runs
Verl's model merger on that step's actor::

    python -m verl.model_merger merge --backend fsdp [--tie-word-embedding]
        --local_dir DIR/global_step_N/actor --target_dir TARGET [--hf_upload_path REPO]

``--hf_upload_path`` is passed only when ``HF_TOKEN`` is set and non-empty; the token itself stays
in the environment, where the merger's Hub client reads it, never on a command line.
``--tie-word-embedding`` is only for models that tie input and output embeddings (Qwen2.5-0.5B
does, Qwen2.5-7B does not).

The merger runs on CPU as well (it only reads and writes weights), so GPU and CPU clusters
merge the same way.

Re-runs converge: ``TARGET/.rlinfra-merge.json`` records what was merged (step, source, options,
upload); when it says the same merge is done, nothing runs. A target folder that holds files but
no such record was not written here and is refused rather than overwritten.

Exit codes: 0 merged or already merged, 1 no usable checkpoint or the merger failed, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

LATEST_FILE = "latest_checkpointed_iteration.txt"
MARKER = ".rlinfra-merge.json"
VERL_MODULE = "verl.model_merger"
TOKEN_ENV = "HF_TOKEN"


class AfterTrainingError(Exception):
    """A one-line error; ``exit_code`` 1 for a missing/failed step, 2 for bad input."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def latest_step(checkpoint_dir: Path) -> int:
    """The step number in ``checkpoint_dir/latest_checkpointed_iteration.txt``."""
    path = checkpoint_dir / LATEST_FILE
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise AfterTrainingError(
            f"{path}: not found: no checkpoint was saved in {checkpoint_dir} (did training run "
            "to its first save_freq step?)"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise AfterTrainingError(f"{path}: cannot read: {exc}") from exc
    if not text.isdigit():
        shown = text[:40] or "empty"
        raise AfterTrainingError(f"{path}: expected a step number, found {shown!r}")
    return int(text)


def actor_dir(checkpoint_dir: Path, step: int) -> Path:
    """``global_step_<step>/actor`` of ``checkpoint_dir``; an error when it is missing."""
    path = checkpoint_dir / f"global_step_{step}" / "actor"
    if not path.is_dir():
        raise AfterTrainingError(
            f"{path}: not found: {checkpoint_dir / LATEST_FILE} names step {step} but its actor "
            "checkpoint is missing"
        )
    return path


def upload_path(repo: str | None, env: Mapping[str, str]) -> str | None:
    """The Hub repo to push to: ``repo`` when HF_TOKEN is set and non-empty, else None."""
    if repo and env.get(TOKEN_ENV, "").strip():
        return repo
    return None


def merge_argv(
    actor: Path,
    target: Path,
    *,
    tie_word_embedding: bool = False,
    hf_upload_path: str | None = None,
    backend: str = "fsdp",
    python: str = sys.executable,
    merger_module: str = VERL_MODULE,
) -> list[str]:
    """The merger's command line. ``hf_upload_path`` is the effective one (see upload_path)."""
    argv = [python, "-m", merger_module, "merge", "--backend", backend]
    if tie_word_embedding:
        argv.append("--tie-word-embedding")
    argv += ["--local_dir", str(actor), "--target_dir", str(target)]
    if hf_upload_path:
        argv += ["--hf_upload_path", hf_upload_path]
    return argv


def wanted_record(
    step: int,
    actor: Path,
    *,
    backend: str,
    tie_word_embedding: bool,
    hf_upload_path: str | None,
) -> dict[str, Any]:
    return {
        "program": "verl",
        "backend": backend,
        "step": step,
        "actor_dir": str(actor),
        "tie_word_embedding": tie_word_embedding,
        "hf_upload_path": hf_upload_path,
    }


def read_record(target: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((target / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def already_merged(target: Path, wanted: Mapping[str, Any]) -> bool:
    """True when ``target`` records a finished merge with exactly these settings."""
    record = read_record(target)
    if record is None or record.get("state") != "done":
        return False
    return all(record.get(key) == value for key, value in wanted.items())


def _write_record(target: Path, record: Mapping[str, Any]) -> None:
    tmp = target / f"{MARKER}.tmp-{os.getpid()}"
    tmp.write_text(json.dumps(dict(record), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, target / MARKER)


def _prepare_target(target: Path, checkpoint_dir: Path) -> None:
    """An empty ``target``: a folder written by an earlier merge is cleared, a foreign one refused."""
    resolved = target.resolve()
    source = checkpoint_dir.resolve()
    if source == resolved or resolved in source.parents:
        raise AfterTrainingError(
            f"--target {target}: holds the checkpoints ({checkpoint_dir}); give a folder of its own",
            2,
        )
    if target.exists() and not target.is_dir():
        raise AfterTrainingError(f"--target {target}: exists and is not a folder", 2)
    target.mkdir(parents=True, exist_ok=True)
    entries = list(target.iterdir())
    if entries and read_record(target) is None:
        raise AfterTrainingError(
            f"--target {target}: holds files that no earlier merge wrote; remove them or give "
            "another folder",
            2,
        )
    for entry in entries:
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


Runner = Callable[[list[str]], int]


def _run(argv: list[str]) -> int:
    # The environment (HF_TOKEN included) is inherited; nothing secret is in argv.
    return subprocess.run(argv, check=False).returncode


def after_training(
    checkpoint_dir: Path,
    target: Path,
    *,
    tie_word_embedding: bool = False,
    hf_upload_path: str | None = None,
    backend: str = "fsdp",
    env: Mapping[str, str] | None = None,
    python: str = sys.executable,
    merger_module: str = VERL_MODULE,
    run: Runner = _run,
    log: Callable[[str], None] = print,
) -> bool:
    """Merge the latest checkpoint into ``target``. Returns False when it was already there."""
    env = os.environ if env is None else env
    step = latest_step(checkpoint_dir)
    actor = actor_dir(checkpoint_dir, step)
    upload = upload_path(hf_upload_path, env)
    if hf_upload_path and upload is None:
        log(f"after_training: {TOKEN_ENV} is not set: not uploading to {hf_upload_path}")
    wanted = wanted_record(
        step,
        actor,
        backend=backend,
        tie_word_embedding=tie_word_embedding,
        hf_upload_path=upload,
    )
    if already_merged(target, wanted):
        log(f"after_training: {target} already holds the merge of step {step}; nothing to do")
        return False
    argv = merge_argv(
        actor,
        target,
        tie_word_embedding=tie_word_embedding,
        hf_upload_path=upload,
        backend=backend,
        python=python,
        merger_module=merger_module,
    )
    _prepare_target(target, checkpoint_dir)
    _write_record(target, {**wanted, "state": "merging"})
    log(f"after_training: merging step {step}: {' '.join(argv)}")
    code = run(argv)
    if code != 0:
        raise AfterTrainingError(
            f"the merger exited with {code} (step {step}, {actor} -> {target})"
        )
    _write_record(target, {**wanted, "state": "done"})
    where = f" and uploaded to {upload}" if upload else ""
    log(f"after_training: merged step {step} into {target}{where}")
    return True


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m rlinfra_node.after_training",
        description="Merge the latest FSDP checkpoint into a Hugging Face model.",
    )
    parser.add_argument("--checkpoint-dir", required=True, type=Path)
    parser.add_argument("--target", required=True, type=Path)
    # Verl's merger is the only one (on GPU and CPU clusters alike); the flag stays for jobs
    # rendered with it.
    parser.add_argument("--program", choices=("verl",), default="verl")
    parser.add_argument("--backend", choices=("fsdp", "megatron"), default="fsdp")
    parser.add_argument("--tie-word-embedding", action="store_true")
    parser.add_argument(
        "--hf-upload-path",
        help=f"Hub repo to push the merged model to (only when {TOKEN_ENV} is set)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        after_training(
            args.checkpoint_dir,
            args.target,
            tie_word_embedding=args.tie_word_embedding,
            hf_upload_path=args.hf_upload_path,
            backend=args.backend,
            log=lambda line: print(line, flush=True),
        )
    except AfterTrainingError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
