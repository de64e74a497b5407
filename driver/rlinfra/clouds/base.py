"""What rlinfra asks of a cloud: one declared interface, required and optional operations.

A cloud is a class deriving from :class:`Cloud` in ``clouds/<name>/cloud.py``, its
Terraform modules under ``terraform/modules/`` (named by ``roots``) and, when it mounts buckets,
its tasks in the storage role. The operations call only what is declared here:

required (abstract)
    ``site`` (machines, accelerator, network: the cloud's decisions in the plan), ``tfvars``,
    ``ansible_vars``, ``check_inputs``, ``account_id``, ``preflight``,
    and the ``name``/``roots`` attributes.
optional (the defaults say "nothing to do" or "not offered")
    ``hosts_from_outputs`` (the inventory: by default the cluster root's ``inventory`` output,
    the cluster modules' contract),
    ``check_context`` (refuse cache/home placements before anything is built),
    ``profile_account`` (the account that the profile itself names, e.g. a GCP project: default
    bucket names derive from it without asking the cloud),
    ``gone_resources`` (state entries the world lost, for Terraform to replace; a cloud that
    offers it says so with ``finds_gone``, so that the others never read the state for it),
    ``capacity_error`` (a failed apply that another candidate machine may not hit),
    ``credentials_error`` (a Terraform run that failed for want of credentials),
    ``store`` (the store of a deployment's buckets, ``rlinfra.storage``, which
    `down --delete-buckets` counts and empties first),
    ``hosts_from_plan`` (machines that exist already: the inventory without a cluster root),
    ``release_lines`` and ``release_hosts`` (`down` of machines that stay: what it stops and
    removes on them; a cloud that offers one offers both, ``keeps_machines`` says whether),
    ``gather_facts`` (what the plan needs from the world, asked first: detected GPUs),
    ``up_question`` (what `up` says before it asks; by default it creates machines),
    ``with_take_over`` (`up --take-over`: hosts that run something else are taken over).

Every operation but ``preflight``, ``account_id`` and the bucket operations is pure (reads the
plan and context, calls nothing outside the process).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rlinfra.assets import asset_dir
from rlinfra.record import Host, Record
from rlinfra.storage.base import Store

if TYPE_CHECKING:
    from rlinfra.context import Context
    from rlinfra.errors import UsageError
    from rlinfra.plan import Plan, Site
    from rlinfra.profile import Override, Profile


@dataclass(frozen=True)
class UpQuestion:
    """`up`'s question before it changes a cloud: what it will do, and what a "no" leaves."""

    notice: str
    declined: str


@dataclass(frozen=True)
class Gone:
    """A resource of Terraform's state that the world no longer has (Terraform replaces it)."""

    address: str
    what: str
    reason: str


