"""Profiles: YAML files validated into typed models, plus command-line overrides.

A profile says what to build (cloud, nodes, accelerators, storage, network, software) and what to
run on it. Loading is strict: an unknown key, a wrong type or a bad value is a ``ProfileError``
that names the file, the field and, for unknown keys, the closest known one.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    Field,
    SerializerFunctionWrapHandler,
    StringConstraints,
    ValidationError,
    create_model,
    field_validator,
    model_serializer,
    model_validator,
)

from rlinfra import layout
from rlinfra.accelerators import Accelerator, parse_accelerator
from rlinfra.cloud_section import CloudSection
from rlinfra.clouds import SECTIONS
from rlinfra.errors import ProfileError, UsageError
from rlinfra.serving import Serving
from rlinfra.strict import StrictModel
from rlinfra.workloads.model import Workload

CLUSTER_NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
BUCKET_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")

# A cloud's name; the clouds rlinfra deploys are its registry's (rlinfra.clouds.REGISTRY), and
# planning refuses any other, naming the file and field.
Cloud = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,30}$")]
# The clouds' own top-level keys (``rlinfra.cloud_section``), by key: the profile model below is
# made with them.
CLOUD_SECTIONS: dict[str, CloudSection] = {section.key: section for section in SECTIONS}


_Strict = StrictModel


class Resources(_Strict):
    """What each node needs."""

    accelerators: list[str] | None = Field(
        default=None,
        description="GPU spec per node ('H100:8') or candidates, cheapest offered wins.",
    )
    num_nodes: int = Field(default=1, description="Number of nodes; the first is the Ray head.")
    cpus: int | None = Field(default=None, description="Minimum vCPUs per node.")
    memory_gb: int | None = Field(default=None, description="Minimum memory per node, GB.")
    disk_gb: int = Field(default=100, description="Root disk size, GB.")
    disk_type: str = Field(default="gp3", description="Root disk type (cloud-specific).")
    instance_type: str | None = Field(default=None, description="Exact type; skips the catalog.")
    spot: bool = Field(default=False, description="Use spot/preemptible capacity.")
    max_price: float | None = Field(default=None, description="Spot price cap per hour, USD.")
    image: str | None = Field(default=None, description="Machine image id; looked up if unset.")
    placement_group: bool = Field(
        default=True, description="Cluster placement group when there is more than one node."
    )

    @field_validator("accelerators", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [value]
        return value

    @field_validator("accelerators")
    @classmethod
    def _parse(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("give at least one accelerator, or leave the field out for CPU nodes")
        specs = [str(parse_accelerator(item)) for item in value]
        if len(set(specs)) != len(specs):
            raise ValueError("the same accelerator is listed twice")
        return specs

    @field_validator("num_nodes")
    @classmethod
    def _nodes(cls, value: int) -> int:
        if not 1 <= value <= 64:
            raise ValueError("must be between 1 and 64")
        return value

    @field_validator("cpus", "memory_gb", "disk_gb")
    @classmethod
    def _positive(cls, value: int | None) -> int | None:
        if value is not None and value < 1:
            raise ValueError("must be at least 1")
        return value

    @property
    def accelerator_candidates(self) -> list[Accelerator]:
        return [parse_accelerator(spec) for spec in self.accelerators or []]


class RayPorts(_Strict):
    """Ray's ports. The dashboard and the job API behind it ask for the cluster's Ray token."""

    head_port: int = layout.RAY_HEAD_PORT
    dashboard_port: int = layout.RAY_DASHBOARD_PORT
    dashboard_host: str = "127.0.0.1"
    dashboard_agent_listen_port: int = layout.RAY_DASHBOARD_AGENT_LISTEN_PORT
    client_server_port: int = layout.RAY_CLIENT_SERVER_PORT

    @field_validator("dashboard_host")
    @classmethod
    def _host(cls, value: str) -> str:
        try:
            ipaddress.ip_address(value)
        except ValueError as exc:
            raise ValueError(f"{value!r} is not an IP address") from exc
        return value

    def ports(self) -> dict[str, int]:
        return {
            "head_port": self.head_port,
            "dashboard_port": self.dashboard_port,
            "dashboard_agent_listen_port": self.dashboard_agent_listen_port,
            "client_server_port": self.client_server_port,
        }


class Network(_Strict):
    """Addresses, interfaces and what is reachable from where."""

    interface: str | None = Field(
        default=None,
        description="Collective (NCCL/GLOO) interface; detected from the default route if unset.",
    )
    subnet: str | None = Field(default=None, description="Cluster subnet (local: an IPv4 /24).")
    allowed_cidrs: list[str] = Field(
        default_factory=list, description="Who may reach SSH and the service ports."
    )
    allow_public: bool = Field(
        default=False, description="Allow 0.0.0.0/0 in allowed_cidrs or a public dashboard."
    )
    efa: bool = Field(default=False, description="EFA interfaces on types that support them.")
    ray: RayPorts = Field(default_factory=RayPorts)

    @field_validator("interface")
    @classmethod
    def _iface(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z0-9_.:-]{1,15}", value):
            raise ValueError(f"{value!r} is not an interface name")
        return value

    @field_validator("subnet")
    @classmethod
    def _subnet(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            net = ipaddress.IPv4Network(value, strict=True)
        except ValueError as exc:
            raise ValueError(f"{value!r} is not an IPv4 network") from exc
        return str(net)

    @field_validator("allowed_cidrs")
    @classmethod
    def _cidrs(cls, value: list[str]) -> list[str]:
        out = []
        for cidr in value:
            try:
                out.append(str(ipaddress.ip_network(cidr, strict=False)))
            except ValueError as exc:
                raise ValueError(f"{cidr!r} is not a CIDR block") from exc
        return out

    @model_validator(mode="after")
    def _public(self) -> Network:
        if not self.allow_public:
            if "0.0.0.0/0" in self.allowed_cidrs or "::/0" in self.allowed_cidrs:
                raise ValueError(
                    "allowed_cidrs opens the cluster to the whole internet; "
                    "set network.allow_public: true if that is intended"
                )
            if ipaddress.ip_address(self.ray.dashboard_host).is_unspecified:
                raise ValueError(
                    "ray.dashboard_host 0.0.0.0 exposes Ray's job API (token-protected) to every network; "
                    "set network.allow_public: true if that is intended"
                )
        return self


class Storage(_Strict):
    """A bucket, and where nodes see it."""

    bucket: str | None = Field(
        default=None,
        description="Exact bucket name. Unset: rlinfra-<profile>-<8 hex digits of the account "
        "id's SHA-256> (unique per account); --env CHECKPOINT_BUCKET_NAME=NAME names the first.",
    )
    prefix: str | None = Field(
        default=None,
        description="Start of the default name (default rlinfra-<profile>); profiles that share "
        "a bucket (train, then serve or infer) give the same prefix.",
    )
    mount_path: str = "/checkpoints"
    mode: Literal["MOUNT", "COPY"] = "MOUNT"

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[a-z0-9][a-z0-9-]{1,40}", value):
            raise ValueError(f"prefix {value!r}: 2-41 lowercase letters, digits and '-'")
        return value

    @field_validator("bucket")
    @classmethod
    def _bucket(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not BUCKET_NAME_RE.fullmatch(value) or ".." in value:
            raise ValueError(
                f"{value!r} is not a valid bucket name (3-63 characters: lowercase letters, "
                "digits, '.', '-'; starts and ends with a letter or digit)"
            )
        return value

    @field_validator("mount_path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not value.startswith("/") or value.rstrip("/") in ("", "/etc", "/usr", "/opt", "/tmp"):
            raise ValueError(f"{value!r} must be an absolute path outside system folders")
        return value.rstrip("/")


class Software(_Strict):
    """What gets installed on every node."""

    pin_set: str = Field(
        default="cpu-sandbox", description="Named pin set (rlinfra/data/pinsets.yaml)."
    )
    python: str = Field(default="3.10", description="Python version, or 'system'.")
    wheelhouse: str | None = Field(
        default=None,
        description="'auto' (build on the controller), a folder of wheels, or unset (index).",
    )


class Check(_Strict):
    """The cluster acceptance check (a distributed all-reduce) run at the end of `up`."""

    enabled: bool = True
    min_busbw_gbps: float = Field(default=0.0, ge=0.0, description="Fail below this bus bandwidth.")
    sizes_mib: list[int] | None = Field(
        default=None,
        description=(
            "All-reduce message sizes in MiB. Unset: 1, 4, 16 with gloo (CPU nodes, whose bus "
            "bandwidth levels off by 16 MiB), 64, 256, 1024 with NCCL (GPU nodes)."
        ),
    )

    @field_validator("sizes_mib")
    @classmethod
    def _sizes(cls, value: list[int] | None) -> list[int] | None:
        if value is None:
            return value
        if not value or any(size < 1 or size > 8192 for size in value):
            raise ValueError("give sizes between 1 and 8192 MiB")
        return value


class State(_Strict):
    """Where Terraform keeps the deployment's state.

    ``local`` (the default): terraform.tfstate files in the deployment folder. ``s3``: an
    existing S3 bucket, one object per root (``<key_prefix>/<cluster>/<root>.tfstate``), encrypted,
    with Terraform's native lock file next to it (``use_lockfile``), so a team and CI share one
    state and two applies never run at once.
    """

    backend: Literal["local", "s3"] = "local"
    bucket: str | None = Field(default=None, description="The state bucket (s3; must exist).")
    key_prefix: str = Field(default="rlinfra", description="Folder of the state objects.")
    region: str | None = Field(
        default=None, description="The bucket's region (default: profile's)."
    )

    @field_validator("bucket")
    @classmethod
    def _bucket(cls, value: str | None) -> str | None:
        if value is not None and (not BUCKET_NAME_RE.fullmatch(value) or ".." in value):
            raise ValueError(f"{value!r} is not a valid bucket name")
        return value

    @field_validator("key_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,200}", value) or ".." in value:
            raise ValueError(f"{value!r}: use letters, digits, '.', '_', '-' and '/'")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _needs_bucket(self) -> State:
        if self.backend == "s3" and self.bucket is None:
            raise ValueError("backend s3 needs a bucket (an existing S3 bucket for the state)")
        if self.backend == "local" and self.bucket is not None:
            raise ValueError("bucket is only for backend s3")
        return self


class Recovery(_Strict):
    """What `rlinfra run --recover` may do when the job loses a node."""

    max_attempts: int = Field(
        default=3,
        ge=0,
        le=20,
        description="Lost-node recoveries (heal the cluster, resubmit, resume) before giving up.",
    )


class Profile(_Strict):
    """A whole profile: the fields every cloud reads. The model profiles are validated with,
    ``SCHEMA`` (below), is this one with each cloud's own key (``CLOUD_SECTIONS``) added; a
    cloud reads its key with ``section``."""

    name: str = ""
    description: str = ""
    cloud: Cloud = Field(
        default="local",
        description="The cloud; a list (e.g. [aws, gcp]) makes each a candidate and `plan` "
        "picks the cheapest (`--cloud` picks one).",
    )
    # Set from a list under `cloud`: the candidate clouds (`cloud` is then the first).
    clouds: list[Cloud] = Field(default_factory=list)
    region: str | None = None
    zone: str | None = None
    regions: dict[Cloud, str] = Field(
        default_factory=dict, description="With several clouds: each cloud's region."
    )
    zones: dict[Cloud, str] = Field(
        default_factory=dict, description="With several clouds: each cloud's zone."
    )
    resources: Resources = Field(default_factory=Resources)
    ports: list[int] = Field(default_factory=list, description="Service ports to open.")
    env: dict[str, str] = Field(default_factory=dict)
    secrets: dict[str, Literal["required", "optional"]] = Field(default_factory=dict)
    storage: list[Storage] = Field(default_factory=list)
    network: Network = Field(default_factory=Network)
    software: Software = Field(default_factory=Software)
    check: Check = Field(default_factory=Check)
    workload: Workload | None = None
    serving: Serving | None = None
    state: State = Field(default_factory=State)
    recovery: Recovery = Field(default_factory=Recovery)

    def section(self, key: str) -> Any:
        """The value of a cloud's own key (``CLOUD_SECTIONS``), None where the profile sets
        none."""
        if key not in CLOUD_SECTIONS:
            raise KeyError(key)
        return getattr(self, key, None)

    @model_validator(mode="before")
    @classmethod
    def _section_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for section in CLOUD_SECTIONS.values():
                if section.defaults is not None:
                    data = section.defaults(data)
        return data

    @model_validator(mode="after")
    def _sections(self) -> Profile:
        listed = self.clouds or [self.cloud]
        for section in CLOUD_SECTIONS.values():
            value = self.section(section.key)
            if value is None:
                if section.missing is not None and self.cloud == section.cloud:
                    raise ValueError(section.missing)
                continue
            if section.cloud not in listed:
                raise ValueError(
                    f"{section.key} is for cloud {section.cloud} only "
                    f"(this profile's cloud is {self.cloud})"
                )
            if section.check is not None:
                section.check(value, self)
        return self

    @field_validator("env", mode="before")
    @classmethod
    def _env_strings(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            return {
                key: (str(item).lower() if isinstance(item, bool) else item)
                if isinstance(item, bool | int | float)
                else item
                for key, item in value.items()
            }
        return value

    @field_validator("env", "secrets")
    @classmethod
    def _names(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key in value:
            if not ENV_NAME_RE.fullmatch(key):
                raise ValueError(f"{key!r} is not a valid environment variable name")
        return value

    @model_serializer(mode="wrap")
    def _without_unset_sections(self, handler: SerializerFunctionWrapHandler) -> Any:
        """The clouds' own keys are left out of dumps while unset (and placed where their
        section says), and the candidate-cloud fields while empty, so profiles of one cloud
        (and their rendered copies and records) read as before those fields existed."""
        data = handler(self)
        if not isinstance(data, dict):
            return data
        for key in ("clouds", "regions", "zones"):
            if not getattr(self, key):
                data.pop(key, None)
        placed = {}
        for section in CLOUD_SECTIONS.values():
            if section.key in data:
                value = data.pop(section.key)
                if value is not None:
                    placed[section.key] = value
        for key, value in placed.items():
            after = CLOUD_SECTIONS[key].after
            if after is None or after not in data:
                data[key] = value
                continue
            items = list(data.items())
            at = [k for k, _ in items].index(after) + 1
            data = dict([*items[:at], (key, value), *items[at:]])
        return data

    @field_validator("ports")
    @classmethod
    def _ports(cls, value: list[int]) -> list[int]:
        for port in value:
            if not 1 <= port <= 65535:
                raise ValueError(f"port {port} is out of range (1-65535)")
        if len(set(value)) != len(value):
            dup = sorted({p for p in value if value.count(p) > 1})
            raise ValueError(f"port {dup[0]} is listed twice")
        return value

    @model_validator(mode="before")
    @classmethod
    def _cloud_list(cls, data: Any) -> Any:
        """``cloud: [aws, gcp]``: the candidates go to ``clouds``, the first to ``cloud``."""
        if isinstance(data, dict) and isinstance(data.get("cloud"), list):
            listed = data["cloud"]
            if not listed:
                raise ValueError("cloud: list at least one cloud")
            data = {**data, "cloud": listed[0], "clouds": listed if len(listed) > 1 else []}
        return data

    @model_validator(mode="after")
    def _candidate_clouds(self) -> Profile:
        if self.clouds:
            if len(set(self.clouds)) != len(self.clouds):
                raise ValueError("cloud: a cloud is listed twice")
            if self.region is not None or self.zone is not None:
                raise ValueError(
                    "region/zone: with several clouds give each cloud's under regions/zones"
                )
        for name, given in (("regions", self.regions), ("zones", self.zones)):
            extra = sorted(set(given) - set(self.clouds or [self.cloud]))
            if extra:
                raise ValueError(f"{name}.{extra[0]}: {extra[0]} is not a cloud of this profile")
            if given and not self.clouds:
                raise ValueError(f"{name}: only with several clouds (use region/zone)")
        return self

    def for_cloud(self, cloud: str) -> Profile:
        """This profile on one of its candidate clouds: that cloud's region and zone, and of
        the clouds' own keys only that cloud's."""
        if not self.clouds:
            return self
        data = self.model_dump(mode="python")
        data.update(
            cloud=cloud,
            clouds=[],
            region=self.regions.get(cloud),  # type: ignore[call-overload]
            zone=self.zones.get(cloud),  # type: ignore[call-overload]
            regions={},
            zones={},
        )
        for section in CLOUD_SECTIONS.values():
            if section.cloud != cloud:
                data.pop(section.key, None)
        return type(self).model_validate(data)

    @model_validator(mode="after")
    def _cross(self) -> Profile:
        ray_ports = self.network.ray.ports()
        for name, port in ray_ports.items():
            if not 1 <= port <= 65535:
                raise ValueError(f"network.ray.{name} {port} is out of range (1-65535)")
        seen: dict[int, str] = {}
        for name, port in ray_ports.items():
            if port in seen:
                raise ValueError(f"network.ray.{name} {port} is also network.ray.{seen[port]}")
            seen[port] = name
        for port in self.ports:
            if port in seen and seen[port] != "dashboard_port":
                raise ValueError(f"ports: {port} is also network.ray.{seen[port]}")
        overlap = set(self.env) & set(self.secrets)
        if overlap:
            raise ValueError(f"{sorted(overlap)[0]!r} is both in env and in secrets")
        mounts = [item.mount_path for item in self.storage]
        if len(set(mounts)) != len(mounts):
            raise ValueError("two storage entries share one mount_path")
        retrieval = self.serving.retrieval if self.serving else None
        if retrieval is not None:
            if any(c.endswith("/0") for c in retrieval.clients) and not self.network.allow_public:
                raise ValueError(
                    "serving.retrieval.clients opens the retrieval service to every network; "
                    "set network.allow_public: true if that is intended"
                )
            public = ipaddress.ip_address(retrieval.host).is_unspecified
            if public and not self.network.allow_public:
                raise ValueError(
                    f"serving.retrieval.host {retrieval.host} exposes the retrieval service to "
                    "every network; set network.allow_public: true if that is intended"
                )
            if retrieval.port in seen:
                raise ValueError(
                    f"serving.retrieval.port {retrieval.port} is also network.ray.{seen[retrieval.port]}"
                )
            if retrieval.data_dir is None and not self.storage:
                raise ValueError(
                    "serving.retrieval keeps its corpus and index in the bucket: add a storage "
                    "entry, or set serving.retrieval.data_dir"
                )
        return self

    @property
    def gpus_per_node(self) -> int:
        candidates = self.resources.accelerator_candidates
        return candidates[0].count if candidates else 0


def _schema() -> type[Profile]:
    """``Profile`` with each cloud's own key, optional, after the common fields."""
    fields: dict[str, Any] = {
        section.key: (
            section.annotation | None,
            Field(default=None, description=section.description),
        )
        for section in CLOUD_SECTIONS.values()
    }
    schema: type[Profile] = create_model(
        "Profile", __base__=Profile, __module__=__name__, __doc__=Profile.__doc__, **fields
    )
    return schema


