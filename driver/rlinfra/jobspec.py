"""Plan -> JobSpec: the exact commands of a profile's workload, decided without touching anything.

``job_spec(plan)`` is pure and deterministic. It expands variables, adds the overrides rlinfra
owns (checkpoint folder, resume, node and GPU counts from the plan), checks every override key
and value against the pinned Verl release's config, refuses GPU programs on CPU profiles, and
estimates GPU memory. Whatever submits the job (Ray's job API) takes the JobSpec as it is.

Built-in variables (``${NAME}`` in override values, ``runtime_env``, ``model``, data and merge
folders): see ``BUILTINS``. Secrets can never be referenced: they reach the job through its
environment only, never its argv or metadata.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from rlinfra.errors import ProfileError, UsageError
from rlinfra.workloads import memory
from rlinfra.workloads.model import DATASET_SIZES, Inference, Workload
from rlinfra.workloads.verl_config import VerlConfig, check_key, split_hydra_key, verl_config
from rlinfra_node.spot_watch import NOTICE_DIR_ENV

if TYPE_CHECKING:
    from rlinfra.plan import Plan

# Written last by the data converter; its presence means the data is complete in the bucket.
DATA_DONE_MARKER = "_SUCCESS"

BUILTINS: dict[str, str] = {
    "NUM_NODES": "number of nodes (from the plan, after --num-nodes)",
    "NUM_GPUS_PER_NODE": "GPUs per node (from the plan, after --accelerators); in CPU mode "
    "Verl's worker slots per node",
    "CHECKPOINT_DIR": "mount path of the profile's first storage entry",
    "DATA_DIR": "the workload's data folder (workload.data.dir)",
    "MODEL": "workload.model, expanded",
    "TOOL_CONFIG": "the search tool config file rlinfra writes (workloads with search_tool)",
}

PYTHON = "python3"
TRAINERS: dict[str, tuple[str, ...]] = {
    "verl": (PYTHON, "-m", "verl.trainer.main_ppo"),
}
# Verl's own trainer on nodes without GPUs, with the HF rollout on any node, and on spot nodes:
# the same main_ppo, started through rlinfra_node.verl_cpu, which patches Verl 0.6.0 in the driver
# and in every Ray worker (Verl 0.6.0 registers no ("hf", "sync") rollout of its own, and saves
# early only on expiration times fixed in its environment at start, not on preemption notices).
VERL_CPU_TRAINER = (PYTHON, "-m", "rlinfra_node.verl_cpu.main_ppo")
ROLLOUT_NAME = "actor_rollout_ref.rollout.name"
HF_ROLLOUT = "hf"
# Verl worker processes per CPU node in CPU mode (each holds one of the node's Ray slots).
CPU_WORKERS_PER_NODE = 1
DATAPREP = (PYTHON, "-m", "rlinfra_node.dataprep")
TINY_MODEL = (PYTHON, "-m", "rlinfra_node.tiny_model")
SEARCH_INFER = (PYTHON, "-m", "rlinfra_node.search_infer")
AFTER_TRAINING = (PYTHON, "-m", "rlinfra_node.after_training")
SEARCH_TOOL = (PYTHON, "-m", "rlinfra_node.search_tool")
MODEL_SERVER = (PYTHON, "-m", "rlinfra_node.model_server")
HF_CLI = "huggingface-cli"

# Overrides rlinfra always sets from the plan; a different value in a profile is an error.
FIXED_KEYS = (
    "trainer.default_local_dir",
    "trainer.resume_mode",
    "trainer.nnodes",
    "trainer.n_gpus_per_node",
)

WANDB_SECRET = "WANDB_API_KEY"
LOGGER_CONSOLE = "[console]"
LOGGER_WANDB = "[console,wandb]"

_VAR = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)\}")
_BARE_VAR = re.compile(r"\$(?!\{)([A-Za-z_][A-Za-z0-9_]*)")


@dataclass(frozen=True)
class Step:
    """One command run on the head node before or after the training job; a non-zero exit
    fails the run."""

    name: str
    argv: tuple[str, ...]
    # Skip the step when this path (in the bucket) exists: the work is already there.
    done_marker: str | None = None


@dataclass(frozen=True)
class JobSpec:
    """Everything needed to submit a profile's workload as a Ray job. Holds no secret."""

    workload_type: str
    program: str
    entrypoint: tuple[str, ...]
    runtime_env_vars: dict[str, str]
    data_steps: tuple[Step, ...]
    after_steps: tuple[Step, ...]
    submission_prefix: str
    checkpoint_dir: str | None
    verl_version: str
    files: tuple[tuple[str, str], ...] = ()
    # Run before the job (after data_steps): a service the job needs must answer.
    probe_steps: tuple[Step, ...] = ()
    warnings: tuple[str, ...] = field(default=())
    # Inputs a review may leave out but a run needs (each a one-line refusal for up and run).
    unset: tuple[str, ...] = field(default=())
    # Overrides that change when a secret reaches the job: (secret, "key=value"). The job
    # runner swaps them in; e.g. W&B logging when an optional WANDB_API_KEY is given.
    when_secret: tuple[tuple[str, str], ...] = ()
    # Which profile fields read each env variable (for `plan`: where an --env lands).
    env_readers: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def overrides(self) -> tuple[str, ...]:
        """The Hydra overrides of the entrypoint (``key=value`` items)."""
        return tuple(a for a in self.entrypoint if not a.startswith("-") and "=" in a)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("unset")
        out.pop("env_readers")
        return out

    def refuse_unset(self) -> None:
        """For `up` and `run`: an input a review could leave out is needed now."""
        if self.unset:
            raise UsageError(self.unset[0])


