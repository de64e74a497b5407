"""Rendered HCL checked against the real provider's schema, where no provider binary exists.

The Google provider 6.50.0's schema ships in the npm package @cdktf/provider-google@16.12.1
(`package/.jsii`, generated from that provider's schema; camelCase names there, snake_case in HCL).
The package is fetched once into the test cache with `npm pack`, or from the registry's tarball
URL when npm is missing, checked against its published sha512, and reduced to a small JSON schema
kept next to it (under a file lock: two test processes fetch it once). ``schema_errors`` lists
every resource type, attribute, nested block and read that the provider does not have, and every
required attribute or block that is missing.

``nested_schema_errors`` does the same for the Nebius provider, whose nested settings are
attributes rather than blocks, against the schema its documentation states
(terraform/schemas/nebius-<version>.json, written by tools/nebius_schema.py).
"""

from __future__ import annotations

import base64
import contextlib
import difflib
import hashlib
import json
import os
import re
import shutil
import tarfile
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers.hcl import is_block_list, labelled, parse_hcl, unquote
from helpers.locks import file_lock
from helpers.paths import cache_root
from helpers.terraform import run

# The provider schema the modules are checked against, and where it comes from.
PROVIDER_VERSION = "6.50.0"
NPM_PACKAGE = "@cdktf/provider-google"
NPM_VERSION = "16.12.1"
NPM_TARBALL_URL = "https://registry.npmjs.org/@cdktf/provider-google/-/provider-google-16.12.1.tgz"
# dist.integrity of @cdktf/provider-google@16.12.1 as the npm registry publishes it.
NPM_TARBALL_SHA512 = (
    "KqNA/5RiFT07r0PSZ6/07cJ2zESUgbj1JchVj21iBFBZVUbD+578xA/k8eq/r0cbyEgLmg9eYWeVslaYah4DCQ=="
)
SCHEMA_FORMAT = 1  # bump when the reduced schema's shape changes


def cache_dir() -> Path:
    return cache_root() / f"cdktf-provider-google-{NPM_VERSION}"


def sha512_b64(path: Path) -> str:
    digest = hashlib.sha512()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return base64.b64encode(digest.digest()).decode()


def fetch_tarball(folder: Path) -> tuple[Path | None, list[str]]:
    """The package tarball in the cache: `npm pack` when npm is on PATH, else the registry's
    tarball URL with urllib. Returns (path or None, what went wrong)."""
    tarball = folder / f"cdktf-provider-google-{NPM_VERSION}.tgz"
    if tarball.exists() and sha512_b64(tarball) == NPM_TARBALL_SHA512:
        return tarball, []
    folder.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        download = Path(tmp) / "package.tgz"
        npm = shutil.which("npm")
        if npm:
            env = {
                **os.environ,
                "npm_config_cache": str(Path(tmp) / "npm-cache"),
                "npm_config_update_notifier": "false",
                "npm_config_fund": "false",
                "npm_config_audit": "false",
            }
            result = run(
                [npm, "pack", f"{NPM_PACKAGE}@{NPM_VERSION}", "--pack-destination", tmp],
                cwd=tmp,
                env=env,
                timeout=600,
            )
            packed = sorted(Path(tmp).glob("cdktf-provider-google-*.tgz"))
            if result.returncode == 0 and packed:
                packed[0].replace(download)
            else:
                problems.append(f"npm pack exited {result.returncode}: {result.stderr[-500:]}")
        if not download.exists():
            try:
                with (
                    urllib.request.urlopen(NPM_TARBALL_URL, timeout=120) as response,
                    download.open("wb") as out,
                ):
                    shutil.copyfileobj(response, out)
            except OSError as exc:
                problems.append(f"GET {NPM_TARBALL_URL}: {exc}")
                return None, problems
        actual = sha512_b64(download)
        if actual != NPM_TARBALL_SHA512:
            pytest.fail(f"{NPM_PACKAGE}@{NPM_VERSION}: sha512 {actual} is not the published one")
        os.replace(download, tarball)  # atomic: a parallel run sees the old state or this one
    return tarball, problems


def snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def hcl_names(prop: dict[str, Any]) -> set[str]:
    """HCL names of one jsii property. Mostly its camelCase name in snake_case; the registry link
    in its docs names it exactly where the two differ (e.g. vlan_tag8021q); cdktf renames a few
    that clash with its own members ("buildAttribute" for build)."""
    names = {snake(prop["name"])}
    anchor = re.search(r"#([a-z][a-z0-9_]*) ", prop.get("docs", {}).get("remarks", ""))
    if anchor:
        names.add(anchor.group(1))
    if prop["name"].endswith("Attribute"):
        names.add(snake(prop["name"][: -len("Attribute")]))
    return names


def provider_fqn(type_ref: dict[str, Any]) -> str | None:
    """The provider type a property refers to (a struct, list or output reference), if any."""
    if type_ref.get("fqn", "").startswith(NPM_PACKAGE + "."):
        return str(type_ref["fqn"])
    for option in type_ref.get("union", {}).get("types", []):
        found = provider_fqn(option)
        if found:
            return found
    element = type_ref.get("collection", {}).get("elementtype")
    return provider_fqn(element) if element else None


def reduce_jsii(assembly: dict[str, Any]) -> dict[str, Any]:
    """A small schema: for each resource, data source and the provider, its writable attributes
    (required or not) and nested blocks, recursively, and what an expression may read."""
    types: dict[str, Any] = assembly["types"]

    def block(struct_fqn: str, depth: int = 0) -> dict[str, Any]:
        attrs: dict[str, bool] = {}
        blocks: dict[str, Any] = {}
        for prop in types[struct_fqn].get("properties", []):
            required = not prop.get("optional", False)
            nested = provider_fqn(prop["type"])
            for name in hcl_names(prop):
                if nested and types.get(nested, {}).get("datatype") and depth < 12:
                    blocks[name] = {"required": required, "schema": block(nested, depth + 1)}
                else:
                    attrs[name] = required
        return {"attrs": attrs, "blocks": blocks}

    def reads(class_fqn: str, depth: int = 0) -> dict[str, Any]:
        props = [p for p in types[class_fqn].get("properties", []) if not p.get("static")]
        own = {p["name"] for p in props}
        out: dict[str, Any] = {}
        for prop in props:
            name = prop["name"]
            if name == "internalValue" or (name.endswith("Input") and name[:-5] in own):
                continue
            target = provider_fqn(prop["type"])
            if target and target in types and depth < 12:
                getter = next(
                    (m for m in types[target].get("methods", []) if m["name"] == "get"), None
                )
                if getter:  # a list or map of nested objects: its elements
                    target = provider_fqn(getter.get("returns", {}).get("type", {}))
            sub = reads(target, depth + 1) if target in types and depth < 12 else None
            for hcl in hcl_names(prop):
                out[hcl] = sub
        return out

    schema: dict[str, Any] = {
        "format": SCHEMA_FORMAT,
        "package": f"{NPM_PACKAGE}@{NPM_VERSION}",
        "provider_version": None,
        "resource": {},
        "data": {},
        "provider": None,
    }
    link = re.compile(
        r"hashicorp/google/(\d+\.\d+\.\d+)/docs/(resources|data-sources)/\w+ (google_\w+)\}"
    )
    for fqn, spec in types.items():
        base = spec.get("base")
        if spec.get("kind") != "class":
            continue
        if base == "cdktf.TerraformProvider":
            schema["provider"] = block(fqn + "Config")
            continue
        if base not in ("cdktf.TerraformResource", "cdktf.TerraformDataSource"):
            continue
        found = link.search(spec.get("docs", {}).get("summary", ""))
        if not found or fqn + "Config" not in types:
            continue
        version, kind, tf_type = found.groups()
        schema["provider_version"] = version
        entry = block(fqn + "Config")
        entry["reads"] = reads(fqn)
        schema["resource" if kind == "resources" else "data"][tf_type] = entry
    return schema


