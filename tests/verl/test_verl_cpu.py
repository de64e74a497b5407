"""rlinfra's CPU mode for Verl 0.6.0, with Verl's real trainer.

Fast tests check the plain data (overrides, node resources), the version refusal and the dense
reward. The slow ones run the programs in a venv installed from the cpu-sandbox lock, against a
Ray node started as rlinfra starts CPU nodes: tiny_model, and GRPO with the dense reward
through ``python -m rlinfra_node.verl_cpu.main_ppo`` that also saves a checkpoint on a spot node's
preemption notice (``rlinfra_node.spot_watch`` against a local server answering like AWS's
instance metadata service). PPO with a critic (checkpoints, resume,
``verl.model_merger``) is the main job of tests/e2e/test_local_cluster.py, on two hosts.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from helpers.verl import NODE_PACKAGE_ROOT, RayNode, node_env
from rlinfra.workloads.verl_config import check_key, split_hydra_key, verl_config
from rlinfra_node import rewards
from rlinfra_node.verl_cpu import (
    SETUP_HOOK,
    UnsupportedVerl,
    check_verl_version,
    cpu_overrides,
    local_ray_overrides,
    ray_start_args,
)
from rlinfra_node.verl_cpu.main_ppo import (
    HOOK_KEY,
    RAY_JOB_CONFIG_ENV,
    hook_override,
    notice_override,
)

SAMPLE = NODE_PACKAGE_ROOT / "rlinfra_node" / "samples" / "gsm8k_sample.jsonl"
REWARDS = NODE_PACKAGE_ROOT / "rlinfra_node" / "rewards.py"


# ------------------------------------------------------------------------------------------
# Plain data and pure functions.


def _overrides_as_dict(overrides: Sequence[str]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in overrides)


def test_cpu_overrides_name_what_verl_needs_on_cpu() -> None:
    got = _overrides_as_dict(cpu_overrides(2, nnodes=3))
    assert got["trainer.device"] == "cpu"
    assert got["trainer.n_gpus_per_node"] == "2"
    assert got["trainer.nnodes"] == "3"
    assert got["actor_rollout_ref.rollout.name"] == "hf"
    assert got["actor_rollout_ref.rollout.tensor_model_parallel_size"] == "1"
    for role in ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic"):
        assert got[f"{role}.strategy"] == "fsdp2"
    assert got["actor_rollout_ref.model.use_remove_padding"] == "false"
    assert got["data.dataloader_num_workers"] == "0"
    assert got["trainer.logger"] == "[console]"
    with pytest.raises(ValueError):
        cpu_overrides(0)


def test_every_override_is_one_verl_060_takes() -> None:
    """Plain keys exist in Verl 0.6.0's config, '+' keys do not (checked against the snapshot)."""
    config = verl_config("0.6.0")
    overrides = [*cpu_overrides(1), *local_ray_overrides(1), *hook_override([], {})]
    for item in overrides:
        key, value = item.split("=", 1)
        assert check_key(config, key, value) is None, item
    added = [split_hydra_key(item.split("=")[0]) for item in overrides]
    assert [key for prefix, key in added if prefix] == [
        "ray_kwargs.ray_init.num_gpus",
        "ray_kwargs.ray_init.resources.cpu",
        "ray_kwargs.ray_init.include_dashboard",
        HOOK_KEY,
    ]


def test_nodes_get_a_gpu_slot_and_a_cpu_resource_per_worker() -> None:
    assert ray_start_args(2) == ["--num-gpus", "2", "--resources", '{"cpu": 2}']
    assert _overrides_as_dict(local_ray_overrides(2))["+ray_kwargs.ray_init.num_gpus"] == "2"


def test_the_hook_override_is_added_once() -> None:
    assert hook_override(["trainer.device=cpu"], {}) == [f"++{HOOK_KEY}={SETUP_HOOK}"]
    assert hook_override([f"+{HOOK_KEY}=x.y"], {}) == []
    job = {"runtime_env": {"worker_process_setup_hook": SETUP_HOOK}}
    assert hook_override([], {RAY_JOB_CONFIG_ENV: json.dumps(job)}) == []