class _Expander:
    """``${NAME}`` expansion with errors that name the profile field."""

    def __init__(
        self,
        source: str,
        variables: Mapping[str, str],
        secrets: frozenset[str],
        from_cli: frozenset[str],
    ) -> None:
        self.source = source
        self.variables = dict(variables)
        self.secrets = secrets
        self.from_cli = from_cli
        self.readers: dict[str, list[str]] = {}

    def __call__(self, text: str, where: str) -> str:
        bare = _BARE_VAR.search(text)
        if bare and bare.group(1).upper() == bare.group(1):
            raise ProfileError(
                self.source,
                where,
                f"${bare.group(1)} is not expanded",
                f"Write ${{{bare.group(1)}}}.",
            )

        def sub(match: re.Match[str]) -> str:
            name = match.group(1)
            if name in self.secrets:
                raise ProfileError(
                    self.source,
                    where,
                    f"${{{name}}} is a secret; secrets never go into commands or job metadata",
                    "The job gets secrets in its environment: read them there.",
                )
            if name not in self.variables:
                known = ", ".join(sorted(self.variables))
                raise ProfileError(
                    self.source, where, f"unknown variable ${{{name}}}", f"Known: {known}."
                )
            readers = self.readers.setdefault(name, [])
            if where not in readers:
                readers.append(where)
            return self.variables[name]

        return _VAR.sub(sub, text)

    def origin(self, text: str) -> str:
        """' (from --env X)' when a variable in ``text`` was set on the command line."""
        names = [n for n in _VAR.findall(text) if n in self.from_cli]
        return f" (from --env {', '.join(names)})" if names else ""


# Where spot nodes' watchers (rlinfra_node.spot_watch) write preemption notices, under the first
# storage entry's mount path: a folder of the bucket, so a worker's notice reaches the trainer.
NOTICE_SUBDIR = "rlinfra/notices"


def spot_notice_dir(plan: Plan) -> str | None:
    """The folder where spot nodes' preemption notices go and the trainer reads them (the job's
    ``RLINFRA_NOTICE_DIR``); None for on-demand profiles and profiles without a bucket."""
    profile = plan.profile
    if not profile.resources.spot or not profile.storage:
        return None
    return f"{profile.storage[0].mount_path}/{NOTICE_SUBDIR}"


def cpu_mode(plan: Plan) -> bool:
    """Verl's trainer on nodes without GPUs (rlinfra_node.verl_cpu): the job gets CPU mode's
    overrides and the nodes start Ray with CPU mode's resources."""
    workload = plan.profile.workload
    return workload is not None and workload.program == "verl" and plan.gpus_per_node == 0


