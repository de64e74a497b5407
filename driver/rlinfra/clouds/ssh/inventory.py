"""Hosts of the `ssh` cloud from an Ansible inventory file (``ssh.inventory``).

A team that already runs Ansible against its machines names that inventory instead of listing
the hosts again::

    ssh:
      inventory: inventory.ini      # relative to the profile's folder
      inventory_group: gpu          # default: every host of the file

Both of Ansible's static formats are read, without Ansible:

- INI: ``[group]`` sections of ``NAME key=value ...`` lines, ``[group:vars]`` and
  ``[group:children]``; a line starting with ``#`` or ``;`` is a comment.
- YAML: ``all: {hosts: {NAME: {key: value}}, children: {...}, vars: {...}}``.

Of each host's variables these are used: ``ansible_host`` (address; default the host's name, or
its ``name:port``), ``ansible_user``, ``ansible_port``, ``ansible_ssh_private_key_file`` (and their
``ansible_ssh_*`` aliases) and ``rlinfra_private_address`` (the address the other hosts reach it
at). Group variables apply to the group's hosts and its children's, merged in Ansible's order
(shallow groups first, then ``ansible_group_priority``, then name; a host's own win).
Connection settings rlinfra cannot honour (``ansible_connection`` other than ssh, extra SSH
arguments, passwords) and templated values are refused, naming the host and variable. Host patterns (``node[1:4]``), dynamic inventories (scripts,
plugins) and vaulted values are refused with the line that has them. A host's name becomes its
node name when it is one (lowercase letters, digits, '-'); otherwise the node is named by rank.
The hosts come in the file's order, once each (the first group that lists a host places it).

``load_profile`` reads the file when the profile is loaded and writes the hosts into the
profile's ``ssh.hosts``, so plans, records and ``run`` see the hosts the inventory had then.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import yaml

from rlinfra.errors import ProfileError

# A node name: what an inventory's host names become when they are one.
HOST_NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,30}$")

# Ansible's variable (and its older aliases) -> the ssh host's field.
VARIABLES = {
    "ansible_host": "address",
    "ansible_ssh_host": "address",
    "ansible_user": "user",
    "ansible_ssh_user": "user",
    "ansible_port": "port",
    "ansible_ssh_port": "port",
    "ansible_ssh_private_key_file": "identity_file",
    "ansible_private_key_file": "identity_file",
    "rlinfra_private_address": "private_address",
}
# Connection settings rlinfra would otherwise silently drop: refused, with what to use instead.
REFUSED = {
    "ansible_connection": "rlinfra reaches hosts over SSH only",
    "ansible_ssh_common_args": "give a bastion as ssh.jump (or a host's jump)",
    "ansible_ssh_extra_args": "give a bastion as ssh.jump (or a host's jump)",
    "ansible_ssh_args": "give a bastion as ssh.jump (or a host's jump)",
    "ansible_password": "rlinfra logs in with keys (identity_file or agent)",
    "ansible_ssh_pass": "rlinfra logs in with keys (identity_file or agent)",
}
_PATTERN = re.compile(r"\[[^\]]*:[^\]]*\]")
# `name:port` (not an IPv6 address, which has more than one colon).
_HOST_PORT = re.compile(r"^([^:]+):(\d+)$")


class _Tree:
    """Groups (hosts in order, children, variables) and each host's own variables."""

    def __init__(self) -> None:
        self.order: list[str] = []
        self.host_vars: dict[str, dict[str, Any]] = {}
        self.members: dict[str, list[str]] = {}
        self.children: dict[str, list[str]] = {}
        self.group_vars: dict[str, dict[str, Any]] = {}

    def add_host(self, group: str, name: str, variables: dict[str, Any]) -> None:
        split = _HOST_PORT.match(name)
        if split:  # `name:port` sets the host's own port, as in Ansible
            name = split.group(1)
            variables = {"ansible_port": split.group(2), **variables}
        if name not in self.host_vars:
            self.order.append(name)
            self.host_vars[name] = {}
        self.host_vars[name].update(variables)
        members = self.members.setdefault(group, [])
        if name not in members:
            members.append(name)

    def hosts_of(self, group: str, seen: frozenset[str] = frozenset()) -> list[str]:
        if group == "all":
            return list(self.order)
        found = list(self.members.get(group, []))
        for child in self.children.get(group, []):
            if child not in seen:
                found += [h for h in self.hosts_of(child, seen | {group}) if h not in found]
        return [h for h in self.order if h in found]

    def depth(self, group: str, seen: frozenset[str] = frozenset()) -> int:
        """How far below ``all`` a group is (its deepest path): Ansible merges group variables
        from the shallowest group to the deepest, so a child's win over its parent's."""
        if group == "all":
            return 0
        parents = [g for g, kids in self.children.items() if group in kids and g not in seen]
        return 1 + max((self.depth(g, seen | {group}) for g in parents), default=0)

    def variables(self, host: str) -> dict[str, Any]:
        """Ansible's order: ``all``'s variables, then each group of the host by (depth,
        ``ansible_group_priority``, name), then the host's own."""
        groups = [g for g in self.group_vars if g != "all" and host in self.hosts_of(g)]

        def rank(group: str) -> tuple[int, int, str]:
            priority = self.group_vars[group].get("ansible_group_priority", 1)
            return (self.depth(group), int(priority) if str(priority).isdigit() else 1, group)

        merged = dict(self.group_vars.get("all", {}))
        for group in sorted(groups, key=rank):
            merged.update(self.group_vars[group])
        merged.update(self.host_vars[host])
        return merged


