"""Summaries of Terraform plans for people who approve the spend (pure: JSON in, data out).

Input is ``terraform show -json PLANFILE``. The summary counts resources to create, change and
destroy by type, prices the instances (EC2 instances and Compute Engine VMs, named as
``instance_key`` names them), and calls out destructive changes and anything reachable from the
whole internet (security group rules, VPC firewall rules).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlinfra.plan import Candidate

WORLD = {"0.0.0.0/0", "::/0"}
PERSISTENT_TYPES = {"aws_s3_bucket", "google_storage_bucket", "module.bucket"}


@dataclass
class PlanSummary:
    create: Counter[str] = field(default_factory=Counter)
    update: Counter[str] = field(default_factory=Counter)
    delete: Counter[str] = field(default_factory=Counter)
    replace: Counter[str] = field(default_factory=Counter)
    instances: Counter[str] = field(default_factory=Counter)
    destructive: list[str] = field(default_factory=list)
    exposed: list[str] = field(default_factory=list)
    hourly_usd: float | None = None
    unpriced: list[str] = field(default_factory=list)

    @property
    def changes(self) -> bool:
        return bool(self.create or self.update or self.delete or self.replace)

    def to_json(self) -> dict[str, Any]:
        return {
            "create": dict(sorted(self.create.items())),
            "update": dict(sorted(self.update.items())),
            "delete": dict(sorted(self.delete.items())),
            "replace": dict(sorted(self.replace.items())),
            "instances": dict(sorted(self.instances.items())),
            "hourly_usd": self.hourly_usd,
            "unpriced_instance_types": sorted(self.unpriced),
            "destructive": self.destructive,
            "exposed_to_world": self.exposed,
        }


def _action(actions: list[str]) -> str:
    if actions == ["no-op"] or actions == ["read"]:
        return "none"
    if "delete" in actions and "create" in actions:
        return "replace"
    return actions[0] if actions else "none"


def instance_key(machine_type: str, guests: Iterable[tuple[str, int]] = ()) -> str:
    """How the summary names a Compute Engine VM: its machine type, plus ``+TYPExCOUNT`` for
    each kind of GPU attached to it (``n1-standard-8+nvidia-tesla-t4x1``). Prices are keyed the
    same way (``Candidate.planned_as``)."""
    machine = machine_type.rsplit("/", 1)[-1]  # a full machineTypes URL names the same type
    return machine + "".join(f"+{kind}x{count}" for kind, count in guests if count)


def prices_of(candidates: Iterable[Candidate]) -> dict[str, float]:
    """USD per hour of each candidate, keyed as a plan's summary names it; unknown prices
    (NaN) are left out, so the summary lists those machines as unpriced."""
    return {c.planned_as: c.hourly for c in candidates if c.hourly == c.hourly}


def _instance(kind: str, values: dict[str, Any]) -> str | None:
    """The priced name of an instance resource, None for other resources."""
    if kind == "aws_instance":
        return str(values.get("instance_type") or "?")
    if kind == "google_compute_instance":
        guests = [
            (str(g.get("type")), int(g.get("count") or 0))
            for g in values.get("guest_accelerator") or []
        ]
        return instance_key(str(values.get("machine_type") or "?"), guests)
    return None


def _firewall_ports(allows: list[dict[str, Any]]) -> str:
    parts = []
    for allow in allows:
        protocol = allow.get("protocol") or "?"
        ports = allow.get("ports") or []
        parts.append(f"{protocol} {','.join(ports)}" if ports else f"{protocol} (every port)")
    return "; ".join(parts) or "nothing allowed"


def _ingress_world(resource_type: str, values: dict[str, Any]) -> list[str]:
    """Ingress rules of a security group (inline or separate) or a VPC firewall open to the
    world."""
    found = []
    if resource_type == "google_compute_firewall":
        ingress = (values.get("direction") or "INGRESS") == "INGRESS"
        if (
            ingress
            and not values.get("disabled")
            and set(values.get("source_ranges") or []) & WORLD
        ):
            found.append(_firewall_ports(values.get("allow") or []))
        return found
    if resource_type == "aws_security_group":
        for rule in values.get("ingress") or []:
            cidrs = set(rule.get("cidr_blocks") or []) | set(rule.get("ipv6_cidr_blocks") or [])
            if cidrs & WORLD:
                found.append(f"ports {rule.get('from_port')}-{rule.get('to_port')}")
    elif resource_type == "aws_vpc_security_group_ingress_rule":
        if values.get("cidr_ipv4") in WORLD or values.get("cidr_ipv6") in WORLD:
            found.append(f"ports {values.get('from_port')}-{values.get('to_port')}")
    elif resource_type == "aws_security_group_rule" and values.get("type") == "ingress":
        cidrs = set(values.get("cidr_blocks") or []) | set(values.get("ipv6_cidr_blocks") or [])
        if cidrs & WORLD:
            found.append(f"ports {values.get('from_port')}-{values.get('to_port')}")
    return found


def summarize(plan_json: dict[str, Any], prices: dict[str, float] | None = None) -> PlanSummary:
    """Summarize a plan; ``prices`` maps instance type -> USD per hour."""
    summary = PlanSummary()
    for change in plan_json.get("resource_changes") or []:
        kind = change.get("type", "?")
        address = change.get("address", kind)
        action = _action((change.get("change") or {}).get("actions") or [])
        if action == "none":
            continue
        getattr(summary, action if action != "replace" else "replace")[kind] += 1
        after = (change.get("change") or {}).get("after") or {}
        if action in {"create", "replace", "update"}:
            instance = _instance(kind, after)
            if instance is not None:
                summary.instances[instance] += 1
            for ports in _ingress_world(kind, after):
                summary.exposed.append(f"{address}: {ports} open to the internet")
        if action in {"delete", "replace"}:
            verb = "replaced" if action == "replace" else "destroyed"
            note = " (data in it is lost)" if kind in PERSISTENT_TYPES else ""
            summary.destructive.append(f"{address} is {verb}{note}")
    if prices is not None:
        total = 0.0
        for instance_type, count in summary.instances.items():
            if instance_type in prices:
                total += prices[instance_type] * count
            else:
                summary.unpriced.append(instance_type)
        summary.hourly_usd = round(total, 4)
    return summary


def render_text(summary: PlanSummary) -> list[str]:
    lines = []
    for label, counter in (
        ("create", summary.create),
        ("change", summary.update),
        ("replace", summary.replace),
        ("destroy", summary.delete),
    ):
        for kind, count in sorted(counter.items()):
            lines.append(f"  {label:<8} {count:>3} x {kind}")
    if not summary.changes:
        lines.append("  no changes")
    for instance_type, count in sorted(summary.instances.items()):
        lines.append(f"  instances: {count} x {instance_type}")
    if summary.hourly_usd is not None and summary.instances:
        lines.append(f"  estimated cost: ${summary.hourly_usd:,.2f} per hour (catalog prices)")
    for item in summary.unpriced:
        lines.append(f"  ! no catalog price for {item}")
    for item in summary.destructive:
        lines.append(f"  ! DESTRUCTIVE: {item}")
    for item in summary.exposed:
        lines.append(f"  ! EXPOSED: {item}")
    return lines
