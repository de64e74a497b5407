"""Local hosts lost under a standing Terraform state: which resources `up` replaces, and when a
saved plan is refused. host.sh's checks are stood in for by a script that answers from marker
files (the real checks run against real hosts in tests/terraform and tests/e2e)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlinfra.clouds.base import Gone
from rlinfra.clouds.local import cloud as local
from rlinfra.errors import OperationError, UsageError
from rlinfra.ops.roots import require_replacements

STUB = """#!/usr/bin/env bash
# Answers host.sh's checks from marker files; logs every call with its inputs.
here="$(dirname "$0")"
echo "$1 ${RLINFRA_BRIDGE:-} ${RLINFRA_NETNS:-} ${RLINFRA_VETH:-} ${RLINFRA_NODE_DIR:-} disk=${RLINFRA_NODE_DISK_SIZE-unset}" >>"$here/calls.log"
if [[ -e "$here/broken" ]]; then echo "rlinfra local cloud: ip: not found" >&2; exit 1; fi
case "$1" in
  bridge-check) [[ ! -e "$here/gone-$RLINFRA_BRIDGE" ]] || { echo "no such link"; exit 3; } ;;
  node-check) [[ ! -e "$here/gone-$RLINFRA_NETNS" ]] || { echo "its sshd is not running"; exit 3; } ;;
esac
"""


def node(rank: int, disk_size: str | None = "4g") -> dict[str, Any]:
    given: dict[str, Any] = {
        "name": f"c-{rank}",
        "netns": f"rl-abcd-{rank}",
        "veth": f"rlvabcd{rank}",
        "bridge": "rlb-abcd",
        "dir": f"/var/lib/nodes/c-{rank}",
    }
    if disk_size is not None:
        given["disk_size"] = disk_size
    return {
        "address": f"module.cluster.terraform_data.node[{rank}]",
        "mode": "managed",
        "type": "terraform_data",
        "name": "node",
        "index": rank,
        "values": {"id": str(rank), "input": given, "output": given},
    }


def state(*nodes: dict[str, Any]) -> dict[str, Any]:
    """A cluster root's state as `terraform show -json` shapes it."""
    bridge = {
        "address": "module.cluster.terraform_data.bridge",
        "mode": "managed",
        "type": "terraform_data",
        "name": "bridge",
        "values": {"id": "b", "input": {"bridge": "rlb-abcd"}, "output": {"bridge": "rlb-abcd"}},
    }
    module = {"address": "module.cluster", "resources": [bridge, *nodes]}
    return {"format_version": "1.0", "values": {"root_module": {"child_modules": [module]}}}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    script = tmp_path / local.HOST_SCRIPT
    script.parent.mkdir(parents=True)
    script.write_text(STUB)
    return tmp_path


def calls(root: Path) -> list[str]:
    log = root / local.HOST_SCRIPT.parent / "calls.log"
    return log.read_text().splitlines() if log.is_file() else []


def mark(root: Path, name: str) -> None:
    (root / local.HOST_SCRIPT.parent / name).touch()


def test_nothing_is_replaced_while_every_host_is_there(root: Path) -> None:
    assert local.CLOUD.gone_resources("cluster", root, state(node(0), node(1))) == []
    assert calls(root) == [
        "bridge-check rlb-abcd    disk=unset",
        "node-check rlb-abcd rl-abcd-0 rlvabcd0 /var/lib/nodes/c-0 disk=4g",
        "node-check rlb-abcd rl-abcd-1 rlvabcd1 /var/lib/nodes/c-1 disk=4g",
    ]


def test_a_lost_node_alone_is_replaced(root: Path) -> None:
    mark(root, "gone-rl-abcd-1")
    found = local.CLOUD.gone_resources("cluster", root, state(node(0), node(1)))
    assert found == [
        Gone("module.cluster.terraform_data.node[1]", "node c-1", "its sshd is not running")
    ]


def test_a_lost_bridge_takes_every_node_with_it(root: Path) -> None:
    mark(root, "gone-rlb-abcd")
    found = local.CLOUD.gone_resources("cluster", root, state(node(0), node(1)))
    assert [(g.address, g.reason) for g in found] == [
        ("module.cluster.terraform_data.bridge", "no such link"),
        ("module.cluster.terraform_data.node[0]", "its bridge is gone"),
        ("module.cluster.terraform_data.node[1]", "its bridge is gone"),
    ]
    assert [c.split()[0] for c in calls(root)] == ["bridge-check"]


def test_hosts_made_before_disks_were_sized_are_checked_as_plain_folders(root: Path) -> None:
    local.CLOUD.gone_resources(
        "cluster", root, state(node(0, disk_size=None), node(1, disk_size=""))
    )
    assert [c.split()[-1] for c in calls(root)[1:]] == ["disk=", "disk="]


def test_only_the_cluster_root_holds_hosts(root: Path) -> None:
    assert local.CLOUD.gone_resources("storage", root, state(node(0))) == []
    assert local.CLOUD.gone_resources("cluster", root, {}) == []
    assert calls(root) == []


def test_a_check_that_cannot_run_is_an_error_not_a_lost_host(root: Path) -> None:
    mark(root, "broken")
    with pytest.raises(OperationError, match=r"bridge-check failed \(exit 1\): .*ip: not found"):
        local.CLOUD.gone_resources("cluster", root, state(node(0)))


class SavedPlan:
    """The part of the Terraform runner that require_replacements reads."""

    def __init__(self, root: Path, changes: list[dict[str, Any]]) -> None:
        self.root = root
        (root / "tfplan").write_text("plan")
        self.changes = changes

    def show_json(self) -> dict[str, Any]:
        return json.loads(json.dumps({"resource_changes": self.changes}))


def change(address: str, *actions: str) -> dict[str, Any]:
    return {"address": address, "change": {"actions": list(actions)}}


def lost(rank: int) -> Any:
    return Gone(f"module.cluster.terraform_data.node[{rank}]", f"node c-{rank}", "gone")


def test_a_saved_plan_must_replace_every_host_lost_since(tmp_path: Path) -> None:
    plan = SavedPlan(
        tmp_path,
        [
            change("module.cluster.terraform_data.node[0]", "delete", "create"),
            change("module.cluster.terraform_data.node[1]", "no-op"),
        ],
    )
    require_replacements(plan, [lost(0)])  # it replaces node 0: applied as saved
    with pytest.raises(UsageError, match=r"node c-1 was lost after the plan was saved \(gone\)"):
        require_replacements(plan, [lost(0), lost(1)])
    (tmp_path / "tfplan").unlink()
    require_replacements(plan, [lost(1)])  # no saved plan: `up` plans afresh
