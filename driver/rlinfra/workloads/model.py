"""The `workload:` section of a profile: what runs on the cluster once it is up.

A workload is data, not a script: a type, the program, the model, the dataset, and Verl's own
Hydra overrides in order. ``rlinfra.jobspec.job_spec`` turns it, with the plan, into the
exact argv of the training job; ``rlinfra.workloads.verl_config`` checks every override against
the pinned Verl release before anything is spent.

Override values and ``runtime_env`` values may name variables as ``${NAME}`` (upper-case names
only; anything else, such as ``${actor_rollout_ref.model.path}`` or ``${oc.env:HOME}``, is left to
Hydra/OmegaConf): the profile's ``env`` (after ``--env``) and the built-ins listed in
``rlinfra.jobspec.BUILTINS``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from rlinfra.strict import StrictModel

WorkloadType = Literal["ppo", "grpo", "search-grpo", "search-inference"]


@dataclass(frozen=True)
class Kind:
    """What a workload type is, for every part of rlinfra that asks (no branches on the name)."""

    # Runs Verl's trainer: Verl overrides, a model and data, checkpoints in a bucket, the steps
    # after training (merge, serve); otherwise it runs inference only.
    trains: bool
    # Verl's algorithm.adv_estimator it needs ("gae": PPO; "grpo"); None: no trainer.
    estimator: str | None
    # Trains a critic unless the overrides say (critic.enable).
    critic: bool
    # Calls the search tool (the retrieval service) and needs workload.search_tool.
    needs_search_tool: bool
    # GPU processes share CUDA tensors (a rollout engine beside the trainer): the hosts need
    # ptrace between processes and a large /dev/shm (the reference ran them in containers with
    # --cap-add=SYS_PTRACE and --shm-size=16g).
    shares_cuda_tensors: bool


KINDS: dict[str, Kind] = {
    "ppo": Kind(
        trains=True, estimator="gae", critic=True, needs_search_tool=False,
        shares_cuda_tensors=False,
    ),
    "grpo": Kind(
        trains=True, estimator="grpo", critic=False, needs_search_tool=False,
        shares_cuda_tensors=False,
    ),
    "search-grpo": Kind(
        trains=True, estimator="grpo", critic=False, needs_search_tool=True,
        shares_cuda_tensors=True,
    ),
    "search-inference": Kind(
        trains=False, estimator=None, critic=False, needs_search_tool=False,
        shares_cuda_tensors=True,
    ),
}  # fmt: skip
Program = Literal["verl"]
Dataset = Literal["gsm8k", "math", "rstar-coder", "search-r1"]

DATASET_SIZES = ("small", "medium", "full")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A Hydra override key: optional +, ++ or ~, then dotted names (Verl's are [a-z0-9_]); a name
# may hold ${VAR}.
_SEGMENT = r"(?:[A-Za-z0-9_]|\$\{[A-Z_][A-Z0-9_]*\})+"
OVERRIDE_KEY_RE = re.compile(rf"^(\+\+|\+|~)?{_SEGMENT}(\.{_SEGMENT})*$")

# Where each dataset comes from when the profile gives no `source` (hub ids, production).
DEFAULT_SOURCES: dict[str, str] = {
    "gsm8k": "openai/gsm8k",
    "math": "DigitalLearningGmbH/MATH-lighteval",
    "rstar-coder": "microsoft/rStar-Coder",
    "search-r1": "PeterJinGo/nq_hotpotqa_train",
}


_Strict = StrictModel


def hydra_value(value: Any) -> str:
    """A YAML value as Hydra override text: True/False, null, [a,b], numbers as written."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(hydra_value(item) for item in value) + "]"
    if isinstance(value, str):
        return value
    raise ValueError(f"{value!r}: give a string, number, true/false or a list")