def ray_node_resources(plan: Plan) -> tuple[int | None, dict[str, int]]:
    """(GPU slots, custom resources) each node's `ray start` declares: what CPU mode's Verl
    workers ask Ray for; (None, {}) lets Ray detect the node's GPUs."""
    if not cpu_mode(plan):
        return None, {}
    from rlinfra_node.verl_cpu import RAY_NODE_RESOURCES

    slots = CPU_WORKERS_PER_NODE
    return int(RAY_NODE_RESOURCES["GPU"] * slots), {"cpu": int(RAY_NODE_RESOURCES["cpu"] * slots)}


def _cpu_overrides(plan: Plan) -> dict[str, str]:
    from rlinfra_node.verl_cpu import cpu_overrides

    pairs = (item.partition("=") for item in cpu_overrides(CPU_WORKERS_PER_NODE, plan.num_nodes))
    return {key: value for key, _, value in pairs}


def _variables(plan: Plan, workload: Workload, expand: _Expander) -> None:
    profile = plan.profile
    for name in BUILTINS:
        if name in profile.env:
            raise ProfileError(
                plan.source, f"env.{name}", f"{name} is set by rlinfra ({BUILTINS[name]})"
            )
    v = expand.variables
    v["NUM_NODES"] = str(plan.num_nodes)
    # In CPU mode Verl counts its worker slots as GPUs (trainer.n_gpus_per_node).
    v["NUM_GPUS_PER_NODE"] = str(CPU_WORKERS_PER_NODE if cpu_mode(plan) else plan.gpus_per_node)
    if profile.storage:
        v["CHECKPOINT_DIR"] = profile.storage[0].mount_path
    if workload.model is not None:
        v["MODEL"] = expand(workload.model, "workload.model")
    if workload.data is not None:
        v["DATA_DIR"] = expand(workload.data.dir_or_default, "workload.data.dir")
    if workload.search_tool is not None and workload.kind.trains and "CHECKPOINT_DIR" in v:
        v["TOOL_CONFIG"] = v["CHECKPOINT_DIR"] + "/rlinfra/search_tool_config.yaml"


def _retrieval_url(workload: Workload, expand: _Expander, source: str) -> str | None:
    """The retrieval service's base URL; None when it comes from a variable left empty (a
    review needs no URL: `up` and `run` refuse, see ``JobSpec.unset``)."""
    assert workload.search_tool is not None
    where = "workload.search_tool.url"
    url = expand(workload.search_tool.url, where).rstrip("/")
    url = url.removesuffix("/retrieve")
    if not url and _VAR.findall(workload.search_tool.url):
        return None
    if not re.fullmatch(r"https?://[A-Za-z0-9.\-\[\]:]+(:\d+)?(/[^\s]*)?", url):
        names = _VAR.findall(workload.search_tool.url)
        shown = f"{url!r} is not an http(s) URL" if url else "is empty"
        if names:
            shown = f"{shown} (from ${{{names[0]}}})"
            hint = f"Pass --env {names[0]}=http://HOST:PORT (the retrieval service)."
        else:
            hint = "Give http://HOST:PORT (the retrieval service)."
        raise ProfileError(source, where, f"retrieval service URL {shown}", hint)
    return url


def search_tool_config(url: str, workload: Workload) -> str:
    """Verl's tool config file for its search tool, pointed at ``url``/retrieve."""
    import yaml

    tool = workload.search_tool
    assert tool is not None
    doc = {
        "tools": [
            {
                "class_name": "verl.tools.search_tool.SearchTool",
                "config": {
                    "type": "native",
                    "retrieval_service_url": f"{url}/retrieve",
                    "num_workers": tool.num_workers,
                    "rate_limit": tool.rate_limit,
                    "timeout": tool.timeout_s,
                    "topk": tool.topk,
                },
                "tool_schema": {
                    "type": "function",
                    "function": {
                        "name": "search",
                        "description": "Searches for passages relevant to the given queries.",
                        "parameters": {
                            "type": "object",
                            "properties": {
                                "query_list": {
                                    "type": "array",
                                    "items": {"type": "string"},
                                    "description": "Fully formed search queries; each gets "
                                    "its own results.",
                                }
                            },
                            "required": ["query_list"],
                        },
                    },
                },
            }
        ]
    }
    return yaml.safe_dump(doc, sort_keys=False, width=100)


