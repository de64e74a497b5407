"""What a profile serves once the cluster is up: a trained model, a retrieval service, or both."""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from rlinfra.strict import StrictModel

_Strict = StrictModel


class ModelServing(_Strict):
    """An OpenAI-compatible model server on the head node, supervised and health-checked."""

    engine: Literal["vllm", "transformers"] = Field(
        default="vllm",
        description="'vllm' (GPU nodes) or 'transformers' (CPU nodes and small models; vLLM needs "
        "a GPU).",
    )
    model_path: str = Field(default="/checkpoints/hf_model", description="Model folder to serve.")
    port: int = Field(default=9090, ge=1024, le=65535)
    host: str = Field(default="127.0.0.1", description="Bind address; 0.0.0.0 needs allow_public.")
    extra_args: list[str] = Field(default_factory=list, description="More server arguments.")


class RetrievalServing(_Strict):
    """A replicated retrieval service (Ray Serve) behind one endpoint on the head node.

    Serve places and replaces the replicas; each replica serves HTTP on a free port of its node's
    private address and the endpoint (a light router on the head, ``rlinfra_node.retrieval.front``)
    forwards requests to them, so the nodes must reach each other on any port (as Ray needs).

    The corpus and its FAISS index live in the bucket (``data_dir``, by default
    ``<first storage mount>/retrieval/<corpus>``), fetched and built once, then reused by every
    replica and by later clusters. See ``rlinfra_node.retrieval`` for the API.
    """

    replicas: int = Field(default=3, ge=1, le=64, description="Ray Serve replicas.")
    port: int = Field(
        default=8000, ge=1024, le=65535, description="The endpoint's port on the head (the front)."
    )
    host: str = Field(
        default="127.0.0.1",
        description="The endpoint's bind address on the head; 0.0.0.0 needs allow_public.",
    )
    corpus: str = Field(
        default="wiki-18-100k", description="Corpus name: the folder under <bucket>/retrieval/."
    )
    corpus_source: str | None = Field(
        default=None,
        description="URL or path (on the head) of the JSONL(.gz) corpus, fetched when missing; "
        "or sample:N[:SEED], the synthetic corpus that ships with rlinfra, made on the node.",
    )
    max_passages: int | None = Field(
        default=None, ge=1, description="Keep the first N passages of the source."
    )
    index_source: str | None = Field(
        default=None, description="URL or path of a prebuilt FAISS index; built when unset."
    )
    data_dir: str | None = Field(
        default=None, description="Folder on the nodes for corpus + index (default: the bucket)."
    )
    model: str = Field(
        default="intfloat/e5-base-v2",
        description="sentence-transformers model: hub name, folder, or package:NAME.",
    )
    query_prefix: str = Field(default="query: ", description="Prepended to every query.")
    passage_prefix: str = Field(default="passage: ", description="Prepended to every passage.")
    batch_size: int = Field(default=256, ge=1, le=65536, description="Passages per batch.")
    query_encoder: Literal["auto", "bfloat16", "float32", "library"] = Field(
        default="auto",
        description="How replicas encode queries: auto (a BERT model's forward in plain torch "
        "functions, in bfloat16 where the CPU or GPU computes it natively), bfloat16 or float32 "
        "(that forward in that precision), or library (sentence-transformers' own modules). "
        "Indexes are built in float32 either way.",
    )
    topk: int = Field(default=3, ge=1, le=1000, description="Default top-k.")
    max_topk: int = Field(default=50, ge=1, le=1000)
    max_queries: int = Field(default=128, ge=1, le=10000, description="Queries per request.")
    clients: list[str] = Field(
        default_factory=list,
        description="Networks of other clusters that use this service (e.g. a trainer's address "
        "or subnet): the service then listens on every interface, the cluster's firewall (where "
        "rlinfra makes one) opens its port to these ranges only (not SSH, not Ray), and the "
        "endpoint answers only them, the cluster's own nodes and loopback (403 naming the "
        "address it saw to anyone else). `rlinfra status CLUSTER --endpoint PORT --from "
        "TRAINER` checks the path from a trainer cluster.",
    )
    cpus_per_replica: float = Field(default=1.0, gt=0, le=512)
    max_replicas_per_node: int | None = Field(default=None, ge=1, le=64)

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        try:
            ipaddress.ip_address(value)
        except ValueError as exc:
            raise ValueError(f"{value!r} is not an IP address") from exc
        return value

    @field_validator("corpus")
    @classmethod
    def _corpus(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", value):
            raise ValueError(f"{value!r}: use letters, digits, '.', '_' and '-' (a folder name)")
        return value

    @field_validator("corpus_source")
    @classmethod
    def _corpus_source(cls, value: str | None) -> str | None:
        sample = value is not None and value.startswith("sample:")
        if sample and not re.fullmatch(r"sample:[1-9][0-9]*(:[0-9]+)?", str(value)):
            raise ValueError(f"{value!r}: write sample:N or sample:N:SEED (N >= 1)")
        return value

    @field_validator("clients")
    @classmethod
    def _clients(cls, value: list[str]) -> list[str]:
        out = []
        for cidr in value:
            try:
                net = ipaddress.IPv4Network(cidr, strict=False)
            except ValueError as exc:
                raise ValueError(f"{cidr!r} is not an IPv4 CIDR block") from exc
            out.append(str(net))
        return out

    @property
    def bind_host(self) -> str:
        """Where the endpoint listens: every interface when other clusters use it, else ``host``."""
        return "0.0.0.0" if self.clients else self.host

    @field_validator("data_dir")
    @classmethod
    def _data_dir(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(f"{value!r} must be an absolute path")
        return value

    @model_validator(mode="after")
    def _topk(self) -> RetrievalServing:
        if self.topk > self.max_topk:
            raise ValueError(f"topk {self.topk} is above max_topk {self.max_topk}")
        return self


class Serving(_Strict):
    model: ModelServing | None = None
    retrieval: RetrievalServing | None = None


def service_clients(serving: Serving | None) -> list[dict[str, Any]]:
    """Ports that other clusters may reach, each with its clients' ranges: the cluster roots'
    ``service_clients`` variable, which aws_cluster and gcp_network turn into firewall rules."""
    retrieval = serving.retrieval if serving else None
    if retrieval is None or not retrieval.clients:
        return []
    return [{"port": retrieval.port, "cidrs": list(retrieval.clients)}]


def retrieval_data_dir(serving: RetrievalServing, mount_paths: list[str]) -> str:
    """Where the corpus and index live on the nodes: data_dir, else the first bucket's mount."""
    if serving.data_dir:
        return serving.data_dir.rstrip("/")
    if not mount_paths:
        raise ValueError("serving.retrieval needs a storage entry or data_dir")
    return f"{mount_paths[0]}/retrieval/{serving.corpus}"


def retrieval_settings(serving: RetrievalServing, mount_paths: list[str]) -> dict[str, object]:
    """The node-side settings (``rlinfra_node.retrieval.settings.Settings``) as plain data."""
    data_dir = retrieval_data_dir(serving, mount_paths)
    return {
        "data_dir": data_dir,
        "corpus_source": serving.corpus_source,
        "max_passages": serving.max_passages,
        "index_source": serving.index_source,
        "model": serving.model,
        "query_prefix": serving.query_prefix,
        "passage_prefix": serving.passage_prefix,
        "model_cache": f"{data_dir}/models",
        "batch_size": serving.batch_size,
        "query_encoder": serving.query_encoder,
        "default_topk": serving.topk,
        "max_topk": serving.max_topk,
        "max_queries": serving.max_queries,
        "threads": max(1, int(serving.cpus_per_replica)),
    }


def retrieval_ansible_vars(
    serving: RetrievalServing | None, mount_paths: list[str]
) -> dict[str, object]:
    """The retrieval_service role's variables; empty when the profile serves no retrieval."""
    if serving is None:
        return {}
    return {
        "retrieval_service_enabled": True,
        "retrieval_service_settings": retrieval_settings(serving, mount_paths),
        "retrieval_service_replicas": serving.replicas,
        "retrieval_service_host": serving.bind_host,
        "retrieval_service_port": serving.port,
        "retrieval_service_clients": list(serving.clients),
        "retrieval_service_num_cpus": serving.cpus_per_replica,
        "retrieval_service_max_replicas_per_node": serving.max_replicas_per_node or 0,
    }
