"""What every cloud of new machines asks of the profile's network before `up`: addresses that
may SSH in (the controller configures the nodes over SSH), IPv4 where the cloud's network is."""

from __future__ import annotations

import ipaddress

from rlinfra.errors import UsageError
from rlinfra.plan import Plan


def check_ssh_cidrs(plan: Plan, ipv4_only: str | None = None) -> None:
    """Refuse an empty ``network.allowed_cidrs`` and, where ``ipv4_only`` names a cloud whose
    cluster network is IPv4 only, an IPv6 range."""
    cidrs = plan.profile.network.allowed_cidrs
    if not cidrs:
        raise UsageError(
            f"{plan.source}: network.allowed_cidrs: empty, so nothing could SSH in to "
            "configure the nodes",
            "Pass --allow-cidr YOUR.ADDRESS/32 (repeatable) to plan and up, or set "
            "network.allowed_cidrs in the profile.",
        )
    ipv6 = [c for c in cidrs if ipaddress.ip_network(c).version != 4]
    if ipv4_only is not None and ipv6:
        raise UsageError(
            f"{plan.source}: network.allowed_cidrs: {ipv6[0]} is IPv6; the {ipv4_only} cluster "
            "network is IPv4 only",
            "Give the IPv4 addresses that may SSH in.",
        )
