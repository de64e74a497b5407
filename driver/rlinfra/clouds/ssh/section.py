"""The `ssh:` section of a profile: machines the team already has, reached over SSH.

Pure models (no file is read, no host is asked): a hosts list, the head, an optional bastion,
and what preflight holds each host to. Per-host settings (user, port, key, bastion) default to
the section's own.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from rlinfra.cloud_section import CloudSection
from rlinfra.clouds.ssh.inventory import HOST_NAME_RE, expand
from rlinfra.strict import StrictModel

# A DNS name or an IPv4/IPv6 address (checked further below).
ADDRESS_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.:-]{0,252}$")
USER_RE = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$")


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def _address(value: str) -> str:
    if not ADDRESS_RE.fullmatch(value):
        raise ValueError(f"{value!r} is not a host name or IP address")
    return value


def _user(value: str | None) -> str | None:
    if value is not None and not USER_RE.fullmatch(value):
        raise ValueError(f"{value!r} is not a user name")
    return value


def _port(value: int | None) -> int | None:
    if value is not None and not 1 <= value <= 65535:
        raise ValueError(f"port {value} is out of range (1-65535)")
    return value


def _key(value: str | None) -> str | None:
    if value is not None and (not value.strip() or "\n" in value):
        raise ValueError("give the path of a private key file")
    return value


class SshJump(StrictModel):
    """A bastion between this machine and the hosts (SSH ProxyCommand with ``-W``)."""

    address: str = Field(description="The bastion's address, as this machine reaches it.")
    user: str | None = Field(default=None, description="Login user (default: the section's).")
    port: int | None = Field(default=None, description="SSH port (default: the section's).")
    identity_file: str | None = Field(
        default=None, description="Private key for the bastion (default: the section's)."
    )
    agent: bool | None = Field(
        default=None, description="Use the SSH agent for the bastion (default: the section's)."
    )

    v_address = field_validator("address")(_address)
    v_user = field_validator("user")(_user)
    v_port = field_validator("port")(_port)
    v_identity_file = field_validator("identity_file")(_key)


class SshHost(StrictModel):
    """One machine of the cluster."""

    name: str | None = Field(
        default=None, description="Node name (default <cluster>-<rank>); lowercase, digits, '-'."
    )
    address: str = Field(description="Where this machine reaches the host (IP or DNS name).")
    user: str | None = Field(default=None, description="Login user (default: the section's).")
    port: int | None = Field(default=None, description="SSH port (default: the section's).")
    identity_file: str | None = Field(default=None, description="Private key (default: section).")
    agent: bool | None = Field(default=None, description="Use the SSH agent (default: section).")
    private_address: str | None = Field(
        default=None,
        description="IPv4 address for cluster traffic (Ray, collectives); default: address.",
    )
    jump: SshJump | None = Field(default=None, description="Bastion (default: the section's).")

    v_address = field_validator("address")(_address)
    v_user = field_validator("user")(_user)
    v_port = field_validator("port")(_port)
    v_identity_file = field_validator("identity_file")(_key)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not HOST_NAME_RE.fullmatch(value):
            raise ValueError(
                f"{value!r}: 1-31 lowercase letters, digits and '-', starting with a letter"
            )
        return value

    @field_validator("private_address")
    @classmethod
    def _private(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            ipaddress.IPv4Address(value)
        except ValueError as exc:
            raise ValueError(f"{value!r} is not an IPv4 address") from exc
        return value

    @model_validator(mode="after")
    def _cluster_ip(self) -> SshHost:
        if self.private_address is None:
            try:
                ipaddress.IPv4Address(self.address)
            except ValueError:
                raise ValueError(
                    f"address {self.address!r} is not an IPv4 address: give private_address, "
                    "the IPv4 address the other hosts reach this one at"
                ) from None
        return self

    @property
    def cluster_ip(self) -> str:
        return self.private_address or self.address


ENV_NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]{0,127}$")
AWS_REGION_RE = re.compile(r"^[a-z]{2}(-[a-z]+)+-[0-9]+$")


class SshBuckets(StrictModel):
    """Buckets of a cloud's object store for the hosts (made by Terraform, mounted with rclone).

    The hosts have no instance role to grant the bucket, so they get a key of the user's: the
    two environment variables named here hold it on this machine (ideally a key that may use
    these buckets only). rlinfra sends it to each host over SSH's standard input, into a 0600
    file under /opt/rlinfra/secrets that rclone reads; it is never in a rendered file,
    Terraform's state, Ansible's files or variables, a log or a process argument. Terraform
    makes the buckets with this machine's own AWS credentials, as on the aws cloud.
    """

    cloud: Literal["aws"] = Field(description="The object store: S3 (aws).")
    region: str = Field(default="us-east-1", description="The buckets' AWS region.")
    access_key_id_env: str = Field(
        default="BUCKET_AWS_ACCESS_KEY_ID",
        description="Environment variable (here) with the hosts' access key id.",
    )
    secret_access_key_env: str = Field(
        default="BUCKET_AWS_SECRET_ACCESS_KEY",
        description="Environment variable (here) with the hosts' secret access key.",
    )

    @field_validator("region")
    @classmethod
    def _region(cls, value: str) -> str:
        if not AWS_REGION_RE.fullmatch(value):
            raise ValueError(f"{value!r} is not an AWS region name such as us-east-1")
        return value

    @field_validator("access_key_id_env", "secret_access_key_env")
    @classmethod
    def _env_name(cls, value: str) -> str:
        if not ENV_NAME_RE.fullmatch(value):
            raise ValueError(f"{value!r} is not an environment variable name (A-Z, 0-9, _)")
        return value

    @model_validator(mode="after")
    def _two(self) -> SshBuckets:
        if self.access_key_id_env == self.secret_access_key_env:
            raise ValueError("access_key_id_env and secret_access_key_env name one variable")
        return self

    @property
    def env_names(self) -> tuple[str, str]:
        return self.access_key_id_env, self.secret_access_key_env


class SshHosts(StrictModel):
    """Machines you already have (``cloud: ssh``): no Terraform compute, rlinfra's nodes only."""

    hosts: list[SshHost] = Field(description="The machines, head first unless `head` names one.")
    inventory: str | None = Field(
        default=None,
        description="An Ansible inventory file (INI or YAML; relative to the profile's folder) "
        "that lists the hosts instead of `hosts`; read when the profile is loaded.",
    )
    inventory_group: str | None = Field(
        default=None, description="The inventory's group to use (default: every host)."
    )
    head: str | None = Field(default=None, description="Name of the head host (default: first).")
    user: str = Field(default="root", description="Login user (root, or passwordless sudo).")
    port: int = Field(default=22, description="SSH port.")
    identity_file: str | None = Field(
        default=None, description="Private key file; unset: the SSH agent (agent: true)."
    )
    agent: bool = Field(default=False, description="Use the SSH agent instead of a key file.")
    jump: SshJump | None = Field(default=None, description="Bastion for every host.")
    detect_gpus: bool = Field(
        default=False,
        description="Take the GPUs from the hosts (nvidia-smi, when `plan`, `render` or `up` "
        "runs) instead of declaring resources.accelerators; every host must have the same.",
    )
    shared_filesystem: bool = Field(
        default=False,
        description="The hosts see this machine's RLINFRA_HOME and cache at the same paths (an "
        "NFS share, or hosts on this machine): local buckets and one shared package cache.",
    )
    buckets: SshBuckets | None = Field(
        default=None,
        description="Make the profile's buckets in a cloud's object store (Terraform) and mount "
        "them on the hosts with rclone, with a key the hosts get over SSH; unset: local buckets "
        "(folders of this machine), which need shared_filesystem.",
    )
    min_free_gb: float = Field(
        default=10.0, ge=0.0, description="Free disk under /opt that preflight asks of each host."
    )
    max_clock_skew_s: float = Field(
        default=5.0, gt=0.0, description="Largest clock difference to this machine, seconds."
    )
    take_over: bool = Field(
        default=False,
        description="Take over hosts that run another rlinfra cluster or a Ray that rlinfra did "
        "not start (`up --take-over` sets it for one run).",
    )

    v_user = field_validator("user")(_user)
    v_port = field_validator("port")(_port)
    v_identity_file = field_validator("identity_file")(_key)

    @field_validator("hosts")
    @classmethod
    def _some(cls, value: list[SshHost]) -> list[SshHost]:
        if not value:
            raise ValueError("list at least one host (or name an Ansible `inventory`)")
        if len(value) > 64:
            raise ValueError("at most 64 hosts")
        names = [h.name for h in value if h.name is not None]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"host name {name!r} is used twice")
        seen: dict[tuple[str, int | None], int] = {}
        for index, host in enumerate(value):
            key = (host.address, host.port)
            if key in seen:
                raise ValueError(f"hosts[{index}] repeats hosts[{seen[key]}] ({host.address})")
            seen[key] = index
        ips = [h.cluster_ip for h in value]
        for ip in ips:
            if ips.count(ip) > 1:
                raise ValueError(f"two hosts share the cluster address {ip}")
        return value

    @model_validator(mode="after")
    def _credentials(self) -> SshHosts:
        if self.head is not None and self.head not in {h.name for h in self.hosts}:
            known = ", ".join(h.name for h in self.hosts if h.name) or "none has a name"
            raise ValueError(f"head {self.head!r} is not a host name (hosts: {known})")
        if self.identity_file is not None and self.agent:
            raise ValueError("give identity_file or agent: true, not both")
        for index, host in enumerate(self.hosts):
            for where, item in ((f"hosts[{index}]", host), (f"hosts[{index}].jump", host.jump)):
                if item is not None and item.identity_file is not None and item.agent:
                    raise ValueError(f"{where}: give identity_file or agent: true, not both")
        if self.jump is not None and self.jump.identity_file is not None and self.jump.agent:
            raise ValueError("jump: give identity_file or agent: true, not both")
        return self

    def ordered(self) -> list[SshHost]:
        """The hosts, the head first (then the others in the profile's order)."""
        if self.head is None:
            return list(self.hosts)
        head = next(h for h in self.hosts if h.name == self.head)
        return [head, *(h for h in self.hosts if h is not head)]