# The model every profile is validated with: ``Profile`` and the clouds' own keys.
SCHEMA = _schema()


# ---------------------------------------------------------------- loading


def _location(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif item.startswith("function-") or item in {"list[str]", "str"}:
            continue
        else:
            parts.append(("." if parts else "") + item)
    return "".join(parts)


def _model_at(loc: Iterable[int | str]) -> type[BaseModel] | None:
    model: Any = SCHEMA
    for item in loc:
        if isinstance(item, int):
            continue
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return None
        info = model.model_fields.get(item)
        if info is None:
            return None
        annotation = info.annotation
        args = getattr(annotation, "__args__", ())
        candidates = [annotation, *args]
        model = next(
            (c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None
        )
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _first_error(source: str, exc: ValidationError) -> ProfileError:
    err = exc.errors()[0]
    loc = tuple(err["loc"])
    where = _location(loc)
    if err["type"] == "extra_forbidden":
        key = str(loc[-1])
        parent = _model_at(loc[:-1])
        hint = None
        if parent is not None:
            close = difflib.get_close_matches(key, list(parent.model_fields), n=1, cutoff=0.6)
            if close:
                hint = f"Did you mean {close[0]!r}?"
            else:
                hint = "Known keys: " + ", ".join(parent.model_fields)
        return ProfileError(source, where, "unknown key", hint)
    message = str(err["msg"])
    message = message.removeprefix("Value error, ")
    if err["type"] in {"int_parsing", "int_type", "bool_parsing", "float_parsing", "string_type"}:
        message = f"{message} (got {err.get('input')!r})"
    if not where:
        return ProfileError(source, "", message)
    return ProfileError(source, where, message)


def profile_from_data(data: Any, source: str, default_name: str) -> Profile:
    """Validate parsed YAML into a Profile; errors name ``source``."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ProfileError(source, "", "a profile must be a mapping of keys to values")
    data = dict(data)
    data.setdefault("name", default_name)
    try:
        return SCHEMA.model_validate(data)
    except ValidationError as exc:
        raise _first_error(source, exc) from None


def profile_dirs() -> list[Path]:
    """Where named profiles are looked up: $RLINFRA_PROFILE_PATH, then the built-in ones."""
    import os

    from rlinfra.assets import asset_dir

    dirs = [Path(p) for p in os.environ.get("RLINFRA_PROFILE_PATH", "").split(os.pathsep) if p]
    dirs.append(asset_dir("profiles"))
    return dirs


def known_profiles() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for directory in profile_dirs():
        if directory.is_dir():
            for path in sorted(directory.glob("*.yaml")):
                found.setdefault(path.stem, path)
    return found


def resolve_profile_path(name_or_path: str) -> Path:
    candidate = Path(name_or_path)
    if candidate.suffix in {".yaml", ".yml"} or "/" in name_or_path:
        if not candidate.is_file():
            raise UsageError(f"profile file {name_or_path} does not exist")
        return candidate
    known = known_profiles()
    if name_or_path in known:
        return known[name_or_path]
    close = difflib.get_close_matches(name_or_path, list(known), n=1)
    hint = (f"Did you mean {close[0]!r}? " if close else "") + "Known profiles: " + ", ".join(known)
    raise UsageError(f"unknown profile {name_or_path!r}", hint)


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (YAML keeps the last)."""


def _mapping_without_duplicates(loader: yaml.SafeLoader, node: yaml.MappingNode) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            line = key_node.start_mark.line + 1
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} is given twice (line {line})", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates
)