def _overrides(
    plan: Plan, workload: Workload, expand: _Expander, config: VerlConfig
) -> dict[str, str]:
    """The final, ordered overrides (profile's, then derived and fixed ones), validated."""
    source = plan.source
    out: dict[str, str] = {}
    bare_seen: dict[str, str] = {}
    for raw_key, raw_value in workload.overrides.items():
        where = f"workload.overrides.{raw_key}"
        key = expand(raw_key, where)
        value = expand(raw_value, where)
        bare = split_hydra_key(key)[1]
        if bare in bare_seen:
            raise ProfileError(source, where, f"{bare} is also given as {bare_seen[bare]}")
        bare_seen[bare] = key
        problem = check_key(config, key, value)
        if problem is not None:
            text, hint = problem
            if key != raw_key:
                text = f"{key} is {text}"
            origin = expand.origin(raw_key + raw_value)
            raise ProfileError(source, where, text + origin, hint)
        out[key] = value

    checkpoint = expand.variables["CHECKPOINT_DIR"]
    derived: dict[str, str] = {}
    model = expand.variables["MODEL"]
    derived["actor_rollout_ref.model.path"] = model
    estimator = out.get("algorithm.adv_estimator")
    if workload.kind.estimator != "gae":
        derived["algorithm.adv_estimator"] = str(workload.kind.estimator)
    elif estimator is not None and estimator != "gae":
        raise ProfileError(
            source,
            "workload.overrides.algorithm.adv_estimator",
            f"a {workload.type} workload uses gae, not {estimator}",
            "Set workload.type: grpo for GRPO.",
        )
    if _uses_critic(workload, out):
        derived["critic.model.path"] = model
    if "trainer.logger" not in out and plan.profile.secrets.get(WANDB_SECRET) == "optional":
        # Console only, unless the run is given the optional W&B key (see wandb_when_given).
        derived["trainer.logger"] = LOGGER_CONSOLE
    if "TOOL_CONFIG" in expand.variables:
        derived["actor_rollout_ref.rollout.multi_turn.tool_config_path"] = expand.variables[
            "TOOL_CONFIG"
        ]
    fixed = {
        "trainer.default_local_dir": checkpoint,
        "trainer.resume_mode": "auto",
        "trainer.nnodes": str(plan.num_nodes),
        "trainer.n_gpus_per_node": str(plan.gpus_per_node),
    }
    if cpu_mode(plan):
        # CPU mode's settings are the plan's too: a profile may repeat them, not change them.
        fixed.update(_cpu_overrides(plan))
    for key, wanted in {**derived, **fixed}.items():
        given = out.get(key)
        if given is None:
            for prefix in ("+", "++"):
                if prefix + key in out:
                    given = out[prefix + key]
        if given is None:
            out[key] = wanted
        elif given != wanted:
            owner = "the plan" if key in fixed else "the workload"
            raise ProfileError(
                source,
                f"workload.overrides.{key}",
                f"is {given!r}{expand.origin(workload.overrides.get(key, ''))}, but rlinfra sets "
                f"it to {wanted!r} from {owner}",
                "Remove the override (rlinfra adds it).",
            )
    return out