META = {
    "resource": {
        "count",
        "for_each",
        "depends_on",
        "provider",
        "lifecycle",
        "provisioner",
        "connection",
    },
    "data": {"count", "for_each", "depends_on", "provider", "lifecycle"},
    "provider": {"alias"},
}


def suggest(name: str, known: Any) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_body(
    body: dict[str, Any], spec: dict[str, Any], where: str, meta: set[str], errors: list[str]
) -> None:
    """Attributes and blocks of one HCL body against one schema block."""
    attrs, blocks = spec["attrs"], spec["blocks"]
    seen: set[str] = set()
    for key, value in body.items():
        if key.startswith("__") or key in meta:
            continue
        if key == "dynamic":
            for dynamic in value:
                for label, dyn_body in dynamic.items():
                    if label.startswith("__"):
                        continue
                    name = unquote(label)
                    if name not in blocks:
                        errors.append(f"{where}: no block {name!r}{suggest(name, blocks)}")
                        continue
                    seen.add(name)
                    for content in dyn_body.get("content", []):
                        check_body(
                            content, blocks[name]["schema"], f"{where}.{name}", set(), errors
                        )
            continue
        if is_block_list(value):
            if key not in blocks:
                kind = "an attribute, not a block" if key in attrs else "no such block"
                errors.append(f"{where}: {key!r} is {kind}{suggest(key, blocks)}")
                continue
            seen.add(key)
            for item in value:
                check_body(item, blocks[key]["schema"], f"{where}.{key}", set(), errors)
        elif key in attrs:
            seen.add(key)
        elif key in blocks:
            errors.append(f"{where}: {key!r} is a block: write {key} {{ ... }}")
        else:
            known = list(attrs) + list(blocks)
            errors.append(f"{where}: no attribute {key!r}{suggest(key, known)}")
    for name, required in attrs.items():
        if required and name not in seen:
            errors.append(f"{where}: required attribute {name!r} is missing")
    for name, block in blocks.items():
        if block["required"] and name not in seen:
            errors.append(f"{where}: required block {name!r} is missing")


STEP = re.compile(r"\.([a-z_][a-z0-9_]*)|\[[^\[\]]*\]|\.\*")
DIRECT_REF = re.compile(
    r"(?<![\w.])(data\.)?(google_[a-z0-9_]+)\.([a-z_][a-z0-9_-]*)"
    r"((?:\[[^\[\]]*\]|\.[a-z_][a-z0-9_]*|\.\*)*)"
)
FOR_BINDING = re.compile(
    r"\bfor\s+(?:[a-z_]\w*\s*,\s*)?([a-z_]\w*)\s+in\s+(data\.)?(google_[a-z0-9_]+)\.([a-z_][a-z0-9_-]*)\s*:"
)


