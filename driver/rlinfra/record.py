"""The cluster record: what rlinfra knows of a cluster after each command (``record.json``).

``Record`` is the saved document; ``Host`` is one node as its cloud reported it; ``Stage`` is how
far the cluster got. Reading and writing records is ``rlinfra.deploy``'s.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rlinfra import layout


@dataclass(frozen=True)
class Host:
    """One node as Terraform reported it."""

    name: str
    rank: int
    ssh_host: str
    private_ip: str
    interface: str
    ssh_user: str
    # How SSH reaches the node where the cloud does not decide it alone (the ssh cloud's hosts):
    # its port, its key ("" the deployment's own), the SSH agent instead of a key, and a
    # ProxyCommand through a bastion ("" none).
    ssh_port: int = 22
    ssh_key: str = ""
    ssh_agent: bool = False
    ssh_proxy: str = ""


RECORD_VERSION = 1
# Ray's dashboard port when a record predates the `ray` entry (the node contract's default).
DEFAULT_DASHBOARD_PORT = layout.RAY_DASHBOARD_PORT


class Stage(str, enum.Enum):
    """How far a cluster got: each command moves it on and records it before going further."""

    PLANNED = "planned"  # `plan` wrote the deployment folder
    RENDERED = "rendered"  # `up` wrote its files; nothing applied yet
    INFRASTRUCTURE = "infrastructure"  # Terraform applied; hosts known
    READY = "ready"  # configured and (unless skipped) checked
    INTERRUPTED = "interrupted"
    FAILED = "failed"
    DOWN = "down"


class _Part(BaseModel):
    # Parts written by other versions may carry fields this one does not know: kept as written.
    model_config = ConfigDict(extra="allow")


class RayPorts(_Part):
    """Ray's ports on the cluster, as `up` configured them."""

    head_port: int = layout.RAY_HEAD_PORT
    dashboard_port: int = DEFAULT_DASHBOARD_PORT
    dashboard_host: str = "127.0.0.1"
    dashboard_agent_listen_port: int = layout.RAY_DASHBOARD_AGENT_LISTEN_PORT
    client_server_port: int = layout.RAY_CLIENT_SERVER_PORT


class Service(_Part):
    """What the cluster serves on its head node, by port (`status` lists them)."""

    name: str
    engine: str
    port: int


class JobEntry(_Part):
    """A job rlinfra submitted (the newest 20 are kept)."""

    submission_id: str
    workload: str = ""


class CheckResult(_Part):
    """The acceptance check's result: the all-reduce's backend, world size and timings."""

    backend: str | None = None
    world_size: int | None = None
    results: list[dict[str, Any]] = Field(default_factory=list)


class Recovery(_Part):
    """One lost-node recovery of `run --recover` (rlinfra.ops.recovery)."""

    at: str | None = None
    job: str | None = None
    nodes: list[str] = Field(default_factory=list)
    reason: str | None = None
    replaced: list[str] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)
    last_step: int | None = None
    resumed_from_step: int | None = None
    steps_lost: int | None = None
    seconds: dict[str, float] = Field(default_factory=dict)


class Record(BaseModel):
    """What rlinfra knows of a cluster after a command (``record.json``), versioned.

    Every command after `up` starts from it: the hosts, the ports, the buckets, and the profile
    exactly as `up` resolved it (overrides applied), so `run` does not re-read a profile file
    that may have changed since. Older records (without ``schema_version``) read as version 1.
    """

    model_config = ConfigDict(extra="ignore", use_enum_values=False)

    schema_version: int = RECORD_VERSION
    cluster: str = ""
    cloud: str = "local"
    profile: str | None = None
    source: str | None = None
    # The profile as `up` resolved it (after --env, --num-nodes, ...), as data.
    resolved_profile: dict[str, Any] | None = None
    task_id: str | None = None
    subnet: str | None = None
    buckets: list[str] = Field(default_factory=list)
    num_nodes: int | None = None
    gpus_per_node: int | None = None
    # The machine type the cluster runs on (after any capacity failover at `up`).
    instance_type: str | None = None
    # Where rlinfra put its files on the nodes (rlinfra.layout.paths()); the ports are in `ray`
    # and `services`.
    paths: dict[str, str] = Field(default_factory=dict)
    ray: RayPorts = Field(default_factory=RayPorts)
    services: list[Service] = Field(default_factory=list)
    versions: dict[str, str] = Field(default_factory=dict)
    stage: Stage = Stage.PLANNED
    error: str | None = None
    hosts: list[Host] = Field(default_factory=list)
    ansible_digest: str | None = None
    check: CheckResult | None = None
    jobs: list[JobEntry] = Field(default_factory=list)
    # Lost-node recoveries of `run --recover` (rlinfra.ops.recovery), oldest first.
    recoveries: list[Recovery] = Field(default_factory=list)
    created_at: str | None = None
    updated_at: str | None = None

    @property
    def dashboard_port(self) -> int:
        return self.ray.dashboard_port

    def with_(self, **fields: Any) -> Record:
        """A validated copy with ``fields`` changed."""
        return Record.model_validate({**self.model_dump(), **fields})