def _value(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _parse_ini(text: str, source: str) -> _Tree:
    tree = _Tree()
    group, kind = "ungrouped", "hosts"
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        where = f"line {number}"
        if line.startswith("["):
            if not line.endswith("]"):
                raise ProfileError(source, where, f"unclosed section {line!r}")
            group, _, kind = line[1:-1].strip().partition(":")
            kind = kind or "hosts"
            if kind not in ("hosts", "vars", "children"):
                raise ProfileError(source, where, f"unknown section kind {kind!r}")
            continue
        if kind == "children":
            tree.children.setdefault(group, []).append(line.split()[0])
            continue
        if kind == "vars":
            key, sep, value = line.partition("=")
            if not sep:
                raise ProfileError(source, where, f"expected key=value, got {line!r}")
            tree.group_vars.setdefault(group, {})[key.strip()] = _value(value)
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError as exc:
            raise ProfileError(source, where, f"cannot read {line!r}: {exc}") from None
        if not words:
            continue
        name, variables = words[0], {}
        if _PATTERN.search(name):
            raise ProfileError(source, where, f"host patterns ({name}) are not read; list hosts")
        for word in words[1:]:
            key, sep, value = word.partition("=")
            if not sep:
                raise ProfileError(source, where, f"{word!r} is not key=value")
            variables[key] = value
        tree.add_host(group, name, variables)
    return tree


def _mapping(value: Any, source: str, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ProfileError(source, where, "must be a mapping")
    return value


def _parse_yaml(data: Any, source: str) -> _Tree:
    tree = _Tree()
    top = _mapping(data, source, "")

    def walk(group: str, body: Any, where: str) -> None:
        body = _mapping(body, source, where)
        for key in body:
            if key not in ("hosts", "children", "vars"):
                raise ProfileError(source, f"{where}.{key}", "expected hosts, children or vars")
        for name, variables in _mapping(body.get("hosts"), source, f"{where}.hosts").items():
            if _PATTERN.search(str(name)):
                raise ProfileError(
                    source, f"{where}.hosts.{name}", "host patterns are not read; list hosts"
                )
            tree.add_host(group, str(name), _mapping(variables, source, f"{where}.hosts.{name}"))
        tree.group_vars.setdefault(group, {}).update(
            _mapping(body.get("vars"), source, f"{where}.vars")
        )
        for child, child_body in _mapping(
            body.get("children"), source, f"{where}.children"
        ).items():
            tree.children.setdefault(group, []).append(str(child))
            walk(str(child), child_body, f"{where}.children.{child}")

    for group, body in top.items():
        walk(str(group), body, str(group))
    return tree


def _host(name: str, variables: dict[str, Any], source: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"address": name}
    if HOST_NAME_RE.fullmatch(name):
        entry["name"] = name
    for variable, why in REFUSED.items():
        if variable in variables and not (
            variable == "ansible_connection" and str(variables[variable]) in ("ssh", "smart")
        ):
            raise ProfileError(source, f"{name}.{variable}", f"not read: {why}")
    for variable, field in VARIABLES.items():
        if variable not in variables:
            continue
        value = variables[variable]
        text = str(value)
        if not isinstance(value, str | int) or "$ANSIBLE_VAULT" in text or "{{" in text:
            raise ProfileError(
                source, f"{name}.{variable}", "must be a plain value (no templates or vault)"
            )
        entry[field] = int(text) if field == "port" and text.isdigit() else text
    return entry


def read_inventory(path: Path, group: str | None) -> list[dict[str, Any]]:
    """The hosts of ``group`` (every host when None) as ``ssh.hosts`` entries; errors name the
    inventory file and the line or key."""
    source = str(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ProfileError(source, "", f"cannot read the inventory: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ProfileError(source, "", f"not UTF-8 text (byte {exc.start})") from None
    if path.suffix in (".yaml", ".yml"):
        try:
            tree = _parse_yaml(yaml.safe_load(text), source)
        except yaml.YAMLError:
            raise ProfileError(source, "", "not valid YAML") from None
    else:
        tree = _parse_ini(text, source)
    wanted = group or "all"
    known = {"all", *tree.members, *tree.children, *tree.group_vars}
    if wanted not in known:
        raise ProfileError(
            source, "", f"no group {wanted!r} (groups: {', '.join(sorted(known - {'all'}))})"
        )
    names = tree.hosts_of(wanted)
    if not names:
        raise ProfileError(source, "", f"group {wanted!r} has no hosts")
    return [_host(name, tree.variables(name), source) for name in names]


def expand(data: Any, profile_path: Path, source: str) -> Any:
    """``data`` (a parsed profile) with ``ssh.inventory``'s hosts written into ``ssh.hosts``."""
    if not isinstance(data, dict) or not isinstance(data.get("ssh"), dict):
        return data
    section = dict(data["ssh"])
    inventory = section.get("inventory")
    if inventory is None:
        return data
    if not isinstance(inventory, str) or not inventory.strip():
        raise ProfileError(source, "ssh.inventory", "give the path of an Ansible inventory file")
    if section.get("hosts"):
        raise ProfileError(source, "ssh.inventory", "give hosts or an inventory, not both")
    group = section.get("inventory_group")
    if group is not None and not isinstance(group, str):
        raise ProfileError(source, "ssh.inventory_group", "must be a group name")
    path = Path(inventory).expanduser()
    if not path.is_absolute():
        path = profile_path.parent / path
    if not path.is_file():
        raise ProfileError(source, "ssh.inventory", f"{path}: no such file")
    section["hosts"] = read_inventory(path, group)
    section["inventory"] = str(path.resolve())
    return {**data, "ssh": section}