class Data(_Strict):
    """The training data: converted once on the head node into Verl's parquet rows."""

    dataset: Dataset = Field(description="Which converter: gsm8k, math, rstar-coder, search-r1.")
    source: str | None = Field(
        default=None, description="Hub dataset id or a local file/folder; a per-dataset default."
    )
    size: str | None = Field(
        default=None,
        description="search-r1 only: small (1000/200 rows), medium (10k/2k), full, or ${VAR}.",
    )
    data_files: str | None = Field(
        default=None, description="Hub data_files pattern (a subset of the hub dataset)."
    )
    dir: str | None = Field(
        default=None,
        description="Where train.parquet/test.parquet go (default ${CHECKPOINT_DIR}/data/<name>).",
    )

    @model_validator(mode="after")
    def _size(self) -> Data:
        if self.size is not None:
            if self.dataset != "search-r1":
                raise ValueError("size is only for the search-r1 dataset")
            if self.size not in DATASET_SIZES and not re.fullmatch(
                r"\$\{[A-Z_][A-Z0-9_]*\}", self.size
            ):
                raise ValueError(f"size {self.size!r}: give one of {', '.join(DATASET_SIZES)}")
        return self

    @property
    def source_or_default(self) -> str:
        return self.source or DEFAULT_SOURCES[self.dataset]

    @property
    def dir_or_default(self) -> str:
        if self.dir:
            return self.dir.rstrip("/")
        name: str = self.dataset
        if self.dataset == "search-r1":
            name = f"{name}-{self.size or 'small'}"
        return "${CHECKPOINT_DIR}/data/" + name

    @property
    def size_or_default(self) -> str:
        return self.size or "small"


class Merge(_Strict):
    """Merge the latest FSDP checkpoint into a Hugging Face model (Verl's model merger)."""

    backend: Literal["fsdp"] = "fsdp"
    tie_word_embedding: bool = Field(
        default=False,
        description="Only for models that tie input/output embeddings (Qwen2.5-0.5B does; 7B not).",
    )
    target_dir: str = Field(default="${CHECKPOINT_DIR}/hf_model")


class After(_Strict):
    """What follows training."""

    merge: Merge | None = None
    hf_upload: str | None = Field(
        default=None,
        description="Hub repo (user/name) to push the merged model to, only when HF_TOKEN is set.",
    )

    @model_validator(mode="after")
    def _upload_needs_merge(self) -> After:
        if self.hf_upload is not None:
            if self.merge is None:
                raise ValueError("hf_upload needs merge (the upload is the merged model)")
            if not re.fullmatch(
                r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+|\$\{[A-Z_][A-Z0-9_]*\}", self.hf_upload
            ):
                raise ValueError(f"hf_upload {self.hf_upload!r} is not a repo id (user/name)")
        return self


class SearchTool(_Strict):
    """Verl's search tool (verl.tools.search_tool.SearchTool), pointed at a retrieval service."""

    url: str = Field(
        default="http://127.0.0.1:8000",
        description="Retrieval service base URL (POST <url>/retrieve); may be ${RETRIEVAL_SERVICE_URL}.",
    )
    num_workers: int = Field(default=120, ge=1, le=1024)
    rate_limit: int = Field(default=120, ge=1, le=100000)
    timeout_s: int = Field(default=30, ge=1, le=600)
    topk: int = Field(default=3, ge=1, le=100)
    probe: bool = Field(
        default=True,
        description="POST /retrieve before training, 30 tries 5 s apart; no answer fails the run.",
    )


class Inference(_Strict):
    """Tool-calling inference (search-inference workloads)."""

    model_path: str = Field(default="${CHECKPOINT_DIR}/hf_model")
    search: Literal["local", "google"] = Field(
        default="local",
        description="'local': the retrieval service; 'google': Google Custom Search "
        "(GOOGLE_API_KEY, GOOGLE_CSE_ID secrets).",
    )
    max_turns: int = Field(default=2, ge=1, le=32)
    questions: str | None = Field(
        default=None,
        description="JSON lines of questions on the head (question, optional id and "
        "golden_answers); unset: the sample questions that ship with rlinfra.",
    )
    max_new_tokens: int = Field(default=512, ge=1, le=32768, description="Tokens per turn.")


