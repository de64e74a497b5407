"""rlinfra_node.after_training: latest-step detection, the merger's argv, HF_TOKEN, re-runs.

Verl's real merger runs in tests/verl and in the end-to-end job on real checkpoints; these tests
check the wrapper's decisions with a small fake merger written by the test (same command line as
``verl.model_merger merge``) run as a real subprocess. It records its argv and whether it saw
HF_TOKEN in its environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlinfra_node import after_training as at

TOKEN = "hf_canary_do_not_leak_123"

FAKE_MERGER = textwrap.dedent(
    """
    import argparse, json, os, sys
    from pathlib import Path

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="operation", required=True)
    merge = sub.add_parser("merge")
    merge.add_argument("--backend", required=True, choices=["fsdp", "megatron"])
    merge.add_argument("--tie-word-embedding", action="store_true")
    merge.add_argument("--local_dir", required=True)
    merge.add_argument("--target_dir", required=True)
    merge.add_argument("--hf_upload_path", default=None)
    args = parser.parse_args()
    local = Path(args.local_dir)
    calls = Path(os.environ["FAKE_MERGER_CALLS"])
    with calls.open("a") as log:
        log.write(json.dumps({"argv": sys.argv[1:], "token_in_env": bool(os.environ.get("HF_TOKEN"))}) + "\\n")
    if (local / "FAIL").exists():
        sys.exit(3)
    target = Path(args.target_dir)
    target.mkdir(parents=True, exist_ok=True)
    (target / "config.json").write_text(json.dumps({"from": str(local)}))
    (target / "model.safetensors").write_bytes((local / "weights.bin").read_bytes())
    """
)


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake merger module on PYTHONPATH; returns the file its calls are logged to."""
    pkg = tmp_path / "fakepath"
    pkg.mkdir()
    (pkg / "fake_merger.py").write_text(FAKE_MERGER)
    calls = tmp_path / "calls.jsonl"
    paths = [str(pkg), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    monkeypatch.setenv("FAKE_MERGER_CALLS", str(calls))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return calls


def calls_of(log: Path) -> list[dict[str, object]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def checkpoints(root: Path, steps: list[int], latest: int | str) -> Path:
    for step in steps:
        actor = root / f"global_step_{step}" / "actor"
        actor.mkdir(parents=True)
        (actor / "weights.bin").write_bytes(f"weights of step {step}".encode())
    (root / at.LATEST_FILE).write_text(f"{latest}\n")
    return root


def merge(ckpt: Path, target: Path, **kwargs: object) -> bool:
    return at.after_training(
        ckpt,
        target,
        merger_module="fake_merger",
        log=lambda _: None,
        **kwargs,  # type: ignore[arg-type]
    )


# --- pure functions ---


def test_latest_step_reads_verls_tracker_file(tmp_path: Path) -> None:
    (tmp_path / at.LATEST_FILE).write_text("120\n")
    assert at.latest_step(tmp_path) == 120


def test_latest_step_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(
        at.AfterTrainingError, match="latest_checkpointed_iteration.txt: not found"
    ) as err:
        at.latest_step(tmp_path)
    assert str(tmp_path) in str(err.value) and err.value.exit_code == 1


@pytest.mark.parametrize("text", ["", "abc", "-3", "3.5", "10 20", "global_step_5"])
def test_latest_step_garbled_file_is_an_error(tmp_path: Path, text: str) -> None:
    (tmp_path / at.LATEST_FILE).write_text(text)
    with pytest.raises(at.AfterTrainingError, match="expected a step number"):
        at.latest_step(tmp_path)


def test_actor_folder_of_the_named_step_must_exist(tmp_path: Path) -> None:
    checkpoints(tmp_path, [5], latest=10)
    assert at.actor_dir(tmp_path, 5) == tmp_path / "global_step_5" / "actor"
    with pytest.raises(
        at.AfterTrainingError, match="global_step_10/actor: not found.*names step 10"
    ):
        at.actor_dir(tmp_path, 10)


def test_verl_argv_matches_verls_merger_flags() -> None:
    argv = at.merge_argv(Path("/ck/global_step_7/actor"), Path("/ck/hf_model"), python="py")
    assert argv == [
        "py",
        "-m",
        "verl.model_merger",
        "merge",
        "--backend",
        "fsdp",
        "--local_dir",
        "/ck/global_step_7/actor",
        "--target_dir",
        "/ck/hf_model",
    ]
    tied = at.merge_argv(
        Path("/a"),
        Path("/t"),
        tie_word_embedding=True,
        hf_upload_path="me/model",
        python="py",
    )
    assert tied[3:] == [
        "merge",
        "--backend",
        "fsdp",
        "--tie-word-embedding",
        "--local_dir",
        "/a",
        "--target_dir",
        "/t",
        "--hf_upload_path",
        "me/model",
    ]


def test_verl_flag_names_exist_in_the_installed_merger() -> None:
    """The flags we pass are the ones verl.model_merger's parser defines (read from its source)."""
    import importlib.util

    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("verl is not installed in this venv")
    source = (
        Path(next(iter(spec.submodule_search_locations))) / "model_merger" / "base_model_merger.py"
    ).read_text()
    argv = at.merge_argv(Path("/a"), Path("/t"), tie_word_embedding=True, hf_upload_path="u/m")
    for flag in (a for a in argv if a.startswith("--")):
        assert f'"{flag}"' in source, flag
    assert '"merge"' in source


def test_the_merger_module_is_verls_unless_a_test_gives_another() -> None:
    verl = at.merge_argv(Path("/a"), Path("/t"), tie_word_embedding=True, python="py")
    other = at.merge_argv(
        Path("/a"), Path("/t"), tie_word_embedding=True, python="py", merger_module="m"
    )
    assert verl[:3] == ["py", "-m", "verl.model_merger"]
    assert other[:3] == ["py", "-m", "m"] and other[3:] == verl[3:]


@pytest.mark.parametrize(
    ("env", "repo", "expected"),
    [
        ({"HF_TOKEN": TOKEN}, "me/model", "me/model"),
        ({}, "me/model", None),
        ({"HF_TOKEN": ""}, "me/model", None),
        ({"HF_TOKEN": "  "}, "me/model", None),
        ({"HF_TOKEN": TOKEN}, None, None),
    ],
)
def test_upload_only_when_the_token_is_set(
    env: dict[str, str], repo: str | None, expected: str | None
) -> None:
    assert at.upload_path(repo, env) == expected


# --- end to end with a fake merger subprocess ---


def test_merges_the_latest_step_and_reruns_converge(tmp_path: Path, fake: Path) -> None:
    ckpt = checkpoints(tmp_path / "ckpt", [5, 10], latest=10)
    target = tmp_path / "ckpt" / "hf_model"

    assert merge(ckpt, target) is True
    assert (target / "model.safetensors").read_bytes() == b"weights of step 10"
    record = json.loads((target / at.MARKER).read_text())
    assert record["state"] == "done" and record["step"] == 10
    assert calls_of(fake)[0]["argv"] == [
        "merge",
        "--backend",
        "fsdp",
        "--local_dir",
        str(ckpt / "global_step_10" / "actor"),
        "--target_dir",
        str(target),
    ]

    assert merge(ckpt, target) is False  # same step: nothing runs
    assert len(calls_of(fake)) == 1

    checkpoints_20 = ckpt / "global_step_20" / "actor"
    checkpoints_20.mkdir(parents=True)
    (checkpoints_20 / "weights.bin").write_bytes(b"weights of step 20")
    (ckpt / at.LATEST_FILE).write_text("20")
    (target / "stale-shard.bin").write_text("from step 10")
    assert merge(ckpt, target) is True
    assert len(calls_of(fake)) == 2
    assert (target / "model.safetensors").read_bytes() == b"weights of step 20"
    assert not (target / "stale-shard.bin").exists()
    assert json.loads((target / at.MARKER).read_text())["step"] == 20


def test_hf_token_set_adds_the_upload_without_the_token_in_argv(
    tmp_path: Path, fake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt = checkpoints(tmp_path / "ckpt", [3], latest=3)
    target = tmp_path / "out"
    merge(ckpt, target, hf_upload_path="me/model")  # no token: merge only
    call = calls_of(fake)[-1]
    assert "--hf_upload_path" not in call["argv"]  # type: ignore[operator]
    assert call["token_in_env"] is False

    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert merge(ckpt, target, hf_upload_path="me/model") is True  # now with upload: runs again
    call = calls_of(fake)[-1]
    argv = call["argv"]
    assert isinstance(argv, list)
    assert argv[-2:] == ["--hf_upload_path", "me/model"]
    assert call["token_in_env"] is True
    assert not any(TOKEN in a for a in argv)
    assert TOKEN not in (target / at.MARKER).read_text()
    assert merge(ckpt, target, hf_upload_path="me/model") is False


def test_tie_word_embedding_is_passed_through(tmp_path: Path, fake: Path) -> None:
    ckpt = checkpoints(tmp_path / "ckpt", [1], latest=1)
    merge(ckpt, tmp_path / "out", tie_word_embedding=True)
    assert "--tie-word-embedding" in calls_of(fake)[-1]["argv"]  # type: ignore[operator]


def test_a_failed_merge_is_redone_on_the_next_run(tmp_path: Path, fake: Path) -> None:
    ckpt = checkpoints(tmp_path / "ckpt", [4], latest=4)
    (ckpt / "global_step_4" / "actor" / "FAIL").touch()
    target = tmp_path / "out"
    with pytest.raises(at.AfterTrainingError, match="the merger exited with 3") as err:
        merge(ckpt, target)
    assert err.value.exit_code == 1
    assert json.loads((target / at.MARKER).read_text())["state"] == "merging"
    (ckpt / "global_step_4" / "actor" / "FAIL").unlink()
    assert merge(ckpt, target) is True
    assert json.loads((target / at.MARKER).read_text())["state"] == "done"


def test_a_target_with_foreign_files_is_refused_untouched(tmp_path: Path, fake: Path) -> None:
    ckpt = checkpoints(tmp_path / "ckpt", [2], latest=2)
    target = tmp_path / "someone-elses-model"
    target.mkdir()
    (target / "precious.txt").write_text("keep me")
    with pytest.raises(
        at.AfterTrainingError, match="holds files that no earlier merge wrote"
    ) as err:
        merge(ckpt, target)
    assert err.value.exit_code == 2
    assert (target / "precious.txt").read_text() == "keep me"
    assert calls_of(fake) == []


def test_the_checkpoint_folder_itself_is_refused_as_target(tmp_path: Path, fake: Path) -> None:
    ckpt = checkpoints(tmp_path / "ckpt", [2], latest=2)
    for target in (ckpt, tmp_path):
        with pytest.raises(at.AfterTrainingError, match="holds the checkpoints"):
            merge(ckpt, target)
    assert (ckpt / "global_step_2" / "actor" / "weights.bin").exists()
    assert calls_of(fake) == []


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlinfra_node.after_training", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_cli_without_a_checkpoint_fails_with_one_line(tmp_path: Path) -> None:
    done = run_cli("--checkpoint-dir", str(tmp_path), "--target", str(tmp_path / "hf"))
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ")
    assert str(tmp_path / at.LATEST_FILE) in lines[0]
    assert not (tmp_path / "hf").exists()


def test_cli_with_a_missing_actor_folder_fails(tmp_path: Path) -> None:
    (tmp_path / at.LATEST_FILE).write_text("30")
    done = run_cli("--checkpoint-dir", str(tmp_path), "--target", str(tmp_path / "hf"))
    assert done.returncode == 1
    assert "global_step_30/actor: not found" in done.stderr


def test_cli_runs_the_verl_merger_and_reports_its_failure(tmp_path: Path) -> None:
    """The real `python -m verl.model_merger` is started; here it cannot run on fake
    checkpoints, so the step must fail with the merger's exit code, never pass silently."""
    checkpoints(tmp_path, [1], latest=1)
    done = run_cli("--checkpoint-dir", str(tmp_path), "--target", str(tmp_path / "hf"))
    assert done.returncode == 1
    assert "the merger exited with" in done.stderr
    assert "-m verl.model_merger merge --backend fsdp" in done.stdout