def load_profile(name_or_path: str) -> tuple[Profile, str]:
    """Load a profile by name or path; returns the profile and the source it came from."""
    if not name_or_path.strip():
        raise UsageError("--profile '': give a profile name or a YAML path")
    path = resolve_profile_path(name_or_path)
    source = str(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise UsageError(f"{source}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ProfileError(source, "", f"not UTF-8 text (byte {exc.start})") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass
    except yaml.constructor.ConstructorError as exc:
        raise ProfileError(source, "", str(exc.problem)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        raise ProfileError(source, "", f"not valid YAML{line}") from None
    if data is None:
        raise ProfileError(source, "", "the file is empty (a profile needs at least `cloud:`)")
    if isinstance(data, dict):
        for section in CLOUD_SECTIONS.values():
            if section.expand is not None:
                data = section.expand(data, path, source)
    return profile_from_data(data, source, path.stem), source


# ---------------------------------------------------------------- overrides


@dataclass(frozen=True)
class Override:
    """One command-line override, reported against the file's value."""

    field: str
    old: str
    new: str


@dataclass(frozen=True)
class Overrides:
    num_nodes: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    accelerators: list[str] | None = None
    secrets: dict[str, str | None] = field(default_factory=dict)
    allowed_cidrs: list[str] = field(default_factory=list)
    # --cloud: one of the profile's candidate clouds.
    cloud: str | None = None


def parse_env_pairs(pairs: Iterable[str], flag: str = "--env") -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not ENV_NAME_RE.fullmatch(name):
            raise UsageError(f"{flag} {pair!r}: expected NAME=VALUE")
        out[name] = value
    return out


def parse_secret_flags(items: Iterable[str]) -> dict[str, str | None]:
    """``NAME`` (value from the caller's environment) or ``NAME=VALUE``."""
    out: dict[str, str | None] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not ENV_NAME_RE.fullmatch(name):
            raise UsageError(f"--secret {name!r}: expected NAME or NAME=VALUE")
        out[name] = value if sep else None
    return out


def apply_overrides(
    profile: Profile, overrides: Overrides, source: str
) -> tuple[Profile, list[Override]]:
    """Return the profile with overrides applied and what each one changed."""
    data = profile.model_dump(mode="python")
    changes: list[Override] = []
    if overrides.num_nodes is not None:
        old = profile.resources.num_nodes
        data["resources"]["num_nodes"] = overrides.num_nodes
        changes.append(Override("resources.num_nodes", str(old), str(overrides.num_nodes)))
    if overrides.accelerators is not None:
        old_acc = ",".join(profile.resources.accelerators or []) or "none"
        data["resources"]["accelerators"] = overrides.accelerators
        for section in CLOUD_SECTIONS.values():
            said = section.gpus_given(data) if section.gpus_given is not None else None
            old_acc = said or old_acc
        changes.append(
            Override("resources.accelerators", old_acc, ",".join(overrides.accelerators))
        )
    if overrides.allowed_cidrs:
        old_cidrs = ",".join(profile.network.allowed_cidrs) or "none"
        merged = list(profile.network.allowed_cidrs)
        merged += [c for c in overrides.allowed_cidrs if c not in merged]
        data["network"]["allowed_cidrs"] = merged
        changes.append(Override("network.allowed_cidrs", old_cidrs, ",".join(merged)))
    for key, value in overrides.env.items():
        if key in profile.secrets:
            raise UsageError(f"--env {key}: {key} is a secret of this profile; use --secret {key}")
        old_env = profile.env.get(key)
        data["env"][key] = value
        changes.append(Override(f"env.{key}", "unset" if old_env is None else old_env, value))
    for key in overrides.secrets:
        if key not in profile.secrets:
            data["secrets"][key] = "optional"
            changes.append(Override(f"secrets.{key}", "undeclared", "optional"))
    if overrides.cloud is not None:
        listed = profile.clouds or [profile.cloud]
        if overrides.cloud not in listed:
            raise UsageError(
                f"--cloud {overrides.cloud}: {source} runs on {', '.join(listed)} only",
                "List the cloud under the profile's `cloud:` to make it a candidate.",
            )
        if profile.clouds:
            chosen = profile.for_cloud(overrides.cloud).model_dump(mode="python")
            for key in ("cloud", "clouds", "region", "zone", "regions", "zones", *CLOUD_SECTIONS):
                data[key] = chosen.get(key, {"clouds": [], "regions": {}, "zones": {}}.get(key))
            changes.append(Override("cloud", ",".join(listed), overrides.cloud))
    try:
        return type(profile).model_validate(data), changes
    except ValidationError as exc:
        error = _first_error(f"{source} (with command-line overrides)", exc)
        raise error from None


def check_cluster_name(name: str) -> str:
    if not CLUSTER_NAME_RE.fullmatch(name):
        raise UsageError(
            f"bad cluster name {name!r}: use 1-31 characters, lowercase letters, digits and '-', "
            "starting with a letter"
        )
    return name
