"""What a profile serves once the cluster is up: a trained model, a retrieval service, or both."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelServing(_Strict):
    """An OpenAI-compatible model server on the head node, supervised and health-checked."""

    engine: Literal["vllm", "standin"] = Field(
        default="vllm",
        description="'vllm' (GPU nodes) or 'standin' (a small CPU server for local clusters).",
    )
    model_path: str = Field(default="/checkpoints/hf_model", description="Model folder to serve.")
    port: int = Field(default=9090, ge=1024, le=65535)
    host: str = Field(default="127.0.0.1", description="Bind address; 0.0.0.0 needs allow_public.")
    extra_args: list[str] = Field(default_factory=list, description="More server arguments.")


class RetrievalServing(_Strict):
    """A replicated retrieval service (Ray Serve) behind one endpoint."""

    replicas: int = Field(default=3, ge=1, le=64)
    port: int = Field(default=8000, ge=1024, le=65535)


class Serving(_Strict):
    model: ModelServing | None = None
    retrieval: RetrievalServing | None = None