class RandomModel(_Strict):
    """A small Qwen2-architecture model with random weights and a byte-level BPE tokenizer
    trained on the node (`python -m rlinfra_node.tiny_model`): for clusters that reach no model
    hub. It is made once into ``workload.model`` (a path, usually in the bucket) and reused."""

    hidden: int = Field(default=64, ge=16, le=4096, description="Hidden size (multiple of 16).")
    layers: int = Field(default=2, ge=1, le=64, description="Decoder layers.")
    vocab: int = Field(default=512, ge=300, le=65536, description="Tokenizer vocabulary size.")
    seed: int = Field(default=0, ge=0, description="Seed of the random weights.")
    heads: int | None = Field(
        default=None, ge=1, le=256, description="Attention heads (default: hidden / 16)."
    )
    kv_heads: int | None = Field(
        default=None, ge=1, le=256, description="Key/value heads (default: heads)."
    )
    intermediate: int | None = Field(
        default=None, ge=1, le=65536, description="MLP width (default: 4 x hidden)."
    )
    model_vocab: int | None = Field(
        default=None,
        ge=300,
        le=262144,
        description="Embedding rows (default: the tokenizer's size); e.g. 151936 for "
        "Qwen2.5-0.5B's shapes with the small local tokenizer.",
    )


class Workload(_Strict):
    """A profile's `workload:` section."""

    type: WorkloadType = Field(description="ppo, grpo, search-grpo or search-inference.")
    program: Program = Field(
        default="verl",
        description="'verl': python -m verl.trainer.main_ppo; on nodes without GPUs through "
        "rlinfra's CPU mode (rlinfra_node.verl_cpu, HF rollout, FSDP2 over gloo).",
    )
    config_name: str | None = Field(
        default=None, description="Hydra --config-name (a config that extends ppo_trainer)."
    )
    random_model: RandomModel | None = Field(
        default=None,
        description="Make workload.model (a path) as a small random-weight model on the node, "
        "for clusters without a model hub.",
    )
    config_path: str | None = Field(default=None, description="Hydra --config-path (on the node).")
    model: str | None = Field(
        default=None, description="Hugging Face model id (or a path on the node); may be ${VAR}."
    )
    data: Data | None = None
    overrides: dict[str, str] = Field(
        default_factory=dict, description="Verl Hydra overrides, in order (key: value)."
    )
    runtime_env: dict[str, str] = Field(
        default_factory=dict, description="Environment of the Ray job (never secrets)."
    )
    after: After = Field(default_factory=After)
    search_tool: SearchTool | None = None
    inference: Inference | None = None

    @field_validator("overrides", mode="before")
    @classmethod
    def _values_as_text(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            return {key: hydra_value(item) for key, item in value.items()}
        return value

    @field_validator("overrides")
    @classmethod
    def _keys(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not OVERRIDE_KEY_RE.fullmatch(key):
                raise ValueError(f"{key!r} is not a Hydra override key (dotted.names, +/++/~)")
        return value

    @field_validator("runtime_env", mode="before")
    @classmethod
    def _env_as_text(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            return {
                key: (str(item).lower() if isinstance(item, bool) else str(item))
                if isinstance(item, bool | int | float)
                else item
                for key, item in value.items()
            }
        return value

    @field_validator("runtime_env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not ENV_NAME_RE.fullmatch(key):
                raise ValueError(f"{key!r} is not a valid environment variable name")
        return value

    @property
    def kind(self) -> Kind:
        return KINDS[self.type]

    @model_validator(mode="after")
    def _shape(self) -> Workload:
        if self.config_path is not None and self.config_name is None:
            raise ValueError("config_path needs config_name")
        if not self.kind.trains:
            if self.overrides:
                raise ValueError("search-inference runs no Verl trainer: remove overrides")
            if self.config_name is not None or self.after.merge is not None:
                raise ValueError("search-inference takes no config_name and no after.merge")
            if (self.inference or Inference()).search == "local" and self.search_tool is None:
                raise ValueError("local search needs search_tool (the retrieval service)")
        else:
            if self.inference is not None:
                raise ValueError(f"inference is only for search-inference (type is {self.type})")
            if self.model is None:
                raise ValueError(f"a {self.type} workload needs model")
            if self.data is None:
                raise ValueError(f"a {self.type} workload needs data")
        if self.kind.needs_search_tool and self.search_tool is None:
            raise ValueError(f"{self.type} needs search_tool (the retrieval service it calls)")
        return self