def test_the_setup_hook_is_a_function_ray_can_import() -> None:
    """Ray's worker_process_setup_hook is "module.function": the module imports and the
    function is there (a module of that name is not what Ray looks for)."""
    import importlib

    module, _, function = SETUP_HOOK.rpartition(".")
    assert callable(getattr(importlib.import_module(module), function))


def test_the_notice_folder_reaches_the_workers_once() -> None:
    key = "ray_kwargs.ray_init.runtime_env.env_vars.RLINFRA_NOTICE_DIR"
    assert notice_override([], {}) == []
    assert notice_override([], {"RLINFRA_NOTICE_DIR": "/b/n"}) == [f"++{key}=/b/n"]
    assert notice_override([f"+{key}=/x"], {"RLINFRA_NOTICE_DIR": "/b/n"}) == []
    job = {"runtime_env": {"env_vars": {"RLINFRA_NOTICE_DIR": "/b/n"}}}
    env = {"RLINFRA_NOTICE_DIR": "/b/n", RAY_JOB_CONFIG_ENV: json.dumps(job)}
    assert notice_override([], env) == []  # a submitted job's workers have it already
    config = verl_config("0.6.0")
    (item,) = notice_override([], {"RLINFRA_NOTICE_DIR": "/b/n"})
    assert check_key(config, *item.split("=", 1)) is None


def test_other_verl_versions_are_refused() -> None:
    check_verl_version("0.6.0")
    with pytest.raises(UnsupportedVerl, match=r"supports verl==0\.6\.0 only; found verl 0\.7\.1$"):
        check_verl_version("0.7.1")
    with pytest.raises(UnsupportedVerl, match="found no verl"):
        check_verl_version(None)


def test_dense_reward_varies_between_wrong_answers_and_is_1_when_right() -> None:
    scores = {
        text: rewards.gsm8k_dense("openai/gsm8k", text, "79")
        for text in ("no digits", "it is 7", "97 apples", "#### 79", "#### 80", "")
    }
    assert scores["#### 79"] == 1.0
    assert scores["no digits"] == scores[""] == 0.0
    assert 0 < scores["it is 7"] < scores["97 apples"] < 1
    assert all(0 <= value < 1 for text, value in scores.items() if text != "#### 79")


# ------------------------------------------------------------------------------------------
# The real programs.


@dataclass(frozen=True)
class Run:
    returncode: int
    log: str
    seconds: float


def run(python: Path, args: Sequence[str], cwd: Path, log: Path, **env: str) -> Run:
    start = time.monotonic()
    with log.open("w") as out:
        result = subprocess.run(
            [str(python), *args],
            cwd=cwd,
            env=node_env(**env),
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=600,
            check=False,
        )
    return Run(result.returncode, log.read_text(), time.monotonic() - start)


def step_metrics(log: str) -> dict[int, dict[str, float]]:
    """Verl's console logger lines ``step:N - key:value - ...``, by step."""
    steps: dict[int, dict[str, float]] = {}
    for found in re.finditer(r"step:(\d+) - (.*)", log):
        values = re.findall(
            r"([\w/@.-]+):(?:np\.float\d+\()?(-?[0-9.]+(?:e[-+]?\d+)?|nan)", found[2]
        )
        steps[int(found[1])] = {key: float(value) for key, value in values}
    return steps


def trainer_args(model: Path, data: Path, checkpoints: Path, steps: int) -> list[str]:
    return [
        "-m",
        "rlinfra_node.verl_cpu.main_ppo",
        *cpu_overrides(1),
        f"data.train_files={data / 'train.parquet'}",
        f"data.val_files={data / 'test.parquet'}",
        "data.train_batch_size=4",
        "data.max_prompt_length=128",
        "data.max_response_length=16",
        f"actor_rollout_ref.model.path={model}",
        "actor_rollout_ref.actor.optim.lr=1e-4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.actor.use_torch_compile=false",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
        f"trainer.total_training_steps={steps}",
        "trainer.save_freq=2",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        f"trainer.default_local_dir={checkpoints}",
        "trainer.project_name=rlinfra-tests",
    ]


@dataclass(frozen=True)
class Made:
    model: Path
    data: Path
    work: Path
    first: Run
    second: Run