def default_num_nodes(data: dict[str, Any]) -> dict[str, Any]:
    """A profile of the ssh cloud that gives no ``resources.num_nodes`` uses every host."""
    if data.get("cloud") != "ssh":
        return data
    section = data.get("ssh")
    hosts = section.get("hosts") if isinstance(section, dict) else None
    resources = data.get("resources")
    if not isinstance(hosts, list) or not hosts:
        return data
    if resources is None:
        resources = {}
    if isinstance(resources, dict) and "num_nodes" not in resources:
        data = {**data, "resources": {**resources, "num_nodes": len(hosts)}}
    return data


def check(ssh: SshHosts, profile: Any) -> None:
    """The hosts and the profile's resources agree."""
    if profile.resources.num_nodes > len(ssh.hosts):
        raise ValueError(
            f"resources.num_nodes {profile.resources.num_nodes}: ssh.hosts lists "
            f"{len(ssh.hosts)} host(s)"
        )
    if ssh.detect_gpus and profile.resources.accelerators:
        raise ValueError(
            "ssh.detect_gpus: resources.accelerators is also set; declare the GPUs or "
            "detect them, not both"
        )


def gpus_given(data: dict[str, Any]) -> str | None:
    """`--gpus` says what the hosts have: nothing to detect."""
    section = data.get("ssh")
    if isinstance(section, dict) and section.get("detect_gpus"):
        section["detect_gpus"] = False
        return "detect"
    return None


SECTION = CloudSection(
    key="ssh",
    cloud="ssh",
    annotation=SshHosts,
    description="The machines of cloud ssh (hosts you already have).",
    missing="cloud ssh needs an `ssh:` section that lists the hosts",
    expand=expand,
    defaults=default_num_nodes,
    check=check,
    gpus_given=gpus_given,
)