def strings_in(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from strings_in(value)
    elif isinstance(node, list):
        for value in node:
            yield from strings_in(value)


def check_path(reads: dict[str, Any] | None, path: str, where: str, errors: list[str]) -> None:
    """Walk `.attr[0].nested` through what the provider lets an expression read."""
    current = reads
    for step in STEP.finditer(path):
        name = step.group(1)
        if name is None:  # an index or a splat
            continue
        if current is None:  # a primitive, a map or a JSON value: nothing more to check
            return
        if name not in current:
            errors.append(f"{where}: cannot read {name!r}{suggest(name, current)}")
            return
        current = current[name]


def reference_patterns(prefix: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """DIRECT_REF and FOR_BINDING for another provider's type prefix (e.g. "nebius")."""
    if prefix == "google":
        return DIRECT_REF, FOR_BINDING
    direct = re.compile(DIRECT_REF.pattern.replace("(google_", f"({prefix}_"))
    binding = re.compile(FOR_BINDING.pattern.replace("(google_", f"({prefix}_"))
    return direct, binding


def check_references(
    parsed: dict[str, Any],
    declared: set[tuple[str, str, str]],
    schema: dict[str, Any],
    where: str,
    errors: list[str],
    prefix: str = "google",
) -> None:
    direct_ref, for_binding = reference_patterns(prefix)
    for text in strings_in(parsed):
        found: list[tuple[str, str, str, str]] = []
        for match in direct_ref.finditer(text):
            kind = "data" if match.group(1) else "resource"
            found.append((kind, match.group(2), match.group(3), match.group(4)))
        for binding in for_binding.finditer(text):
            kind = "data" if binding.group(2) else "resource"
            var = binding.group(1)
            for use in re.finditer(rf"(?<![\w.]){var}((?:\[[^\[\]]*\]|\.[a-z_][a-z0-9_]*)+)", text):
                found.append((kind, binding.group(3), binding.group(4), "[0]" + use.group(1)))
        for kind, tf_type, name, path in found:
            entry = schema[kind].get(tf_type)
            label = f"{where}: {'data.' if kind == 'data' else ''}{tf_type}.{name}"
            if entry is None:
                errors.append(f"{label}: no {kind} type {tf_type!r}")
            elif (kind, tf_type, name) not in declared:
                errors.append(f"{label}: not declared in this module")
            else:
                check_path(entry["reads"], path, label, errors)


def schema_errors(files: dict[str, str], schema: dict[str, Any]) -> list[str]:
    """Everything in one module's files ({name: text}) that the provider schema does not have."""
    errors: list[str] = []
    parsed = {name: parse_hcl(text) for name, text in files.items()}
    declared: set[tuple[str, str, str]] = set()
    for name, tree in parsed.items():
        for kind in ("resource", "data"):
            for (tf_type, label), body in labelled(tree, kind):
                declared.add((kind, tf_type, label))
                where = f"{name}: {'data.' if kind == 'data' else ''}{tf_type}.{label}"
                entry = schema[kind].get(tf_type)
                if entry is None:
                    known = schema[kind]
                    errors.append(f"{where}: no {kind} type {tf_type!r}{suggest(tf_type, known)}")
                    continue
                check_body(body, entry, where, META[kind], errors)
        for (provider,), body in labelled(tree, "provider"):
            if provider == "google":
                check_body(
                    body, schema["provider"], f"{name}: provider.google", META["provider"], errors
                )
    for name, tree in parsed.items():
        check_references(tree, declared, schema, name, errors)
    return errors


def google_schema() -> dict[str, Any]:
    """The reduced Google provider schema: from the cache, or fetched and reduced once."""
    folder = cache_dir()
    reduced = folder / f"google-{PROVIDER_VERSION}-schema.json"
    with file_lock(folder.parent / f".{folder.name}.lock"):
        if reduced.exists():
            with contextlib.suppress(ValueError):
                cached: dict[str, Any] = json.loads(reduced.read_text())
                if cached.get("format") == SCHEMA_FORMAT:
                    return cached
        tarball, problems = fetch_tarball(folder)
        if tarball is None:
            pytest.skip(
                f"{NPM_PACKAGE}@{NPM_VERSION} could not be fetched (no registry here?): "
                + "; ".join(problems)
            )
        with tarfile.open(tarball, "r:gz") as archive:
            member = archive.extractfile("package/.jsii")
            assert member is not None, "package/.jsii is missing from the tarball"
            assembly = json.load(member)
        assert assembly["name"] == NPM_PACKAGE and assembly["version"] == NPM_VERSION
        schema = reduce_jsii(assembly)
        tmp = reduced.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(schema))
        os.replace(tmp, reduced)
        return schema


# --- Providers whose nested settings are attributes (the plugin framework): Nebius ---------------
#
# The Nebius provider has no published machine-readable schema here and no binary can run, so its
# schema is the one its documentation states, as tools/nebius_schema.py writes it from the docs of
# one release (terraform/schemas/nebius-<version>.json, checked in, with the source commit).
# Its nested settings are attributes, written `boot_disk = { ... }` and `network_interfaces =
# [{ ... }]`, never blocks; read-only attributes cannot be written.

NEBIUS_PROVIDER_VERSION = "0.6.32"
REPO_SCHEMAS = Path(__file__).resolve().parents[2] / "terraform" / "schemas"
DOCS_SCHEMA_FORMAT = 1
# An object literal this check could not read (an expression other than a conditional).
OPAQUE = object()


def attribute_reads(attributes: dict[str, Any]) -> dict[str, Any]:
    """What an expression may read under these attributes (check_path's shape)."""
    return {
        name: attribute_reads(spec["attributes"]) if "attributes" in spec else None
        for name, spec in attributes.items()
    }


def docs_schema(path: Path) -> dict[str, Any]:
    """A schema written by tools/nebius_schema.py, with each entry's "reads" added."""
    schema: dict[str, Any] = json.loads(path.read_text())
    assert schema.get("format") == DOCS_SCHEMA_FORMAT, f"{path}: format {schema.get('format')}"
    for kind in ("resource", "data"):
        for entry in schema[kind].values():
            entry["reads"] = attribute_reads(entry["attributes"])
    return schema


def nebius_schema() -> dict[str, Any]:
    return docs_schema(REPO_SCHEMAS / f"nebius-{NEBIUS_PROVIDER_VERSION}.json")


def conditional_branches(expression: str) -> list[str] | None:
    """The two results of a top-level `${cond ? a : b}`, or None for any other expression."""
    if not (expression.startswith("${") and expression.endswith("}")):
        return None
    body = expression[2:-1]
    depth, question, pending = 0, None, 0
    in_string = escaped = False
    for index, char in enumerate(body):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
            continue
        if char == '"':
            in_string = True
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif depth == 0 and char == "?":
            if question is None:
                question = index
            else:
                pending += 1
        elif depth == 0 and char == ":" and question is not None:
            if pending:
                pending -= 1
            else:
                return [body[question + 1 : index].strip(), body[index + 1 :].strip()]
    return None


def branch_value(text: str) -> Any:
    """A conditional's result as python-hcl2 reads it: None for null, a dict or list for an
    object or tuple literal, a "${...}" string for a nested conditional, else OPAQUE."""
    if text == "null":
        return None
    if text.startswith(("{", "[")):
        try:
            value = parse_hcl(f"x = {text}\n")["x"]
        except Exception:
            return OPAQUE
        if isinstance(value, (dict, list)) or conditional_branches(str(value)):
            return value
        return OPAQUE
    if conditional_branches("${" + text + "}"):
        return "${" + text + "}"
    return OPAQUE


def check_nested_value(
    value: Any, spec: dict[str, Any], where: str, errors: list[str], single: bool = False
) -> None:
    """The value written for a nested attribute: an object (single), a list or set of objects,
    or a map of objects; a conditional's two results each, null allowed."""
    nesting = "single" if single else spec["nesting"]
    name = where.rsplit(".", 1)[-1]
    if value is None:
        return
    if isinstance(value, str):
        branches = conditional_branches(value)
        if branches is None:
            errors.append(
                f"{where}: set by an expression this check cannot read ({value}): write an "
                "object literal, or `condition ? { ... } : null`"
            )
            return
        for branch in branches:
            result = branch_value(branch)
            if result is OPAQUE:
                errors.append(f"{where}: a conditional result this check cannot read: {branch}")
            else:
                check_nested_value(result, spec, where, errors, single)
        return
    if nesting == "single":
        if isinstance(value, dict):
            check_attributes(value, spec["attributes"], where, set(), errors)
        else:
            errors.append(f"{where}: an object, not a list: write {name} = {{ ... }}")
    elif nesting in ("list", "set"):
        if not isinstance(value, list):
            errors.append(f"{where}: a list of objects: write {name} = [{{ ... }}]")
            return
        for index, item in enumerate(value):
            check_nested_value(item, spec, f"{where}[{index}]", errors, single=True)
    elif nesting == "map":
        if not isinstance(value, dict):
            errors.append(f"{where}: a map of objects: write {name} = {{ key = {{ ... }} }}")
            return
        for key, item in value.items():
            check_nested_value(item, spec, f"{where}[{unquote(key)}]", errors, single=True)


def check_attributes(
    body: dict[str, Any],
    attributes: dict[str, Any],
    where: str,
    meta: set[str],
    errors: list[str],
) -> None:
    """One body (a resource's, or an object written for a nested attribute) against the
    attributes of its schema: each one written exists and is not read-only, nested ones are
    written as attributes (not blocks) and checked in turn, and every required one is written."""
    seen: set[str] = set()
    for key, value in body.items():
        if key.startswith("__") or key in meta:
            continue
        if key == "dynamic":
            for dynamic in value:
                for label in dynamic:
                    if label.startswith("__"):
                        continue
                    name = unquote(label)
                    if name in attributes:
                        seen.add(name)
                        errors.append(
                            f"{where}: {name!r} is an attribute: a dynamic block cannot make it; "
                            f"write {name} = condition ? {{ ... }} : null"
                        )
                    else:
                        errors.append(f"{where}: no block {name!r}{suggest(name, attributes)}")
            continue
        name = unquote(key)
        spec = attributes.get(name)
        if spec is None:
            errors.append(f"{where}: no attribute {name!r}{suggest(name, attributes)}")
            continue
        seen.add(name)
        if spec["mode"] == "computed":
            errors.append(f"{where}: {name!r} is read-only (the provider sets it)")
            continue
        if is_block_list(value):
            if spec.get("block"):
                for item in value:
                    check_attributes(item, spec["attributes"], f"{where}.{name}", set(), errors)
            else:
                errors.append(
                    f"{where}: {name!r} is an attribute, not a block: write {name} = "
                    + ("[{ ... }]" if spec.get("nesting") in ("list", "set") else "{ ... }")
                )
            continue
        if spec.get("block"):
            errors.append(f"{where}: {name!r} is a block: write {name} {{ ... }}")
        elif "nesting" in spec:
            check_nested_value(value, spec, f"{where}.{name}", errors)
    for name, spec in attributes.items():
        if spec["mode"] == "required" and name not in seen:
            errors.append(f"{where}: required attribute {name!r} is missing")


def nested_schema_errors(files: dict[str, str], schema: dict[str, Any]) -> list[str]:
    """Everything in one module's files ({name: text}) that a docs schema (docs_schema) does not
    have: unknown resource types, attributes and nested attributes, read-only attributes written,
    nested attributes written as blocks, required attributes missing, and reads of attributes
    that do not exist. Resources of other providers are left alone."""
    prefix = schema["provider_source"].split("/")[1]
    errors: list[str] = []
    parsed = {name: parse_hcl(text) for name, text in files.items()}
    declared: set[tuple[str, str, str]] = set()
    for name, tree in parsed.items():
        for kind in ("resource", "data"):
            for (tf_type, label), body in labelled(tree, kind):
                declared.add((kind, tf_type, label))
                if not tf_type.startswith(prefix + "_"):
                    continue
                where = f"{name}: {'data.' if kind == 'data' else ''}{tf_type}.{label}"
                entry = schema[kind].get(tf_type)
                if entry is None:
                    documented = schema.get(f"{kind}_types", [])
                    if tf_type in documented:
                        errors.append(
                            f"{where}: {tf_type!r} is documented but not in the schema file: "
                            "add it with tools/nebius_schema.py --resource/--data-source"
                        )
                    else:
                        known = documented or list(schema[kind])
                        errors.append(
                            f"{where}: no {kind} type {tf_type!r}{suggest(tf_type, known)}"
                        )
                    continue
                check_attributes(body, entry["attributes"], where, META[kind], errors)
        for (provider,), body in labelled(tree, "provider"):
            if provider == prefix:
                check_attributes(
                    body,
                    schema["provider"]["attributes"],
                    f"{name}: provider.{prefix}",
                    META["provider"],
                    errors,
                )
    for name, tree in parsed.items():
        check_references(tree, declared, schema, name, errors, prefix)
    return errors