@pytest.fixture(scope="module")
def made(verl_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Made:
    """tiny_model twice (the second finds it done), and the sample as Verl parquet."""
    work = tmp_path_factory.mktemp("verl")
    model = work / "model"
    args = ["-m", "rlinfra_node.tiny_model", "--out", str(model), "--corpus", str(SAMPLE)]
    first = run(verl_python, args, work, work / "tiny_model.log")
    second = run(verl_python, args, work, work / "tiny_model_again.log")
    data = work / "data"
    prep = ["-m", "rlinfra_node.dataprep", "--dataset", "gsm8k", "--source", str(SAMPLE)]
    prepared = run(verl_python, [*prep, "--out", str(data)], work, work / "dataprep.log")
    assert prepared.returncode == 0, prepared.log
    return Made(model, data, work, first, second)


@pytest.mark.slow
def test_tiny_model_is_made_once_and_loads_offline(verl_python: Path, made: Made) -> None:
    assert made.first.returncode == 0, made.first.log
    assert "made tiny model" in made.first.log
    assert made.second.returncode == 0 and "already there" in made.second.log
    check = (
        "import sys; from transformers import AutoModelForCausalLM, AutoTokenizer\n"
        "t = AutoTokenizer.from_pretrained(sys.argv[1]); m = AutoModelForCausalLM.from_pretrained(sys.argv[1])\n"
        "text = t.apply_chat_template([{'role': 'user', 'content': 'Q?'}], add_generation_prompt=True, tokenize=False)\n"
        "assert text.endswith('<|im_start|>assistant\\n'), text\n"
        "print(len(t), t.eos_token, t.pad_token, m.config.model_type, m.config.vocab_size)\n"
    )
    done = run(verl_python, ["-c", check, str(made.model)], made.work, made.work / "load.log")
    assert done.returncode == 0, done.log
    assert done.log.split()[-5:] == ["512", "<|im_end|>", "<|endoftext|>", "qwen2", "512"]


# PPO with a critic (two ranks on two hosts, checkpoints, resume, merge, the merged weights
# changed) runs once, as the main job, in tests/e2e/test_local_cluster.py: not again here.


@pytest.mark.slow
def test_the_launcher_refuses_another_verl(verl_python: Path, tmp_path: Path) -> None:
    """A verl 0.7.1 distribution first on the path: one line, exit 2, nothing run."""
    fake = tmp_path / "site" / "verl-0.7.1.dist-info"
    fake.mkdir(parents=True)
    (fake / "METADATA").write_text("Metadata-Version: 2.1\nName: verl\nVersion: 0.7.1\n")
    args = ["-c", "from rlinfra_node.verl_cpu.main_ppo import main; raise SystemExit(main([]))"]
    env = {"PYTHONPATH": f"{tmp_path / 'site'}:{NODE_PACKAGE_ROOT}"}
    done = run(verl_python, args, tmp_path, tmp_path / "refuse.log", **env)
    assert done.returncode == 2
    assert done.log.strip().splitlines() == [
        "Error: rlinfra's Verl CPU mode supports verl==0.6.0 only; found verl 0.7.1"
    ]


# ------------------------------------------------------------------------------------------
# A checkpoint on a spot node's preemption notice.


class FakeImds:
    """A local HTTP server answering like AWS's IMDSv2 (a token PUT first, then GETs that carry
    it): 404 for spot/instance-action until ``announce`` is called. The real service exists only
    on EC2 instances; the watcher, the bucket folder and the trainer are the real ones."""

    TOKEN = "t-1"

    def __init__(self) -> None:
        self.action: bytes | None = None
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def _answer(self, status: int, body: bytes = b"") -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_PUT(self) -> None:
                ok = self.path == "/latest/api/token" and self.headers.get(
                    "X-aws-ec2-metadata-token-ttl-seconds"
                )
                self._answer(200, fake.TOKEN.encode()) if ok else self._answer(400)

            def do_GET(self) -> None:
                if self.headers.get("X-aws-ec2-metadata-token") != fake.TOKEN:
                    self._answer(401)
                elif self.path != "/latest/meta-data/spot/instance-action" or not fake.action:
                    self._answer(404)
                else:
                    self._answer(200, fake.action)

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: object, client_address: object) -> None:
                pass  # a watcher that gave up waiting (a loaded machine) closed its end

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def announce(self, action: str, in_s: int) -> int:
        """Answer with an instance-action from now on; returns its time (epoch seconds)."""
        when = int(time.time()) + in_s
        stamp = datetime.fromtimestamp(when, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.action = json.dumps({"action": action, "time": stamp}).encode()
        return when

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def imds() -> Iterator[FakeImds]:
    fake = FakeImds()
    try:
        yield fake
    finally:
        fake.close()


def _wait_for_line(log: Path, pattern: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not re.search(pattern, log.read_text(errors="replace"), re.MULTILINE):
        assert proc.poll() is None, log.read_text()[-6000:]
        assert time.monotonic() < deadline, f"no {pattern!r} in {timeout} s"
        time.sleep(0.2)


@pytest.mark.slow
def test_grpo_with_the_dense_reward_trains_and_a_preemption_notice_forces_a_save(
    verl_python: Path, made: Made, ray_node: RayNode, imds: FakeImds
) -> None:
    """GRPO with the dense reward: advantages are not all zero, so the random model learns.
    save_freq 100 in a 3-step run: the only checkpoint before the last step is the one that the
    notice (announced after step 1) forces at the end of step 2, before its deadline."""
    work = made.work / "spot"
    notices = work / "bucket" / "rlinfra" / "notices"
    watch_log = work / "spot_watch.log"
    work.mkdir()
    watch_args = ["-m", "rlinfra_node.spot_watch", "--provider", "aws", "--endpoint", imds.url]
    watch_args += ["--notice-dir", str(notices), "--interval", "0.2", "--node", "spot-worker-1"]
    with watch_log.open("w") as out:
        watcher = subprocess.Popen(
            [str(verl_python), *watch_args], cwd=work, env=node_env(), stdout=out, stderr=out
        )
    args = [
        *trainer_args(made.model, made.data, work / "checkpoints", 3),
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        f"custom_reward_function.path={REWARDS}",
        "custom_reward_function.name=gsm8k_dense",
        "trainer.save_freq=100",
        # A notice is due once its deadline is within the save time (60 s), the longest step and
        # this margin: a 2-minute AWS notice is due at the next step end even with steps of a few
        # seconds (RL steps of a minute or more make it due with Verl's defaults alone).
        "trainer.esi_redundant_time=60",
        "trainer.experiment_name=spot",
    ]
    train_log = work / "train.log"
    env = node_env(RLINFRA_NOTICE_DIR=str(notices), **ray_node.env)
    try:
        start = time.monotonic()
        with train_log.open("w") as out:
            trainer = subprocess.Popen(
                [str(verl_python), *args], cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        try:
            _wait_for_line(train_log, r"step:1 - ", trainer, timeout=400)
            deadline = imds.announce("terminate", in_s=120)
            code = trainer.wait(timeout=400)
        finally:
            if trainer.poll() is None:
                trainer.kill()
                trainer.wait()
        took = time.monotonic() - start
    finally:
        watcher.send_signal(signal.SIGTERM)
        watcher_code = watcher.wait(timeout=30)
    log = train_log.read_text()
    assert code == 0, log[-6000:]
    assert watcher_code == 0, watch_log.read_text()
    metrics = step_metrics(log)
    assert sorted(metrics) == [1, 2, 3]
    for step in metrics.values():
        assert step["critic/score/max"] > step["critic/score/min"]
        assert step["critic/advantages/max"] > 0 > step["critic/advantages/min"]
    notice = json.loads((notices / "spot-worker-1.json").read_text())
    assert notice["deadline"] == deadline and notice["action"] == "terminate"
    forced = re.findall(
        r"verl_cpu: preemption notice of node (\S+) \(aws terminate in \d+ s\)", log
    )
    assert forced and set(forced) == {"spot-worker-1"}, log[-6000:]
    assert "Force saving checkpoint: ESI instance expiration approaching." in log
    saved = work / "checkpoints" / "global_step_2" / "actor"
    assert saved.is_dir(), sorted(p.name for p in (work / "checkpoints").iterdir())
    assert saved.stat().st_mtime < deadline
    assert (work / "checkpoints" / "global_step_3").is_dir()  # the last step saves as usual
    print(f"3 steps with a forced save in {took:.0f} s")