def wandb_when_given(plan: Plan, overrides: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """A profile whose W&B key is optional and that leaves ``trainer.logger`` to rlinfra logs to
    the console, and to W&B as well when a run is given the key (what the seed recipes do)."""
    if plan.profile.secrets.get(WANDB_SECRET) != "optional" or cpu_mode(plan):
        return ()  # CPU mode fixes the logger to the console (sandboxes have no network)
    if overrides.get("trainer.logger") != LOGGER_CONSOLE:
        return ()
    if "trainer.logger" in (plan.profile.workload.overrides if plan.profile.workload else {}):
        return ()
    return ((WANDB_SECRET, f"trainer.logger={LOGGER_WANDB}"),)


def _uses_critic(workload: Workload, overrides: Mapping[str, str]) -> bool:
    enable = overrides.get("critic.enable")
    if enable is not None and enable.lower() != "null":
        return enable.lower() == "true"
    return workload.kind.critic


def _flag(overrides: Mapping[str, str], key: str) -> bool:
    return overrides.get(key, "").strip().lower() == "true"


# Verl 0.6.0's trainer.save_freq default (ppo_trainer.yaml): never save.
VERL_DEFAULT_SAVE_FREQ = -1


def spot_warnings(plan: Plan, overrides: Mapping[str, str]) -> list[str]:
    """What makes a spot profile lose work on preemption: a trainer that never saves, or
    checkpoints that stay on the node's disk instead of the bucket."""
    profile = plan.profile
    if not profile.resources.spot:
        return []
    out = []
    raw = overrides.get("trainer.save_freq")
    try:
        every = int(raw) if raw is not None else VERL_DEFAULT_SAVE_FREQ
    except ValueError:
        every = VERL_DEFAULT_SAVE_FREQ
    if every <= 0:
        shown = raw if raw is not None else f"unset, Verl's default {VERL_DEFAULT_SAVE_FREQ}"
        out.append(
            f"resources.spot: the trainer never saves a checkpoint (trainer.save_freq {shown}): "
            "a preempted node loses the whole run; set workload.overrides.trainer.save_freq"
        )
    if profile.storage and profile.storage[0].mode != "MOUNT":
        out.append(
            f"resources.spot: checkpoints go to {profile.storage[0].mount_path}, a copy of the "
            f"bucket on the node's disk (storage[0].mode {profile.storage[0].mode}), never "
            "written back: a preempted node loses them; use mode MOUNT"
        )
    return out


def _memory_warning(plan: Plan, workload: Workload, overrides: Mapping[str, str]) -> str | None:
    if plan.accelerator is None or workload.program != "verl":
        return None
    model = overrides.get("actor_rollout_ref.model.path", "")
    params = memory.model_params_billion(model)
    if params is None:
        return None
    est = memory.estimate(
        overrides,
        params,
        plan.num_nodes * plan.gpus_per_node,
        plan.accelerator.memory_gib,
        with_critic=_uses_critic(workload, overrides),
        with_ref=_flag(overrides, "actor_rollout_ref.actor.use_kl_loss")
        or _flag(overrides, "algorithm.use_kl_in_reward"),
    )
    if not est.too_large:
        return None
    return (
        f"{plan.source}: workload: {model} may not fit: {est.describe()}. Consider "
        "actor_rollout_ref.actor.fsdp_config.param_offload/optimizer_offload=True, more GPUs, "
        "or a smaller model."
    )


def _data_steps(workload: Workload, expand: _Expander) -> tuple[Step, ...]:
    steps: list[Step] = []
    data = workload.data
    if data is not None:
        out_dir = expand.variables["DATA_DIR"]
        argv = [
            *DATAPREP,
            "--dataset",
            data.dataset,
            "--source",
            expand(data.source_or_default, "workload.data.source"),
            "--out",
            out_dir,
        ]
        if data.dataset == "search-r1":
            argv += ["--size", _size(data.size_or_default, expand)]
        if data.data_files:
            argv += ["--data-files", expand(data.data_files, "workload.data.data_files")]
        steps.append(Step("dataprep", tuple(argv), done_marker=f"{out_dir}/{DATA_DONE_MARKER}"))
    model = expand.variables.get("MODEL")
    if workload.random_model is not None:
        if not model or not model.startswith("/"):
            raise ProfileError(
                expand.source,
                "workload.model",
                f"{model!r} is not a path on the node, and workload.random_model makes a folder",
                "Give a path, e.g. ${CHECKPOINT_DIR}/models/tiny-qwen2.",
            )
        size = workload.random_model
        made: tuple[str, ...] = (*TINY_MODEL, "--out", model, "--hidden", str(size.hidden))
        made += ("--layers", str(size.layers), "--vocab", str(size.vocab), "--seed", str(size.seed))
        for flag, value in (
            ("--heads", size.heads),
            ("--kv-heads", size.kv_heads),
            ("--intermediate", size.intermediate),
            ("--model-vocab", size.model_vocab),
        ):
            if value is not None:
                made += (flag, str(value))
        steps.append(Step("make-model", made, done_marker=f"{model}/{DATA_DONE_MARKER}"))
    elif workload.program == "verl" and model and not model.startswith(("/", ".")):
        steps.append(Step("download-model", (HF_CLI, "download", model)))
    return tuple(steps)


def _size(raw: str, expand: _Expander) -> str:
    size = expand(raw, "workload.data.size")
    if size not in DATASET_SIZES:
        raise ProfileError(
            expand.source,
            "workload.data.size",
            f"{size!r}{expand.origin(raw)} is not a dataset size",
            f"Give one of {', '.join(DATASET_SIZES)}.",
        )
    return size


def _after_steps(workload: Workload, expand: _Expander) -> tuple[Step, ...]:
    """Merge the latest checkpoint (rlinfra_node.after_training reads
    latest_checkpointed_iteration.txt, runs Verl's model merger, and pushes to the Hub only when
    HF_TOKEN is set in its environment; the token is never an argument)."""
    merge = workload.after.merge
    if merge is None:
        return ()
    checkpoint = expand.variables["CHECKPOINT_DIR"]
    target = expand(merge.target_dir, "workload.after.merge.target_dir")
    model = expand.variables.get("MODEL", "")
    if merge.tie_word_embedding and model in memory.UNTIED_EMBEDDINGS:
        raise ProfileError(
            expand.source,
            "workload.after.merge.tie_word_embedding",
            f"{model} does not tie its word embeddings",
            "Set tie_word_embedding: false.",
        )
    argv = [*AFTER_TRAINING, "--checkpoint-dir", checkpoint, "--target", target]
    argv += ["--program", workload.program]
    if merge.tie_word_embedding:
        argv.append("--tie-word-embedding")
    if workload.after.hf_upload:
        repo = expand(workload.after.hf_upload, "workload.after.hf_upload")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", repo):
            raise ProfileError(
                expand.source,
                "workload.after.hf_upload",
                f"{repo!r}{expand.origin(workload.after.hf_upload)} is not a Hub repo id (user/name)",
            )
        argv += ["--hf-upload-path", repo]
    return (Step("merge", tuple(argv)),)


def _serve_steps(plan: Plan) -> tuple[Step, ...]:
    """Serve the merged model (profile.serving.model), supervised on the head node."""
    serving = plan.profile.serving
    if serving is None or serving.model is None:
        return ()
    model = serving.model
    argv = [*MODEL_SERVER, "deploy", "--engine", model.engine, "--model", model.model_path]
    argv += ["--host", model.host, "--port", str(model.port)]
    if model.extra_args:
        argv += ["--", *model.extra_args]
    return (Step("serve", tuple(argv)),)


def _inference_entrypoint(
    workload: Workload, expand: _Expander, url: str | None
) -> tuple[str, ...]:
    inference = workload.inference or Inference()
    argv = [
        *SEARCH_INFER,
        "--model",
        expand(inference.model_path, "workload.inference.model_path"),
        "--search",
        inference.search,
        "--max-turns",
        str(inference.max_turns),
        "--max-new-tokens",
        str(inference.max_new_tokens),
    ]
    if inference.questions:
        argv += ["--questions", expand(inference.questions, "workload.inference.questions")]
    if "CHECKPOINT_DIR" in expand.variables:
        # Answers and trajectories land in the bucket.
        argv += ["--out", expand.variables["CHECKPOINT_DIR"] + "/search_infer"]
    if url is not None and workload.search_tool is not None:
        argv += ["--retrieval-url", f"{url}/retrieve", "--topk", str(workload.search_tool.topk)]
    return tuple(argv)


def job_spec(plan: Plan) -> JobSpec:
    """The workload of ``plan`` as a JobSpec. Raises ProfileError/UsageError; touches nothing."""
    profile = plan.profile
    workload = profile.workload
    if workload is None:
        raise UsageError(f"{plan.source}: workload: the profile has no workload to run")
    if not workload.kind.trains:
        inference = workload.inference or Inference()
        if inference.search == "google":
            for name in ("GOOGLE_API_KEY", "GOOGLE_CSE_ID"):
                if profile.secrets.get(name) != "required":
                    raise ProfileError(
                        plan.source,
                        "secrets",
                        f"Google search needs {name} declared as a required secret",
                        f"Add secrets: {{{name}: required}}.",
                    )
    if workload.kind.trains and not profile.storage:
        raise ProfileError(
            plan.source,
            "storage",
            f"a {workload.type} workload keeps its checkpoints in a bucket; the profile has none",
            "Add a storage entry (bucket, mount_path).",
        )
    from_cli = frozenset(
        o.field.removeprefix("env.") for o in plan.overrides if o.field.startswith("env.")
    )
    expand = _Expander(plan.source, dict(profile.env), frozenset(profile.secrets), from_cli)
    _variables(plan, workload, expand)
    config = verl_config()

    runtime_env: dict[str, str] = {}
    for name, value in workload.runtime_env.items():
        if name in profile.secrets:
            raise ProfileError(
                plan.source,
                f"workload.runtime_env.{name}",
                f"{name} is a secret; it reaches the job without being written here",
            )
        runtime_env[name] = expand(value, f"workload.runtime_env.{name}")

    # Spot: the trainer saves when a node's preemption notice comes (the patched launcher).
    notice_dir = (
        spot_notice_dir(plan) if workload.kind.trains and workload.program == "verl" else None
    )
    if notice_dir is not None:
        if NOTICE_DIR_ENV in runtime_env:
            raise ProfileError(
                plan.source,
                f"workload.runtime_env.{NOTICE_DIR_ENV}",
                f"{NOTICE_DIR_ENV} is set by rlinfra on spot profiles (where preemption notices go)",
                "Remove it.",
            )
        runtime_env[NOTICE_DIR_ENV] = notice_dir

    url = _retrieval_url(workload, expand, plan.source) if workload.search_tool else None
    unset: list[str] = []
    warnings: list[str] = []
    if workload.search_tool is not None and url is None:
        name = _VAR.findall(workload.search_tool.url)[0]
        unset.append(
            f"{plan.source}: workload.search_tool.url: retrieval service URL is empty "
            f"(from ${{{name}}}); pass --env {name}=http://HOST:PORT (the retrieval service)"
        )
        warnings.append(f"{name} is not set: up and run need --env {name}=http://HOST:PORT")
    files: list[tuple[str, str]] = []
    probes: list[Step] = []
    if url is not None:
        if "TOOL_CONFIG" in expand.variables:
            files.append((expand.variables["TOOL_CONFIG"], search_tool_config(url, workload)))
        assert workload.search_tool is not None
        if workload.search_tool.probe:
            # POST <url>/retrieve, 30 tries 5 s apart; no answer fails the run.
            probe = (*SEARCH_TOOL, "probe", "--url", url, "--tries", "30", "--interval", "5")
            probes.append(Step("probe-retrieval", probe))

    when_secret: tuple[tuple[str, str], ...] = ()
    if not workload.kind.trains:
        entrypoint = _inference_entrypoint(workload, expand, url)
    else:
        overrides = _overrides(plan, workload, expand, config)
        argv = list(
            VERL_CPU_TRAINER
            if cpu_mode(plan) or overrides.get(ROLLOUT_NAME) == HF_ROLLOUT or notice_dir
            else TRAINERS[workload.program]
        )
        if workload.config_path:
            argv.append(f"--config-path={expand(workload.config_path, 'workload.config_path')}")
        if workload.config_name:
            argv.append(f"--config-name={workload.config_name}")
        for key, value in overrides.items():
            argv.append(key if key.startswith("~") and value in ("", "null") else f"{key}={value}")
        entrypoint = tuple(argv)
        when_secret = wandb_when_given(plan, overrides)
        warnings.extend(spot_warnings(plan, overrides))
        warning = _memory_warning(plan, workload, overrides)
        if warning:
            warnings.append(warning)

    return JobSpec(
        workload_type=workload.type,
        program=workload.program,
        entrypoint=entrypoint,
        runtime_env_vars=dict(sorted(runtime_env.items())),
        data_steps=_data_steps(workload, expand),
        after_steps=(
            _after_steps(workload, expand) + _serve_steps(plan) if workload.kind.trains else ()
        ),
        submission_prefix=f"rlinfra-{plan.cluster}-{workload.type}",
        checkpoint_dir=expand.variables.get("CHECKPOINT_DIR"),
        verl_version=config.version,
        files=tuple(files),
        probe_steps=tuple(probes),
        warnings=tuple(warnings),
        unset=tuple(unset),
        when_secret=when_secret,
        env_readers={
            name: tuple(readers)
            for name, readers in expand.readers.items()
            if name in profile.env or name in from_cli
        },
    )