class Cloud(ABC):
    """One cloud's part of a deployment. Instances hold no state; one per cloud."""

    name: ClassVar[str]
    # Terraform roots rendered per cluster (in order), each with the modules copied into it.
    roots: ClassVar[Mapping[str, tuple[str, ...]]]
    # Whether the nodes see this machine's files (rlinfra's cache among them): they then copy
    # tools from there instead of receiving them over SSH.
    hosts_see_controller_files: ClassVar[bool] = False
    # Whether default bucket names end in the account's suffix (bucket names are global).
    buckets_per_account: ClassVar[bool] = True
    # Whether a profile may list this cloud among several (`cloud: [aws, gcp]`): its catalog has
    # prices to compare with the others'.
    candidate: ClassVar[bool] = False
    # The provider of `rlinfra_node.spot_watch` that reads this cloud's preemption notices on
    # spot nodes (one of the node contract's ``layout.SPOT_PROVIDERS``); None: the cloud gives
    # none, and the job learns of a preemption when the node is gone.
    spot_notices: ClassVar[str | None] = None

    # -- required

    @abstractmethod
    def site(self, profile: Profile, source: str, cluster: str, offered: set[str] | None) -> Site:
        """Machines, accelerator and network for the profile, from the cloud's catalog (pure;
        ``offered``: instance types the zone offers, when a preflight asked). UsageError for a
        profile the cloud cannot serve, naming the field."""

    @abstractmethod
    def tfvars(self, plan: Plan, ctx: Context) -> dict[str, dict[str, Any]]:
        """Terraform variables per root (``terraform.tfvars.json``). Pure."""

    @abstractmethod
    def ansible_vars(self, plan: Plan, ctx: Context) -> dict[str, Any]:
        """Role variables that differ on this cloud. Pure."""

    @abstractmethod
    def check_inputs(self, plan: Plan) -> None:
        """Refuse (UsageError) what `up` needs that the profile and flags alone decide."""

    @abstractmethod
    def account_id(self, environ: Mapping[str, str], required: bool) -> str | None:
        """The account (or project) that default bucket names derive from; None when it has
        none or cannot be known without credentials (and ``required`` is false)."""

    @abstractmethod
    def preflight(self, plan: Plan) -> None:
        """Read-only checks of the world before anything is created; UsageError to refuse."""

    # -- optional

    def hosts_from_outputs(self, outputs: dict[str, Any]) -> list[Host]:
        """The inventory from the cluster root's ``terraform output -json``: its ``inventory``
        output, as the cluster modules' contract gives it (``ssh_user``, and each node's
        ``name``, ``rank``, ``ssh_host``, ``private_ip`` and ``interface``)."""
        inventory = outputs["inventory"]["value"]
        return [
            Host(
                name=node["name"],
                rank=int(node["rank"]),
                ssh_host=node["ssh_host"],
                private_ip=node["private_ip"],
                interface=node.get("interface") or "",
                ssh_user=inventory["ssh_user"],
            )
            for node in inventory["nodes"]
        ]

    def check_context(self, plan: Plan, ctx: Context) -> None:
        """Refuse placements of rlinfra's home, cache or buckets this cloud cannot use."""
        return None

    def profile_account(self, profile: Profile) -> str | None:
        """The account (or project) the profile names, which ``account_id`` need not ask for;
        None where the profile names none. Pure."""
        return None

    def gone_resources(self, root: str, root_dir: Path, state: dict[str, Any]) -> list[Gone]:
        """Entries of a root's state that the world lost (and Terraform cannot see)."""
        return []

    @property
    def finds_gone(self) -> bool:
        """Whether ``gone_resources`` is offered (reading a root's state for it starts the
        Terraform provider, seconds that a cloud without it should not spend)."""
        return type(self).gone_resources is not Cloud.gone_resources

    def capacity_error(self, output: str) -> str | None:
        """The cloud's "no capacity or quota for this machine here" in Terraform's output (the
        error code), else None: `up` then tries the plan's next candidate."""
        return None

    def credentials_error(self, output: str) -> UsageError | None:
        """Terraform's output says the cloud's provider found no credentials (or the cloud
        refused them): the error to give instead, naming the cloud and how to set them up;
        else None."""
        return None

    def store(self, folder: Path) -> Store | None:
        """The store of the buckets of the deployment in ``folder``, which `down
        --delete-buckets` counts and empties before Terraform destroys them; None: buckets that
        need no emptying (folders of this machine)."""
        return None

    def terraform_dir(self) -> Path:
        """Where this cloud's Terraform is: ``roots/<cloud>/<root>`` and ``modules/<module>``
        (rlinfra's own ``terraform/`` for the clouds it ships)."""
        return asset_dir("terraform")

    def root_source(self, plan: Plan, root: str) -> tuple[str, tuple[str, ...]]:
        """Where a root's Terraform comes from: ``terraform/roots/<cloud>/<root>`` and the
        modules it uses (by default this cloud's own, ``roots[root]``)."""
        return self.name, self.roots[root]

    def before_configure(self, plan: Plan, folder: Path, nodes: list[Host]) -> None:
        """What the nodes need before Ansible configures them that must not pass through
        Ansible (a key sent over SSH); nothing by default."""
        return None

    def gather_facts(
        self, profile: Profile, source: str, cluster: str
    ) -> tuple[Profile, Override | None]:
        """Facts of the world the plan is made from, asked before planning (read-only; the ssh
        cloud's hosts' GPUs): the profile with them, and the change to show; by default the
        profile as it is."""
        return profile, None

    def up_question(self, plan: Plan) -> UpQuestion | None:
        """What `up` tells before asking "Proceed?" (unless --yes); None: it does not ask."""
        return UpQuestion(
            f"This creates {plan.num_nodes} node(s) on {self.name}.", "nothing was created"
        )

    def with_take_over(self, plan: Plan) -> Plan:
        """The plan with hosts that run another cluster taken over (`up --take-over`)."""
        from rlinfra.errors import UsageError

        raise UsageError("--take-over is for cloud ssh (hosts you already have)")

    def hosts_from_plan(self, plan: Plan, ctx: Context) -> list[Host] | None:
        """The inventory, where the machines exist before `up` (no cluster root); None: the
        cluster root's outputs give it (``hosts_from_outputs``). Pure."""
        return None

    @property
    def keeps_machines(self) -> bool:
        """Whether `down` leaves the machines (``release_lines``/``release_hosts``)."""
        return type(self).release_hosts is not Cloud.release_hosts

    def release_lines(self, record: Record, purge: bool) -> list[str]:
        """What `down` (``purge``: `down --purge`) stops and removes on each machine, shown
        before it asks. Pure."""
        raise NotImplementedError(f"the {self.name} cloud destroys its machines")

    def release_hosts(self, folder: Path, record: Record, purge: bool) -> None:
        """Stop rlinfra's processes and remove its node contract (``purge``: everything rlinfra
        installed) on every machine, leaving the machines; OperationError naming the hosts
        where that failed."""
        raise NotImplementedError(f"the {self.name} cloud destroys its machines")
